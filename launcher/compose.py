"""Compose `conf/` with Hydra's compose API and turn Hydra's failures into one-line errors.

We use the compose API rather than `@hydra.main` so that every run is validated (and every
sweep point resolved) before anything starts, and so that a user mistake is one `error:` line.
"""
from __future__ import annotations

import re
from typing import Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from launcher.errors import ConfigError

_CONF_MODULE = "launcher.conf"
FREE_FORM = ("launcher.env.", "recipe.")  # dict options whose keys the user chooses
_initialised = False


def _initialise() -> None:
    global _initialised
    if _initialised:
        return
    from hydra import initialize_config_module

    from launcher.config import register_configs

    register_configs()
    # initialize_config_module() installs global Hydra state for the rest of the process
    initialize_config_module(config_module=_CONF_MODULE, version_base=None).__enter__()
    _initialised = True


def compose_config(overrides: Sequence[str], with_hydra: bool = False) -> DictConfig:
    """Compose the config for `overrides` (Hydra command-line syntax); raise ConfigError."""
    _initialise()
    from hydra import compose

    try:
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=with_hydra)
    except Exception as exc:  # Hydra raises several unrelated types for user mistakes
        raise ConfigError(explain_hydra_error(exc, overrides)) from None


def explain_hydra_error(exc: BaseException, overrides: Sequence[str]) -> str:
    """One line for a Hydra/OmegaConf failure, with the quoted form to type where that is the fix."""
    text = _flatten(exc)
    kind = type(exc).__name__
    if kind == "OverrideParseException":
        bad = _first(overrides, lambda o: any(c in o for c in "()[]"))
        if bad is not None:
            key, _, value = bad.partition("=")
            if value.startswith("[") and value.endswith("]"):  # a list: quote each element
                items = ",".join(f"'{v.strip()}'" for v in value[1:-1].split(",") if v.strip())
                return (f"cannot parse override {bad!r}: quote each list element that holds "
                        f"'=', ':' or brackets: type \"{key}=[{items}]\"")
            bare = value.replace("(", "").replace(")", "")
            alt = f", or without parentheses: {key}={bare}" if "(" in value and "[" not in value else ""
            return (f"cannot parse override {bad!r}: Hydra's override grammar needs quotes around "
                    f"values with ( ) or [ ]: type \"{key}='{value}'\"{alt}")
        return f"cannot parse override: {text}"
    if "Ambiguous value" in text:
        bad = _first(overrides, lambda o: "," in o.partition("=")[2])
        if bad is not None:
            key, _, value = bad.partition("=")
            return (f"{bad!r}: a comma list is a sweep to Hydra: quote it, \"{key}='{value}'\" "
                    f"(or run a sweep with -m)")
    match = re.search(r"Could not override '([^']+)'", text) or re.search(r"Key '([^']+)' not in", text)
    if match:
        key = match.group(1)
        if key.startswith(FREE_FORM):  # dicts whose keys are the user's own: Hydra wants `+`
            return f"{key!r} adds a key to {key.rsplit('.', 1)[0]}: write it as +{_first(overrides, lambda o: o.startswith(key)) or key}"
        return f"unknown config key {key!r}{_suggest(key)} (`areal-launch --cfg job` prints every key)"
    match = re.search(r"Error merging override (\S+)", text)
    if match:
        detail = text.split("full_key:")[0].split(match.group(1), 1)[-1].strip(" .:")
        return f"invalid value in {match.group(1)!r}: {detail}"
    match = re.search(r"Could not find '([^']+)'.*?Available options in '[^']+': ([^\n]*?) Config search", text)
    if match:
        return f"no config {match.group(1)!r}: choose one of {match.group(2).strip()}"
    return f"invalid configuration: {text}"


def _flatten(exc: BaseException) -> str:
    """Hydra wraps the useful message in __cause__; join the chain into one line."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return " ".join(" ".join(parts).split())


def _suggest(key: str) -> str:
    """`did you mean` from the declared schema (every user key is declared there)."""
    import difflib

    from omegaconf import OmegaConf

    from launcher.config import LaunchConfig

    node = OmegaConf.to_container(OmegaConf.structured(LaunchConfig))
    prefix, _, leaf = key.rpartition(".")
    for part in prefix.split(".") if prefix else []:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return ""
    close = difflib.get_close_matches(leaf, [str(k) for k in node], n=1)
    return f": did you mean {(prefix + '.' if prefix else '') + close[0]!r}?" if close else ""


def _first(items: Sequence[str], pred) -> Optional[str]:
    return next((i for i in items if pred(i)), None)


def to_container(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
