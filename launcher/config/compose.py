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
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from launcher.config.areal import Handoff
from launcher.config.hydra_errors import (
    FREE_FORM,
    FREE_FORM_SHOWN,
    explain_hydra_error,
    shown,
    unresolved,
)
from launcher.config.schema import LaunchConfig, backend_of, backend_options, engine
from launcher.spec import registry
from launcher.spec.builtins import ENGINES
from launcher.spec.errors import ConfigError
from launcher.spec.request import EngineAsk

APP_MODULE = (
    "launcher.cli"  # Hydra resolves a relative --config-path from its parent package (launcher/)
)
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
    config itself (written to the run folder as Hydra's own record, hydra.output_subdir).
    handoff: for an entry that is not ours, its part of the config (launcher.config.areal);
    notes: what the run does not honour of what was written, one line each; servers:
    AReaL's `vllm:`/`sglang:` sections, resolved, for the rollout's servers (the planner
    applies the one of the rollout's backend); asks: each engine's scheduling_spec asks that
    the runner reserves per plan node (Ray's bundles)."""

    config: LaunchConfig
    run_dir: str
    sweep_dir: str
    composed: DictConfig
    handoff: Optional[Handoff] = None
    notes: tuple[str, ...] = ()
    servers: Mapping[str, dict] = field(default_factory=dict)
    asks: Mapping[str, EngineAsk] = field(default_factory=dict)


@dataclass(frozen=True)
class Origin:
    """How a config was composed: over an open schema (keys it does not declare kept, for the
    entry or for an error) and, for a peer's file (no defaults list: AReaL's), that file's
    own keys as written."""

    opened: bool
    raw: Optional[dict] = None


PEER_PRIMARY = "areal_launch_peer_primary"  # ours with a peer's file laid over (ConfigStore)
_origins: dict[int, tuple[DictConfig, Origin]] = {}  # id(composed config) -> how
_peer_raw: dict[ConfigSource, dict] = {}  # a peer's file as written, by where it was found


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
    if (
        source.config_path is not None
        and not source.config_path.startswith("pkg://")
        and not Path(source.config_path).is_absolute()
    ):
        raise ConfigError(
            f"--config-path {source.config_path}: Hydra reads a relative path from "
            "the app's package; give an absolute path (or pkg://module), or add "
            "a folder of your own with --config-dir DIR"
        )
    primary = str(compute_search_path_dir(None, APP_MODULE, source.config_path or CONFIG_PATH))
    if source.config_path and not primary.startswith("pkg://") and not Path(primary).is_dir():
        raise ConfigError(f"--config-path {source.config_path}: no such folder")
    search_path = create_config_search_path(primary)
    if source.config_dir is not None:
        folder = Path(source.config_dir).expanduser().absolute()
        if not folder.is_dir():
            raise ConfigError(f"--config-dir {source.config_dir}: no such folder")
        # where Hydra's own -cd goes: after the primary folder, before the schemas
        search_path.prepend(
            provider="command-line",
            path=f"file://{folder}",
            anchor=SearchPathQuery(provider="schema"),
        )
    GlobalHydra.instance().clear()
    _hydra = Hydra.create_main_hydra2(task_name=TASK_NAME, config_search_path=search_path)
    _source = source
    return _hydra


def config_name() -> str:
    return _source.config_name


def compose_config(
    overrides: Sequence[str], with_hydra: bool = False, multirun: bool = False
) -> DictConfig:
    """Compose the config for `overrides` (Hydra command-line syntax); raise ConfigError.

    A peer's file as the primary config (-cn NAME, no defaults list: AReaL's) is laid over
    ours, on a schema that keeps the keys it does not declare; a config of ours that holds
    such keys is composed again that way, and run_spec says whose they are (the entry's, or
    an error for our recipe). `scheduler.type` (AReaL's) chooses the runner as launcher= does.
    """
    check_overrides(overrides)
    cfg = _from_cache(overrides) if _use_cache and not multirun else None
    if cfg is not None:
        return _kept(cfg, with_hydra, Origin(False))
    return _composed_whole(overrides, with_hydra, multirun)


def _composed_whole(overrides: Sequence[str], with_hydra: bool, multirun: bool) -> DictConfig:
    """compose_config by Hydra alone: every peer's form, every error message."""
    from hydra.types import RunMode

    hydra = open_config(_source)
    mode = RunMode.MULTIRUN if multirun else RunMode.RUN
    try:
        name, raw = _primary(hydra)
    except ConfigError:
        raise
    except Exception as exc:  # the file does not load (a duplicate key): Hydra's own error
        raise hydra_error(exc, overrides) from None
    opened = raw is not None
    given = list(overrides)

    def compose(extra: Sequence[str] = ()) -> DictConfig:
        return _composed(hydra, name, [*given, *extra], mode, opened)

    try:
        cfg = compose()
    except Exception as exc:  # Hydra raises several unrelated types for user mistakes
        if opened or not _unknown_key(exc):
            raise hydra_error(exc, overrides) from None
        opened = True
        cfg = explained(compose, overrides)
    runner = _scheduler_runner(cfg, overrides)
    if runner is not None:
        cfg = explained(lambda: compose([f"launcher={runner}"]), overrides)
    if not opened:
        try:
            check_added_keys(cfg, overrides)
        except ConfigError:  # `+seed=1` is the entry's own key when the entry is not ours
            from launcher.config.areal import ours_entry

            if ours_entry(str(OmegaConf.select(cfg, "trainer.entry", default=""))):
                raise
            opened = True
    return _kept(cfg, with_hydra, Origin(opened, raw))


def _kept(cfg: DictConfig, with_hydra: bool, origin: Origin) -> DictConfig:
    """`cfg` as compose_config returns it, with how it was composed kept for run_spec."""
    if not with_hydra:
        with open_dict(cfg):
            del cfg["hydra"]
    _origins[id(cfg)] = (cfg, origin)
    while len(_origins) > 32:
        del _origins[next(iter(_origins))]
    return cfg


_use_cache = False  # within `cached()`: launcher.config.compose_cache


@contextmanager
def cached(source: ConfigSource) -> Iterator[None]:
    """Compose for `source` within, with the cache of Hydra's first half where it applies
    (our own config folder; `plan`); Hydra is opened only when a compose needs it."""
    global _use_cache, _source
    if source == ConfigSource() and _hydra is None:
        _source = source
    else:
        open_config(source)
    before, _use_cache = _use_cache, True
    try:
        yield
    finally:
        _use_cache = before


def _from_cache(overrides: Sequence[str]) -> Optional[DictConfig]:
    """The config for `overrides` by the compose cache, or None for Hydra to compose whole:
    not our own folder, not a plain command line, AReaL's scheduler.type choosing a runner."""
    from launcher.config import compose_cache

    if _source != ConfigSource():
        return None
    conf = Path(__file__).resolve().parents[1] / CONFIG_PATH
    choices = compose_cache.split(overrides, compose_cache.config_groups(conf))
    if choices is None:
        return None
    base = compose_cache.load(choices, conf)
    if base is None:
        from hydra.types import RunMode

        try:
            base = _composed(open_config(_source), config_name(), choices, RunMode.RUN, False)
        except Exception:  # noqa: BLE001 - composed whole again, for Hydra's own error
            return None
        compose_cache.store(choices, conf, base)
    cfg = compose_cache.applied(base, overrides, choices)
    if cfg is None:
        return None
    try:
        if _scheduler_runner(cfg, overrides) is not None:
            return None
    except ConfigError:
        return None
    return cfg


def _composed(hydra: Any, name: str, overrides: list[str], mode: Any, opened: bool) -> DictConfig:
    from launcher.config.schema import register_base

    before = register_base(opened)
    try:
        cfg: DictConfig = hydra.compose_config(config_name=name, overrides=overrides, run_mode=mode)
    finally:
        register_base(before)
    return cfg


def hydra_primary() -> str:
    """The config name for Hydra's own composing (a sweep's points): the wrapper of a peer's
    file, with the open schema registered from now on (run_spec sorts each point's keys)."""
    from launcher.config.schema import register_base

    name, raw = _primary(open_config(_source))
    if raw is not None:
        register_base(True)
    return name


def _unknown_key(exc: BaseException) -> bool:
    """Hydra's failure for a key the schema does not declare (in a file, or `+` in a typed
    section): the config is composed again over the open schema, and run_spec decides."""
    from launcher.config.hydra_errors import flatten

    text = flatten(exc)
    return "not in struct" in text or ("Key '" in text and "' not in '" in text)


def _scheduler_runner(cfg: DictConfig, overrides: Sequence[str]) -> Optional[str]:
    """The runner AReaL's `scheduler.type` names where it is not launcher='s choice (None:
    nothing to change); ConfigError for an unknown one or one beside another launcher=."""
    chosen = OmegaConf.select(cfg, "hydra.runtime.choices.launcher", default=None)
    wanted = resolved(lambda: OmegaConf.select(cfg, "scheduler.type", default=None), overrides)
    if wanted is None or wanted == chosen:
        return None
    if str(wanted) not in registry.runner_names():
        raise ConfigError(
            f"scheduler.type={wanted}: areal-launch runs on "
            f"{', '.join(registry.runner_names())} (scheduler.type chooses the "
            "runner, as launcher= does)"
        )
    explicit = next((o for o in overrides if o.lstrip("+").partition("=")[0] == "launcher"), None)
    if explicit is not None:
        raise ConfigError(
            f"scheduler.type={wanted} and {explicit} choose different runners: write one of them"
        )
    return str(wanted)


# AReaL's former `launcher` section (resources per GPU, environment per kind of process)
OLD_LAUNCHER = (
    "inference_server_cpus_per_gpu",
    "inference_server_mem_per_gpu",
    "trainer_cpus_per_gpu",
    "trainer_mem_per_gpu",
    "inference_server_env_vars",
    "trainer_env_vars",
)


def _check_old_launcher(raw: dict, name: str) -> None:
    """`launcher:` is our runner's options; AReaL's former section of that name is refused
    with what to write instead, rather than as an unknown key of the runner."""
    section = raw.get("launcher")
    old = [k for k in section if k in OLD_LAUNCHER] if isinstance(section, dict) else []
    if old:
        raise ConfigError(
            f"launcher.{old[0]} in config {name!r}: AReaL's former launcher "
            "section is not read (areal-launch's `launcher` holds its runner's "
            "options); write <engine>.scheduling_spec instead: cpu, mem, "
            "env_vars"
        )


def _primary(hydra: Any) -> tuple[str, Optional[dict]]:
    """The config Hydra composes first: the user's -cn, or (a peer's file without a defaults
    list) ours with that file laid over where our config.yaml has `_self_`, and its keys."""
    source = _source
    mine = Path(source.config_dir or "").expanduser() / f"{source.config_name}.yaml"
    shadowed = source.config_name == "config" and source.config_dir and mine.is_file()
    if source.config_name == "config" and source.config_path is None and not shadowed:
        return source.config_name, None  # ours: the hot path reads no file
    if shadowed:
        # launcher/conf's config.yaml comes first in the search path: a peer's own
        # config.yaml in -cd is read from its folder, not shadowed by ours without a word
        loaded = OmegaConf.load(mine)
        if not isinstance(loaded, DictConfig) or "defaults" in loaded:
            return source.config_name, None
        found_config: Any = loaded
    else:
        found = hydra.config_loader.repository.load_config(source.config_name)
        if found is None or found.defaults_list or found.is_schema_source:
            return source.config_name, None  # ours, or a config of ours; Hydra: a missing one
        found_config = found.config
    if source.config_path is not None:
        raise ConfigError(
            f"--config-path {source.config_path}: {source.config_name!r} is a "
            "config of another launcher (no defaults list), laid over ours, and "
            "-cp replaces ours: give its folder with --config-dir/-cd instead"
        )
    raw = OmegaConf.to_container(found_config, resolve=False)
    assert isinstance(raw, dict)
    _check_old_launcher(raw, source.config_name)
    ours = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "config.yaml")
    assert isinstance(ours, DictConfig)
    defaults = ours.pop("defaults")
    # an engine the file does not name is off (an SFT config has no rollout)
    off = {name: {"backend": None} for name in ENGINES if name not in raw}
    over = OmegaConf.to_container(OmegaConf.merge(ours, off, raw), resolve=False)
    assert isinstance(over, dict)  # (unresolved: `tokenizer_path: ${actor.path}` follows
    from hydra.core.config_store import ConfigStore  # an override of actor.path)

    ConfigStore.instance().store(name=PEER_PRIMARY, node={"defaults": defaults, **over})
    _peer_raw[source] = raw
    return PEER_PRIMARY, raw


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
                node[key] = _typed_options(out, name, key, node[key])
            elif not node[key]:
                del node[key]
    return out


def _typed_options(cfg: DictConfig, name: str, backend: str, values: DictConfig) -> DictConfig:
    """`<name>.<backend>` with the backend's defaults; keys its Options lacks stay beside them
    for an entry not ours (AReaL's `actor.megatron.bridge_type`), an error for our recipe."""
    import dataclasses

    from launcher.config.areal import ours_entry

    known = {f.name for f in dataclasses.fields(registry.backend_options(backend))}
    extra = {k: v for k, v in values.items() if k not in known}
    if extra and ours_entry(str(OmegaConf.select(cfg, "trainer.entry", default=""))):
        extra = {}  # backend_options names the first
    typed = OmegaConf.structured(
        backend_options(name, backend, {k: v for k, v in values.items() if k not in extra})
    )
    if extra:
        typed = OmegaConf.merge(OmegaConf.to_container(typed), extra)
    return typed


def explained(compose: Callable[[], DictConfig], overrides: Sequence[str]) -> DictConfig:
    """`compose()` (Hydra composing for these overrides), its failure as one ConfigError line."""
    try:
        return compose()
    except Exception as exc:  # Hydra raises several unrelated types for user mistakes
        raise hydra_error(exc, overrides) from None


def hydra_error(exc: BaseException, overrides: Sequence[str]) -> ConfigError:
    """Hydra's failure as one line; a peer's file is named as the user named it."""
    text = explain_hydra_error(exc, overrides, suggest)
    return ConfigError(text.replace(repr(PEER_PRIMARY), repr(_source.config_name)))


def run_spec(cfg: DictConfig) -> RunSpec:
    """The typed config (every interpolation resolved, every value checked) and the folders.
    Keys our schema does not declare (a config composed open) are the entry's when it is not
    ours (handed to it, launcher.config.areal) and an error naming the closest key when it is."""
    from launcher.config import areal

    # a config Hydra composed itself (a sweep point): its keys are sorted out like an open one's
    origin = _origins.get(id(cfg), (cfg, Origin(True, _peer_raw.get(_source))))[1]
    job = cfg
    if "hydra" in cfg:
        if OmegaConf.select(cfg, "hydra.job.chdir"):
            raise ConfigError(
                "hydra.job.chdir=true: areal-launch stays where it was started "
                "(relative paths are yours) and hands every process its run "
                "folder as AREAL_RUN_DIR; leave it false"
            )
        from hydra.core.hydra_config import HydraConfig

        HydraConfig.instance().set_config(cfg)  # for ${hydra:runtime.choices.X} in a config
        job = without_hydra(cfg)
    handoff: Optional[Handoff] = None
    servers: dict[str, dict] = {}
    if origin.opened:
        job, handoff, servers = _split_entry_keys(cfg, job, origin)
    spec = resolved(lambda: OmegaConf.to_object(job))
    resolved(lambda: _keep_open_keys(job, spec))
    run_dir = resolved(lambda: str(OmegaConf.select(cfg, "hydra.run.dir") or "outputs"))
    sweep_dir = resolved(lambda: str(OmegaConf.select(cfg, "hydra.sweep.dir") or "multirun"))
    assert isinstance(spec, LaunchConfig)
    for key, folder in (("hydra.run.dir", run_dir), ("hydra.sweep.dir", sweep_dir)):
        check_folder_name(key, folder)
    notes, asks = areal.apply_scheduling(
        spec, [n for n in ENGINES if engine(spec, n).backend is not None], os.environ
    )
    return RunSpec(spec, run_dir, sweep_dir, cfg, handoff, tuple(notes), servers, asks)


def without_hydra(cfg: DictConfig) -> DictConfig:
    """A copy of `cfg` without its `hydra` node, which is left out of the copy rather than
    copied and deleted (a quarter of the copy's time, on plan's start-up path)."""
    memo: dict[int, Any] = {id(cfg._get_node("hydra")): OmegaConf.create({})}  # its stand-in
    job = copy.deepcopy(cfg, memo)
    with open_dict(job):
        del job["hydra"]
    return job


def _split_entry_keys(
    cfg: DictConfig, job: DictConfig, origin: Origin
) -> tuple[DictConfig, Optional[Handoff], dict[str, dict]]:
    """(our part of `job`, what the entry gets, AReaL's server sections): the keys our
    schema does not declare are cut out; for our recipe the first of them is an error."""
    from launcher.config import areal

    unknown = areal.unknown_keys(job)
    entry = str(resolved(lambda: OmegaConf.select(job, "trainer.entry")))
    ours = areal.pruned(job, unknown)
    if areal.ours_entry(entry):
        if unknown:
            task = OmegaConf.select(cfg, "hydra.overrides.task", default=None)
            # as written: iterating a ListConfig resolves `${...}` in the overrides' text
            written = OmegaConf.to_container(task, resolve=False) if task is not None else []
            given = any(
                str(o).lstrip("+").startswith(unknown[0])
                for o in (written if isinstance(written, list) else [])
            )
            where = (
                ""
                if given or _source.config_name == "config"
                else f" in config {_source.config_name!r}"
            )
            raise areal.unknown_error(unknown[0], ours, where, entry)
        return ours, None, {}
    areal.model_from_actor(ours, job, origin.raw)
    servers = resolved(lambda: areal.server_sections(job))
    if not unknown and origin.raw is None:
        return ours, None, servers
    try:
        values = OmegaConf.to_container(job, resolve=True)
    except Exception:  # noqa: BLE001 - ${gconfig.x} of a key only the entry's schema has:
        values = OmegaConf.to_container(job, resolve=False)  # the entry resolves it
    assert isinstance(values, dict)
    overrides = list(OmegaConf.select(cfg, "hydra.overrides.task", default=None) or [])
    return ours, areal.handoff(values, areal.mask_of(unknown, origin.raw), overrides), servers


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
            raise ConfigError(
                f"{key}: the folder name {part[:40]!r}... is "
                f"{len(os.fsencode(part))} bytes, more than the {NAME_MAX} a "
                "file name may have; shorten experiment_name or trial_name "
                f"(they name the run folder) or set {key}"
            )


def hydra_record(spec: RunSpec, run_dir: Path) -> dict[str, str]:
    """Hydra's own record of a run, for its run folder: `<hydra.output_subdir>/config.yaml,
    hydra.yaml, overrides.yaml`, as @hydra.main writes them (nothing when it is null)."""
    cfg = spec.composed
    subdir = OmegaConf.select(cfg, "hydra.output_subdir") if "hydra" in cfg else None
    if not subdir:
        return {}
    job = without_hydra(cfg)
    hydra = OmegaConf.to_container(cfg.hydra, resolve=False)
    assert isinstance(hydra, dict)
    for key in ("help", "hydra_help"):
        hydra.pop(key, None)
    hydra.setdefault("runtime", {})["output_dir"] = str(run_dir)
    return {
        f"{subdir}/config.yaml": OmegaConf.to_yaml(job),
        f"{subdir}/hydra.yaml": OmegaConf.to_yaml({"hydra": hydra}),
        f"{subdir}/overrides.yaml": OmegaConf.to_yaml(cfg.hydra.overrides.task),
    }


def resolved(make: Callable[[], Any], overrides: Sequence[str] = ()) -> Any:
    """`make()`, with an interpolation that fails (`${oc.env:NOPE}`) as one line."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return make()
    except OmegaConfBaseException as exc:
        raise ConfigError(
            unresolved(exc, overrides) or explain_hydra_error(exc, overrides, suggest)
        ) from None


def choices_only(overrides: Sequence[str]) -> list[str]:
    """The overrides that pick config files (`rollout=sglang`, `experiment=...`), not values,
    and the entry (`trainer.entry`: whose keys an unknown one is)."""
    return [
        o
        for o in overrides
        if "." not in o.partition("=")[0]
        and not o.startswith(("hydra", "+", "~"))
        or o.startswith("trainer.entry=")
    ]


# ----------------------------------------------------------------------------- + and ~
def check_overrides(overrides: Sequence[str]) -> None:
    """`~key` deletes a key and `+key` adds one: only the user's own dicts take either."""
    for o in overrides:
        if o.startswith("~"):
            key = o[1:].partition("=")[0]
            if not key.startswith(FREE_FORM):
                fix = (
                    f"to turn {key} off write {key}=none"
                    if key in ENGINE_GROUPS
                    else "set it to another value instead"
                )
                raise ConfigError(f"{shown(o)}: removing a declared key is not supported; {fix}")


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
            if (
                schema is None
                or not dataclasses.is_dataclass(schema)
                or _backend_options_key(".".join(parts[:i]))
            ):
                break  # a free dict (launcher.env, components, a backend's options: typed later)
            if part not in {f.name for f in dataclasses.fields(schema)}:
                wrong = ".".join(parts[: i + 1])
                raise ConfigError(
                    f"unknown config key {wrong!r}{suggest(wrong, overrides)}: "
                    f"`+` adds keys only to {FREE_FORM_SHOWN} "
                    "(`areal-launch --cfg job` prints every key)"
                )
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
