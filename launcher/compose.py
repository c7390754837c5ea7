"""Compose `conf/` with Hydra's compose API, once, into typed values; Hydra's failures become
one-line errors.

We use the compose API rather than `@hydra.main` so that every run is validated (and every
sweep point resolved) before anything starts, and so that a user mistake is one `error:` line.
`run_spec` is the only place that reads the composed config: everything after it takes the
dataclasses of launcher.config.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import copy

from omegaconf import DictConfig, OmegaConf, open_dict

from launcher.config import LaunchConfig
from launcher.errors import ConfigError

_CONF_MODULE = "launcher.conf"
FREE_FORM = ("launcher.env.",)  # dicts whose keys the user chooses: the one place for `+`
_initialised = False


@dataclass(frozen=True)
class RunSpec:
    """A composed run: the typed config, and where Hydra says its folders go."""

    config: LaunchConfig
    run_dir: str
    sweep_dir: str


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
    check_overrides(overrides)
    _initialise()
    from hydra import compose

    try:
        cfg = compose(config_name="config", overrides=list(overrides),
                      return_hydra_config=with_hydra)
    except Exception as exc:  # Hydra raises several unrelated types for user mistakes
        raise ConfigError(explain_hydra_error(exc, overrides)) from None
    check_added_keys(cfg, overrides)
    return cfg


def run_spec(cfg: DictConfig) -> RunSpec:
    """The typed config (every interpolation resolved, every value checked) and the folders."""
    job = cfg
    if "hydra" in cfg:
        job = copy.copy(cfg)
        with open_dict(job):
            del job["hydra"]
    spec = _resolved(lambda: OmegaConf.to_object(job))
    run_dir = _resolved(lambda: str(OmegaConf.select(cfg, "hydra.run.dir") or "outputs"))
    sweep_dir = _resolved(lambda: str(OmegaConf.select(cfg, "hydra.sweep.dir") or "multirun"))
    assert isinstance(spec, LaunchConfig)
    return RunSpec(spec, run_dir, sweep_dir)


def _resolved(make: Callable[[], Any]) -> Any:
    """`make()`, with an interpolation that fails (`${oc.env:NOPE}`) as one line."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return make()
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "a value"
        message = str(exc).splitlines()[0].strip()
        fix = ""
        if "oc.env" in message or "Environment variable" in message:
            fix = " (export it, or give a default: ${oc.env:NAME,default})"
        raise ConfigError(f"{key}: cannot resolve: {message}{fix}") from None


# ----------------------------------------------------------------------------- + and ~
def check_overrides(overrides: Sequence[str]) -> None:
    """`~key` deletes a key and `+key` adds one: only the user's own dicts take either."""
    for o in overrides:
        if o.startswith("~"):
            key = o[1:].partition("=")[0]
            if not key.startswith(FREE_FORM):
                fix = (f"to turn {key} off write {key}=none" if key in
                       ("rollout", "actor", "critic", "ref", "teacher") else
                       "set it to another value instead")
                raise ConfigError(f"{_shown(o)}: removing a declared key is not supported; "
                                  f"{fix}")


def check_added_keys(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """A `+key` that lands in a declared (typed) section is a typo, not a new option."""
    for o in overrides:
        if not o.startswith("+"):
            continue
        key = o.lstrip("+").partition("=")[0]
        parent, _, _ = key.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        if isinstance(node, DictConfig) and OmegaConf.get_type(node) not in (dict, None):
            raise ConfigError(f"unknown config key {key!r}{_suggest(key)}: `+` adds keys only "
                              f"to {', '.join(f + '*' for f in FREE_FORM)} "
                              "(`areal-launch --cfg job` prints every key)")


def _shown(text: str) -> str:
    """A value as one printable line (a newline inside would break the one-line promise)."""
    return repr(text) if not text.isprintable() else text


# ----------------------------------------------------------------------------- Hydra's errors
def explain_hydra_error(exc: BaseException, overrides: Sequence[str]) -> str:
    """One line for a Hydra/OmegaConf failure, with the quoted form to type where that is the fix."""
    text = _flatten(exc)
    kind = type(exc).__name__
    if kind == "OverrideParseException":
        bad = _first(overrides, lambda o: any(c in o for c in "()[]"))
        if bad is not None and bad.isprintable():
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
    if "Exceeds the limit" in text and "digits" in text:  # Python's int() refused a huge number
        bad = max(overrides, key=lambda o: max((len(d) for d in re.findall(r"\d+", o)),
                                                default=0))
        key = bad.partition("=")[0]
        return f"{key}: a number far too large ({len(bad)} characters); sizes are GPU counts"
    if "Ambiguous value" in text:
        bad = _first(overrides, lambda o: "," in o.partition("=")[2])
        if bad is not None:
            key, _, value = bad.partition("=")
            quoted = f"\"{key}='{value}'\"" if bad.isprintable() else "it in quotes"
            return (f"{_shown(bad)}: a comma list is a sweep to Hydra: quote it, {quoted} "
                    f"(or run a sweep with -m)")
    match = re.search(r"Could not append to config\. An item is already at '([^']+)'", text)
    if match:
        return f"{match.group(1)!r} exists already: set it without the leading +"
    match = re.search(r"Could not override '([^']+)'", text) or re.search(r"Key '([^']+)' not in", text)
    if match:
        key = match.group(1)
        if key.startswith(FREE_FORM):  # dicts whose keys are the user's own: Hydra wants `+`
            given = _first(overrides, lambda o: o.startswith(key)) or key
            return f"{key!r} adds a key to {key.rsplit('.', 1)[0]}: write it as +{_shown(given)}"
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
    cur: Optional[BaseException] = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        parts.append(str(cur))
        cur = cur.__cause__ or cur.__context__
    return " ".join(" ".join(parts).split())


def _suggest(key: str) -> str:
    """`did you mean` from the declared keys (the schema, every group's options included)."""
    import difflib

    prefix, _, leaf = key.rpartition(".")
    try:
        node: Any = compose_config([])
    except ConfigError:
        return ""
    for part in prefix.split(".") if prefix else []:
        node = node.get(part) if isinstance(node, DictConfig) else None
    if not isinstance(node, DictConfig):
        return ""
    close = difflib.get_close_matches(leaf, [str(k) for k in node], n=1)
    return f": did you mean {(prefix + '.' if prefix else '') + close[0]!r}?" if close else ""


def _first(items: Sequence[str], pred: Callable[[str], bool]) -> Optional[str]:
    return next((i for i in items if pred(i)), None)
