"""What an entry point that is not ours gets: every key our schema does not declare.

A config written for another trainer holds the launcher's keys and the trainer's in one file
(`seed`, `gconfig`, `actor.optimizer`, the datasets, ...). When `trainer.entry` is not one of
this project's recipes, the keys our schema does not declare (`unknown_keys`) are the entry's:
it gets the composed config, cut to its part, as a file and `--config FILE` followed by the
user's overrides of its keys (`handoff`). For our recipe an unknown key is an error naming the
closest key our schema declares (`unknown_error`).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from launcher.spec import registry
from launcher.spec.builtins import ENGINES
from launcher.spec.errors import ConfigError
from launcher.spec.runfolder import ENTRY_CONFIG  # in the run folder: what --config names

OURS_ONLY = ("launcher", "trainer", "recipe", "components", "hydra")  # never the entry's
RECIPES = Path(__file__).resolve().parents[2] / "recipes"  # this project's own entry points
GROUPS = (*ENGINES, "cluster", "launcher", "recipe", "experiment")  # `group=option` choices
# dicts whose keys the user chooses (`+` adds one there)
FREE_FORM_SHOWN = (
    "launcher.env.*, <engine>.env.*, <engine>.model.*, components.*, "
    "cluster.component_placement.*, cluster.colocate.*"
)

Mask = dict  # key -> True (the whole value) or a Mask (some of its keys)


def ours_entry(entry: str) -> bool:
    """Whether `trainer.entry` is one of this project's recipes (their keys are all ours)."""
    text = entry.strip()
    if text.startswith("-m "):
        return text[3:].strip().startswith(f"{RECIPES.name}.")
    path = Path(text)
    if not path.is_absolute():
        return path.parts[:1] == (RECIPES.name,)
    try:
        path.resolve().relative_to(RECIPES)
        return True
    except ValueError:
        return False


def unknown_keys(cfg: Any, prefix: str = "") -> list[str]:
    """Dotted keys of `cfg` (a composed DictConfig) that its dataclass nodes do not declare,
    and those under an engine's backend options that the backend's Options does not."""
    from omegaconf import DictConfig, OmegaConf

    out: list[str] = []
    schema = OmegaConf.get_type(cfg)
    if not dataclasses.is_dataclass(schema):
        return out
    declared = {f.name for f in dataclasses.fields(schema)}
    backends = registry.backend_names() if prefix.rstrip(".") in ENGINES else ()
    for key in cfg:
        path = f"{prefix}{key}"
        if key not in declared:
            out.append(path)
            continue
        if OmegaConf.is_missing(cfg, key) or OmegaConf.is_interpolation(cfg, key):
            continue
        child = cfg[key]
        if not isinstance(child, DictConfig):
            continue
        if key in backends:  # rollout.vllm: typed by the backend's Options later
            known = {f.name for f in dataclasses.fields(registry.backend_options(str(key)))}
            out += [f"{path}.{k!s}" for k in child if k not in known]
        else:
            out += unknown_keys(child, f"{path}.")
    return out


def pruned(cfg: Any, paths: Sequence[str]) -> Any:
    """A copy of `cfg` without `paths` (what our schema types; the rest is the entry's)."""
    import copy

    from omegaconf import OmegaConf, open_dict

    out = copy.deepcopy(cfg)
    for path in paths:
        parent, _, key = path.rpartition(".")
        node = OmegaConf.select(out, parent) if parent else out
        with open_dict(node):
            del node[key]
    return out


def mask_of(paths: Sequence[str], raw: Optional[Mapping] = None) -> Mask:
    """The entry's part of the config: the keys of the peer's file (`raw`, as written) and
    every key our schema does not declare (`paths`)."""
    mask: Mask = _raw_mask(raw) if raw is not None else {}
    for path in paths:
        node = mask
        parts = path.split(".")
        for part in parts[:-1]:
            sub = node.get(part)
            if sub is True:
                break
            node = node.setdefault(part, {})
        else:
            node[parts[-1]] = True
    return mask


def _raw_mask(raw: Mapping) -> Mask:
    return {
        str(k): _raw_mask(v) if isinstance(v, Mapping) and v else True
        for k, v in raw.items()
        if str(k) != "defaults" and str(k) not in OURS_ONLY
    }


def masked(values: Any, mask: Mask) -> dict:
    out = {}
    for key, sub in mask.items():
        if key not in values:
            continue
        value = values[key]
        out[key] = value if sub is True or not isinstance(value, dict) else masked(value, sub)
    return out


def _inside(key: str, mask: Mask) -> bool:
    node: Any = mask
    for part in key.split("."):
        if node is True:
            return True
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@dataclass(frozen=True)
class Handoff:
    """What a foreign entry gets: its config (written as ENTRY_CONFIG in the run folder) and
    the user's overrides of its keys (Hydra syntax, again after `--config FILE`)."""

    config: dict
    overrides: tuple[str, ...]

    def args(self, run_dir: str) -> list[str]:
        return ["--config", f"{run_dir}/{ENTRY_CONFIG}", *self.overrides]

    def text(self) -> str:
        from omegaconf import OmegaConf

        return OmegaConf.to_yaml(OmegaConf.create(self.config))


def handoff(values: dict, mask: Mask, overrides: Sequence[str]) -> Handoff:
    """`values` (the composed config, resolved) cut to the entry's part, and the overrides
    that set its keys (`+k=v` as `++k=v`: the file has the key already; `~k` is applied)."""
    given = []
    for o in overrides:
        key = o.lstrip("+~").partition("=")[0]
        if (
            o.startswith("~")
            or key.startswith("hydra")
            or ("." not in key and key in GROUPS and not o.startswith("+"))
        ):
            continue
        if _inside(key, mask):
            given.append("++" + o.lstrip("+") if o.startswith("+") else o)
    return Handoff(masked(values, mask), tuple(given))


def closest_key(key: str, known: Any) -> Optional[str]:
    """The key `known` (a DictConfig) declares that is closest to `key`, part by part."""
    from omegaconf import DictConfig

    node, fixed = known, list[str]()
    for part in key.split("."):
        if not isinstance(node, DictConfig):
            return None
        names = [str(k) for k in node]
        close = (
            part if part in names else next(iter(difflib.get_close_matches(part, names, 1)), None)
        )
        if close is None:
            return None
        fixed.append(close)
        node = node.get(close)
    guess = ".".join(fixed)
    return guess if guess != key else None


def unknown_error(
    key: str, known: Any, where: str, entry: Optional[str], added: bool = False, hint: str = ""
) -> ConfigError:
    """A key our schema does not declare, with the closest one it does. entry: our recipe's
    (it takes only our keys), None: no entry to give it to. added: the user wrote it with `+`
    (which adds keys only to the dicts that are the user's own). hint: a peer's word on it.
    A key under a backend another package registers that cannot be loaded is unknown only
    because it could not be loaded: that is said instead (rollout.mylm.x, with mylm broken)."""
    broken = unloadable_backend(key)
    if broken is not None:
        return broken
    guess = closest_key(key, known)
    said = f": did you mean {guess!r}?" if guess else ""
    if added:
        why = f"`+` adds keys only to {FREE_FORM_SHOWN}"
    elif entry is not None:
        why = (
            f"trainer.entry={entry} is our recipe and takes only our keys; a config written "
            "for another trainer needs its entry: trainer.entry=SCRIPT"
        )
    else:
        why = "`areal-launch --cfg job` prints every key"
    return ConfigError(f"unknown config key {key!r}{where}{said} ({why}){hint}")


def unloadable_backend(key: str) -> Optional[ConfigError]:
    """Why a backend that `key` names a part of cannot be loaded, None when none."""
    for part in key.split("."):
        if part in registry.BACKENDS.paths():
            try:
                registry.find_backend(part)
            except ConfigError as exc:
                return ConfigError(f"config key {key!r} belongs to backend {part!r}, but {exc}")
    return None
