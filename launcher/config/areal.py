"""AReaL's experiment YAML as AReaL means it: the launcher's keys read, the rest the trainer's.

An AReaL config (examples/**/*.yaml of inclusionAI/AReaL) is one file for the launcher and the
trainer: `cluster`, `scheduler`, `<engine>.backend`, `scheduling_strategy` and `scheduling_spec`
are the launcher's; `seed`, `gconfig`, `actor.optimizer`, the datasets, ... the trainer's. When
the entry is not ours (`trainer.entry` outside this project's recipes/), every key our schema
does not declare is the trainer's (`unknown_keys`), and the entry gets the whole composed
config as AReaL's launcher hands it: `--config <run folder>/entry_config.yaml` and the user's
overrides of its keys (`handoff`). For our recipe an unknown key stays an error.

`scheduling_spec` per engine (`apply_scheduling`): env_vars reach the engine's processes under
every runner, and cpu their thread counts (OMP_NUM_THREADS, ..., as AReaL's launchers set
them); cpu, mem, image, nodelist and exclude are the engine's resource asks, which each runner
honours as it can (Slurm: the job's options; Ray: per plan node) and says in a note what it
cannot; what no runner honours is one note too, never dropped without a word.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from launcher.config.schema import LaunchConfig, SchedulingSpec, engine, typed
from launcher.spec.builtins import ENGINES
from launcher.spec.errors import ConfigError
from launcher.spec.limits import MAX_CPUS_PER_GPU, MAX_MEM_GIB_PER_GPU
from launcher.spec.request import EngineAsk
from launcher.spec.runfolder import ENTRY_CONFIG  # in the run folder: what --config names

OURS_ONLY = ("launcher", "trainer", "recipe", "components", "hydra")  # never the entry's
RECIPES = Path(__file__).resolve().parents[2] / "recipes"  # this project's own entry points
GROUPS = (*ENGINES, "cluster", "launcher", "recipe", "experiment")  # `group=option` choices

Mask = dict  # key -> True (the whole value) or a Mask (some of its keys)


def ours_entry(entry: str) -> bool:
    """Whether `trainer.entry` is one of this project's recipes (their keys are all ours)."""
    text = entry.strip()
    if text.startswith("-m "):
        return text[3:].strip().startswith("recipes.")
    path = Path(text)
    if not path.is_absolute():
        return path.parts[:1] == ("recipes",)
    try:
        path.resolve().relative_to(RECIPES)
        return True
    except ValueError:
        return False


# ----------------------------------------------------------------------------- unknown keys
def unknown_keys(cfg: Any, prefix: str = "") -> list[str]:
    """Dotted keys of `cfg` (a composed DictConfig) that its dataclass nodes do not declare,
    and those under an engine's backend options that the backend's Options does not."""
    from omegaconf import DictConfig, OmegaConf

    from launcher.spec import registry

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
        child = cfg._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            if key in backends:  # rollout.vllm: typed by the backend's Options later
                known = {f.name for f in dataclasses.fields(registry.backend_options(str(key)))}
                out += [f"{path}.{k!s}" for k in child if k not in known]
            else:
                out += unknown_keys(child, f"{path}.")
    return out


def pruned(cfg: Any, paths: Sequence[str]) -> Any:
    """A copy of `cfg` without `paths` (what our schema types; the rest is the entry's)."""
    from omegaconf import OmegaConf, open_dict

    out = copy_config(cfg)
    for path in paths:
        parent, _, key = path.rpartition(".")
        node = OmegaConf.select(out, parent) if parent else out
        with open_dict(node):
            del node[key]
    return out


def copy_config(cfg: Any) -> Any:
    import copy

    return copy.deepcopy(cfg)


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


def unknown_error(key: str, known: Any, where: str, entry: str) -> ConfigError:
    """The first key our recipe does not take, with the closest one our schema declares."""
    import difflib

    from omegaconf import DictConfig

    node, fixed = known, list[str]()
    for part in key.split("."):
        if not isinstance(node, DictConfig):
            fixed = []
            break
        names = [str(k) for k in node]
        close = (
            part if part in names else next(iter(difflib.get_close_matches(part, names, n=1)), None)
        )
        if close is None:
            fixed = []
            break
        fixed.append(close)
        node = node.get(close)
    guess = ".".join(fixed)
    hint = f": did you mean {guess!r}?" if fixed and guess != key else ""
    return ConfigError(
        f"unknown config key {key!r}{where}{hint} (trainer.entry={entry} is "
        "our recipe and takes only our keys; a config written for another "
        f"trainer needs its entry: trainer.entry=SCRIPT){server_section_hint(key)}"
    )


# ----------------------------------------------------------------------------- model path
def model_from_actor(cfg: Any, composed: Any, raw: Optional[Mapping]) -> None:
    """AReaL names the model `actor.path` (in `composed`): it is the run's model_path (in our
    part, `cfg`) unless the peer's file gives one."""
    from omegaconf import OmegaConf, open_dict

    if raw is None or "model_path" in raw:
        return
    path = OmegaConf.select(composed, "actor.path", default=None)
    if isinstance(path, str) and path:
        with open_dict(cfg):
            cfg.model_path = path


# ----------------------------------------------------------------------------- scheduling_spec
# the scheduling_spec keys that are the engine's resource asks (launcher.spec.request.EngineAsk:
# each runner honours them as it can); env_vars reach the processes on every runner, and cpu
# their thread counts too
ASKS = ("cpu", "mem", "image", "nodelist", "exclude")
THREAD_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)  # AReaL's, set from cpu
DECIDED = {
    "gpu": "GPUs: {name}.backend",
    "cmd": "command: {what}",
    "port_count": "ports: the launcher's",
}


def scheduling_specs(spec: LaunchConfig, name: str) -> list[SchedulingSpec]:
    raw = getattr(engine(spec, name), "scheduling_spec", None)
    items = [raw] if isinstance(raw, Mapping) else list(raw or [])
    return [
        typed(f"{name}.scheduling_spec[{i}]", SchedulingSpec, item, "a scheduling spec")
        for i, item in enumerate(items)
    ]


def apply_scheduling(
    spec: LaunchConfig, names: Sequence[str], environ: Mapping[str, str] = {}
) -> tuple[list[str], dict[str, EngineAsk]]:
    """Each engine's scheduling_spec: env_vars into the engine's environment, and cpu as its
    processes' thread counts (OMP_NUM_THREADS and kin, as AReaL's launchers set them: below
    env_vars and what `environ`, the launcher's environment, sets already); cpu, mem, image,
    nodelist and exclude are the engine's resource asks (returned: the request carries them,
    and each runner honours them as it can and says what it does not). A note per engine
    names what no runner honours (the launcher decides it). ConfigError for an ask out of
    bounds."""
    notes: list[str] = []
    asks: dict[str, EngineAsk] = {}
    for name in names:
        if not engine(spec, name).scheduling_strategy.fork:
            notes.append(
                f"{name}.scheduling_strategy.fork=false not honoured: every engine "
                "runs processes of its own"
            )
        specs = scheduling_specs(spec, name)
        if not specs:
            continue
        first, unread = specs[0], len(specs) - 1
        node = engine(spec, name)
        node.env = {**{str(k): str(v) for k, v in first.env_vars.items()}, **node.env}
        ask, skipped = EngineAsk(key=f"{name}.scheduling_spec"), []
        for f in dataclasses.fields(SchedulingSpec):
            value = getattr(first, f.name)
            if f.name in ASKS and value is not None:
                ask = _ask(ask, name, f.name, value)
            elif f.name != "env_vars" and value is not None:
                skipped.append(f.name)
        if ask.cpu:
            threads = {v: str(ask.cpu) for v in THREAD_ENV if v not in environ}
            node.env = {**threads, **node.env}
        if ask.asked():
            asks[name] = ask
        if skipped or unread:
            notes.append(_unhonoured(name, skipped, unread))
    return notes, asks


def _unhonoured(name: str, skipped: Sequence[str], unread: int) -> str:
    """The note on what of an engine's scheduling_spec no runner honours."""
    what = "its backend's server" if name == "rollout" else "trainer.entry under torchrun"
    why = "; ".join(DECIDED[k].format(name=name, what=what) for k in skipped if k in DECIDED)
    more = f"; items after the first ({unread}) are not read" if unread else ""
    return (
        f"{name}.scheduling_spec: {', '.join(skipped) or 'nothing'} not honoured"
        f"{f' ({why})' if why else ''}{more}"
    )


def _ask(ask: EngineAsk, name: str, key: str, value: Any) -> EngineAsk:
    """`key` of an engine's scheduling_spec as its ask: bounded, as every user number is."""
    if key in ("image", "nodelist", "exclude"):
        if not str(value).strip() or any(c.isspace() for c in str(value)):
            example = "rayproject/ray:2.40.0-py311" if key == "image" else "gpu[01-04]"
            what = "a container image name" if key == "image" else "Slurm's node names"
            raise ConfigError(
                f"{name}.scheduling_spec.{key}={value!r}: {what} without spaces, e.g. {example}"
            )
        text = str(value)
        if key == "image":
            return dataclasses.replace(ask, image=text)
        if key == "nodelist":
            return dataclasses.replace(ask, nodelist=text)
        return dataclasses.replace(ask, exclude=text)
    top = MAX_CPUS_PER_GPU if key == "cpu" else MAX_MEM_GIB_PER_GPU
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        unit = "CPU cores" if key == "cpu" else "GiB of memory"
        raise ConfigError(
            f"{name}.scheduling_spec.{key}={value!r}: {unit} per GPU, a whole "
            f"number from 0 to {top}"
        )
    if key == "cpu":
        return dataclasses.replace(ask, cpu=value)
    return dataclasses.replace(ask, mem_gib=value)


# ----------------------------------------------------------------------------- server sections
def server_sections(job: Any) -> dict[str, dict]:
    """AReaL's `vllm:` and `sglang:` (top-level, named after a serving backend) resolved to
    plain values (`${actor.path}`, `${seed}` read from the whole config): what the rollout's
    servers are started with (launcher.planning.peer_servers). The entry gets them too."""
    from omegaconf import DictConfig, OmegaConf

    from launcher.spec import registry

    out: dict[str, dict] = {}
    for name in registry.backend_names(registry.SERVE):
        node = job.get(name) if name in job else None
        if isinstance(node, DictConfig):
            values = OmegaConf.to_container(node, resolve=True)
            assert isinstance(values, dict)
            out[name] = {str(k): v for k, v in values.items()}
    return out


def server_section_hint(key: str) -> str:
    """For our recipe, where AReaL's server sections go in our keys ("" for other keys)."""
    from launcher.spec import registry

    name = key.split(".")[0]
    if name not in registry.backend_names(registry.SERVE):
        return ""
    return (
        f"; {name}: is AReaL's server section, read for another trainer's entry: with our "
        f"recipe write rollout.{name}.KEY (the backend's options) or "
        f"rollout.server_args.KEY (any other flag)"
    )
