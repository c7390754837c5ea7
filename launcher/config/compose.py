"""Compose the config with Hydra, into typed values; Hydra's failures become one-line errors.

One Hydra per process (Hydra's own global state), opened with the search path Hydra's flags
give: `--config-path/-cp` (the primary config's folder; launcher/conf by default), `--config-
name/-cn` (the primary config; `config`) and `--config-dir/-cd` (one more folder, for a user's
own presets, clusters and whole configs). Everything that composes, the launch, `plan`, a sweep
point, completion, `--cfg`, goes through it, so a user's folder counts everywhere.

We compose first and start second, rather than letting `@hydra.main` create the run folder
first: a run is validated (and every sweep point rehearsed) before anything exists, and a user
mistake is one `error:` line. `run_spec` is the only place that reads the composed config:
everything after it takes the dataclasses of launcher.config.schema.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from launcher.config.hydra_errors import (FREE_FORM, FREE_FORM_SHOWN, explain_hydra_error, shown,
                                          unresolved)
from launcher.config.schema import LaunchConfig, backend_of, backend_options
from launcher.spec import registry
from launcher.spec.errors import ConfigError
from launcher.spec.plan import ENGINES

APP_MODULE = "launcher.cli"  # Hydra resolves a relative --config-path from its parent package (launcher/)
CONFIG_PATH = "conf"
TASK_NAME = "areal-launch"  # hydra.job.name
ENGINE_GROUPS = ENGINES  # the config groups of the built-in engines


@dataclass(frozen=True)
class ConfigSource:
    """Where configs come from: Hydra's --config-path, --config-name and --config-dir."""

    config_path: Optional[str] = None  # None: launcher/conf
    config_name: str = "config"
    config_dir: Optional[str] = None  # searched too, for options launcher/conf lacks


@dataclass(frozen=True)
class RunSpec:
    """A composed run: the typed config, where Hydra says its folders go, and the composed
    config itself (written to the run folder as Hydra's own record, hydra.output_subdir)."""

    config: LaunchConfig
    run_dir: str
    sweep_dir: str
    composed: DictConfig


_hydra: Any = None  # hydra._internal.hydra.Hydra, once opened
_source = ConfigSource()


def open_config(source: ConfigSource = ConfigSource()) -> Any:
    """Hydra's global state for this process, searching where `source` says; ConfigError for a
    folder that is not there. Our schemas are registered with Hydra's ConfigStore first."""
    global _hydra, _source
    if _hydra is not None and source == _source:
        return _hydra
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import compute_search_path_dir, create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra

    from launcher.config.schema import register_configs

    register_configs()
    if source.config_path is not None and not source.config_path.startswith("pkg://") and \
            not Path(source.config_path).is_absolute():
        raise ConfigError(f"--config-path {source.config_path}: Hydra reads a relative path from "
                          "the app's package; give an absolute path (or pkg://module), or add "
                          "a folder of your own with --config-dir DIR")
    primary = str(compute_search_path_dir(None, APP_MODULE, source.config_path or CONFIG_PATH))
    if source.config_path and not primary.startswith("pkg://") and not Path(primary).is_dir():
        raise ConfigError(f"--config-path {source.config_path}: no such folder")
    search_path = create_config_search_path(primary)
    if source.config_dir is not None:
        folder = Path(source.config_dir).expanduser().absolute()
        if not folder.is_dir():
            raise ConfigError(f"--config-dir {source.config_dir}: no such folder")
        # where Hydra's own -cd goes: after the primary folder, before the schemas
        search_path.prepend(provider="command-line", path=f"file://{folder}",
                            anchor=SearchPathQuery(provider="schema"))
    GlobalHydra.instance().clear()
    _hydra = Hydra.create_main_hydra2(task_name=TASK_NAME, config_search_path=search_path)
    _source = source
    return _hydra


def config_name() -> str:
    return _source.config_name


def compose_config(overrides: Sequence[str], with_hydra: bool = False,
                   multirun: bool = False) -> DictConfig:
    """Compose the config for `overrides` (Hydra command-line syntax); raise ConfigError."""
    from hydra.types import RunMode

    check_overrides(overrides)
    hydra = open_config(_source)
    mode = RunMode.MULTIRUN if multirun else RunMode.RUN
    cfg = explained(lambda: hydra.compose_config(config_name=_source.config_name,
                                                 overrides=list(overrides), run_mode=mode),
                    overrides)
    check_added_keys(cfg, overrides)
    if not with_hydra:
        with open_dict(cfg):
            del cfg["hydra"]
    return cfg


def shown_config(cfg: DictConfig) -> DictConfig:
    """`cfg` as `--cfg` prints it: under each engine the options of the backend it runs, with
    their defaults (the schema types them only for the run), and another backend's only
    where something is set there."""
    out = OmegaConf.create(OmegaConf.to_container(cfg))
    assert isinstance(out, DictConfig)
    backends = registry.backend_names()
    for name in ENGINE_GROUPS:
        node = out.get(name)
        if not isinstance(node, DictConfig):
            continue
        used = backend_of(node.get("backend"))
        for key in [k for k in node if k in backends]:
            if key == used:
                node[key] = OmegaConf.structured(backend_options(name, key, node[key]))
            elif not node[key]:
                del node[key]
    return out


def explained(compose: Callable[[], DictConfig], overrides: Sequence[str]) -> DictConfig:
    """`compose()` (Hydra composing for these overrides), its failure as one ConfigError line."""
    try:
        return compose()
    except Exception as exc:  # Hydra raises several unrelated types for user mistakes
        raise ConfigError(explain_hydra_error(exc, overrides, suggest)) from None


def run_spec(cfg: DictConfig) -> RunSpec:
    """The typed config (every interpolation resolved, every value checked) and the folders."""
    job = cfg
    if "hydra" in cfg:
        if OmegaConf.select(cfg, "hydra.job.chdir"):
            raise ConfigError("hydra.job.chdir=true: areal-launch stays where it was started "
                              "(relative paths are yours) and hands every process its run "
                              "folder as AREAL_RUN_DIR; leave it false")
        from hydra.core.hydra_config import HydraConfig

        HydraConfig.instance().set_config(cfg)  # for ${hydra:runtime.choices.X} in a config
        job = copy.copy(cfg)
        with open_dict(job):
            del job["hydra"]
    spec = resolved(lambda: OmegaConf.to_object(job))
    resolved(lambda: _keep_open_keys(job, spec))
    run_dir = resolved(lambda: str(OmegaConf.select(cfg, "hydra.run.dir") or "outputs"))
    sweep_dir = resolved(lambda: str(OmegaConf.select(cfg, "hydra.sweep.dir") or "multirun"))
    assert isinstance(spec, LaunchConfig)
    for key, folder in (("hydra.run.dir", run_dir), ("hydra.sweep.dir", sweep_dir)):
        check_folder_name(key, folder)
    return RunSpec(spec, run_dir, sweep_dir, cfg)


def _keep_open_keys(cfg: DictConfig, spec: Any) -> None:
    """The keys of RLinf's `<engine>.model` that ModelParallel does not declare go to its
    `options`, handed to the entry point in the plan: to_object alone would drop them without
    a word."""
    import dataclasses

    for path in (f"{name}.model" for name in ENGINES):
        node = OmegaConf.select(cfg, path)
        target: Any = spec
        for part in path.split("."):
            target = getattr(target, part, None)
        if not isinstance(node, DictConfig) or not hasattr(target, "options"):
            continue
        declared = {f.name for f in dataclasses.fields(target)}
        values = OmegaConf.to_container(node, resolve=True)
        assert isinstance(values, dict)
        extra = {str(k): v for k, v in values.items() if k not in declared}
        if extra:
            target.options = {**target.options, **extra}


NAME_MAX = 255  # bytes of one file name on Linux and macOS file systems (ENAMETOOLONG)


def check_folder_name(key: str, folder: str) -> None:
    """Each part of a run folder's path fits in a file name, so making it cannot fail."""
    import os

    for part in Path(folder).parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise ConfigError(f"{key}: the folder name {part[:40]!r}... is "
                              f"{len(os.fsencode(part))} bytes, more than the {NAME_MAX} a "
                              "file name may have; shorten experiment_name or trial_name "
                              f"(they name the run folder) or set {key}")


def hydra_record(spec: RunSpec, run_dir: Path) -> dict[str, str]:
    """Hydra's own record of a run, for its run folder: `<hydra.output_subdir>/config.yaml,
    hydra.yaml, overrides.yaml`, as @hydra.main writes them (nothing when it is null)."""
    cfg = spec.composed
    subdir = OmegaConf.select(cfg, "hydra.output_subdir") if "hydra" in cfg else None
    if not subdir:
        return {}
    job = copy.copy(cfg)
    with open_dict(job):
        del job["hydra"]
    hydra = OmegaConf.to_container(cfg.hydra, resolve=False)
    assert isinstance(hydra, dict)
    for key in ("help", "hydra_help"):
        hydra.pop(key, None)
    hydra.setdefault("runtime", {})["output_dir"] = str(run_dir)
    return {f"{subdir}/config.yaml": OmegaConf.to_yaml(job),
            f"{subdir}/hydra.yaml": OmegaConf.to_yaml({"hydra": hydra}),
            f"{subdir}/overrides.yaml": OmegaConf.to_yaml(cfg.hydra.overrides.task)}


def resolved(make: Callable[[], Any], overrides: Sequence[str] = ()) -> Any:
    """`make()`, with an interpolation that fails (`${oc.env:NOPE}`) as one line."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return make()
    except OmegaConfBaseException as exc:
        raise ConfigError(unresolved(exc, overrides) or explain_hydra_error(exc, overrides,
                                                                            suggest)) from None


def choices_only(overrides: Sequence[str]) -> list[str]:
    """The overrides that pick config files (`rollout=sglang`, `experiment=...`), not values."""
    return [o for o in overrides if "." not in o.partition("=")[0]
            and not o.startswith(("hydra", "+", "~"))]


# ----------------------------------------------------------------------------- + and ~
def check_overrides(overrides: Sequence[str]) -> None:
    """`~key` deletes a key and `+key` adds one: only the user's own dicts take either."""
    for o in overrides:
        if o.startswith("~"):
            key = o[1:].partition("=")[0]
            if not key.startswith(FREE_FORM):
                fix = (f"to turn {key} off write {key}=none" if key in ENGINE_GROUPS
                       else "set it to another value instead")
                raise ConfigError(f"{shown(o)}: removing a declared key is not supported; "
                                  f"{fix}")


def check_added_keys(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """A `+key`/`++key` that lands in a declared (typed) section is a typo, not a new option:
    OmegaConf would drop it without a word when it builds the dataclasses. Each part of the
    key is looked up in turn until it reaches a dict whose keys are the user's own."""
    import dataclasses

    for o in overrides:
        if not o.startswith("+"):
            continue
        key = o.lstrip("+").partition("=")[0]
        node: Any = cfg
        parts = key.split(".")
        for i, part in enumerate(parts):
            schema = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
            if schema is None or not dataclasses.is_dataclass(schema) or \
                    _backend_options_key(".".join(parts[:i])):
                break  # a free dict (launcher.env, components, a backend's options: typed later)
            if part not in {f.name for f in dataclasses.fields(schema)}:
                wrong = ".".join(parts[:i + 1])
                raise ConfigError(f"unknown config key {wrong!r}{suggest(wrong, overrides)}: "
                                  f"`+` adds keys only to {FREE_FORM_SHOWN} "
                                  "(`areal-launch --cfg job` prints every key)")
            node = node.get(part)


def _backend_options_key(key: str) -> bool:
    """`rollout.vllm`: the options of a backend, declared by its Options (schema.py)."""
    name, _, backend = key.partition(".")
    return name in ENGINE_GROUPS and backend in registry.backend_names()


_suggesting = False  # suggest() composes too; its own failure must not ask it again


def suggest(key: str, overrides: Sequence[str] = ()) -> str:
    """`: did you mean 'a.b'?` from the keys the config declares with the groups the user
    chose (`launcher=slurm launcher.partiton=x` looks in the Slurm runner's keys), each
    part of a dotted key matched in turn."""
    import difflib

    global _suggesting
    if _suggesting:  # the config without the user's values failed too: no closest key to say
        return ""
    _suggesting = True
    try:
        node: Any = shown_config(compose_config(choices_only(overrides)))
    except ConfigError:
        return ""
    finally:
        _suggesting = False
    parts, fixed = key.split("."), []
    for part in parts:
        if not isinstance(node, DictConfig):
            return ""
        names = [str(k) for k in node]
        if part not in names:
            close = difflib.get_close_matches(part, names, n=1)
            if not close:
                return ""
            part = close[0]
        fixed.append(part)
        node = node.get(part)
    guess = ".".join(fixed)
    return f": did you mean {guess!r}?" if guess != key else ""
