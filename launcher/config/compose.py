"""Compose the config with Hydra; Hydra's failures become one-line errors.

One path for every command: the launch, `plan`, a dry run, a sweep point, completion, `--cfg`
and `--help` compose through a `Composer`, with the search path Hydra's flags give:
`--config-path/-cp` (the primary config's folder; launcher/conf by default), `--config-name/-cn`
(the primary config; `config`) and `--config-dir/-cd` (one more folder, for a user's own
presets, clusters and whole configs). So what `plan` shows is what a launch runs.

Hydra composes over our schema with every node open (config.schema.open_schema): any key
composes, a typed key's value is checked by Hydra, and config.run sorts the keys out (a peer's
are translated by its adapter, an unknown one is an error or the entry's). We compose first and
start second, rather than letting `@hydra.main` make the run folder first: a run is validated
(and every sweep point rehearsed) before anything exists, and a user mistake is one line.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf

from launcher.config import hydra_private
from launcher.config.hydra_errors import explain_hydra_error, shown, unresolved
from launcher.config.schema import LaunchConfig
from launcher.spec.builtins import ENGINES
from launcher.spec.errors import ConfigError

CONFIG_PATH = "conf"  # launcher/conf: our configs
ROOT_KEYS = ("hydra", *(f.name for f in dataclasses.fields(LaunchConfig)))  # our sections
TASK_NAME = "areal-launch"  # hydra.job.name
PEER_PRIMARY = "areal_launch_peer_primary"  # ours with a peer's file laid over (ConfigStore)
# dicts whose keys the user chooses: `~` may remove one of those
FREE_FORM = (
    "launcher.env.",
    "components.",
    "cluster.component_placement.",
    "cluster.colocate.",
    *(f"{name}.env." for name in ENGINES),
    *(f"{name}.model." for name in ENGINES),
)


@dataclass(frozen=True)
class ConfigSource:
    """Where configs come from: Hydra's --config-path, --config-name and --config-dir."""

    config_path: Optional[str] = None  # None: launcher/conf
    config_name: str = "config"
    config_dir: Optional[str] = None  # searched too, for options launcher/conf lacks


class Composer:
    """Hydra opened for one source of configs, and what it found there: the primary config
    Hydra composes first and, for a peer's file (no defaults list: AReaL's), that file as
    written. One per command; every compose of the command goes through it."""

    def __init__(self, source: ConfigSource = ConfigSource()) -> None:
        self.source = source
        self._hydra: Any = None
        self._primary: Optional[tuple[str, Optional[dict]]] = None
        # overrides of keys our schema does not declare at the top level (`seed=1`, a peer's
        # `allocation_mode=...`), given to Hydra with `++` (it adds no top-level key without):
        # as given -> as written
        self.added: dict[str, str] = {}

    @property
    def hydra(self) -> Any:
        """Hydra's app object for this source (opened on first use); ConfigError for a
        folder that is not there."""
        if self._hydra is None:
            from launcher.config.schema import register_configs

            register_configs()
            self._hydra = hydra_private.open_hydra(TASK_NAME, self._primary_dir(), self._extra())
        return self._hydra

    def _primary_dir(self) -> str:
        path = self.source.config_path
        if path is None:
            return f"pkg://{hydra_private.APP_PACKAGE}/{CONFIG_PATH}"
        if path.startswith("pkg://"):
            return path
        if not Path(path).is_absolute():
            raise ConfigError(
                f"--config-path {path}: Hydra reads a relative path from the app's package; "
                "give an absolute path (or pkg://module), or add a folder of your own with "
                "--config-dir DIR"
            )
        if not Path(path).is_dir():
            raise ConfigError(f"--config-path {path}: no such folder")
        return str(Path(path))

    def _extra(self) -> Optional[Path]:
        if self.source.config_dir is None:
            return None
        folder = Path(self.source.config_dir).expanduser().absolute()
        if not folder.is_dir():
            raise ConfigError(f"--config-dir {self.source.config_dir}: no such folder")
        return folder

    @property
    def config_name(self) -> str:
        """The config name for Hydra (the wrapper of a peer's file, or the user's -cn)."""
        return self.primary()[0]

    @property
    def peer_raw(self) -> Optional[dict]:
        """A peer's primary file as written (None: a config of ours)."""
        return self.primary()[1]

    def primary(self) -> tuple[str, Optional[dict]]:
        if self._primary is None:
            self._primary = self._find_primary()
        return self._primary

    def _find_primary(self) -> tuple[str, Optional[dict]]:
        """The config Hydra composes first: the user's -cn, or (a peer's file without a
        defaults list) ours with that file laid over where our config.yaml has `_self_`."""
        source = self.source
        if source.config_name == "config" and source.config_path is None and not self._mine():
            return source.config_name, None  # ours: the hot path reads no file
        found = self._mine() or self._in_primary_dir()
        if found is None:
            return source.config_name, None  # Hydra says it is missing, with its search path
        loaded = peer_bases(found, OmegaConf.load(found))  # AReaL's `base@_global_` merged
        if not isinstance(loaded, DictConfig) or _starts_from_ours(loaded):
            return source.config_name, None  # a config of ours, with a defaults list
        if source.config_path is not None:
            raise ConfigError(
                f"--config-path {source.config_path}: {source.config_name!r} is a config of "
                "another launcher, laid over ours, and -cp replaces ours: "
                "give its folder with --config-dir/-cd instead"
            )
        raw = (
            OmegaConf.to_container(loaded, resolve=False)
            if "defaults" not in loaded
            else composed_as_written(found)
        )
        assert isinstance(raw, dict)
        self._register_peer_primary(raw)
        return PEER_PRIMARY, raw

    def _mine(self) -> Optional[Path]:
        """`<-cd>/<-cn>.yaml`: launcher/conf comes first in Hydra's search path, so a peer's own
        config.yaml there is read from its folder, not shadowed by ours without a word."""
        if self.source.config_dir is None:
            return None
        found = Path(self.source.config_dir).expanduser() / f"{self.source.config_name}.yaml"
        return found if found.is_file() else None

    def _in_primary_dir(self) -> Optional[Path]:
        path = self.source.config_path
        folder = Path(__file__).resolve().parents[1] / CONFIG_PATH if path is None else Path(path)
        found = folder / f"{self.source.config_name}.yaml"
        return found if not str(path or "").startswith("pkg://") and found.is_file() else None

    @staticmethod
    def _register_peer_primary(raw: dict) -> None:
        from hydra.core.config_store import ConfigStore

        ours = OmegaConf.load(Path(__file__).resolve().parents[1] / CONFIG_PATH / "config.yaml")
        assert isinstance(ours, DictConfig)
        defaults = ours.pop("defaults")
        # an engine the file does not name, or names null (`ref: null`), is off (an SFT
        # config has no rollout)
        off = {name: {"backend": None} for name in ENGINES if raw.get(name) is None}
        given = {k: v for k, v in raw.items() if not (k in ENGINES and v is None)}
        # unresolved: `tokenizer_path: ${actor.path}` follows an override of actor.path
        over = OmegaConf.to_container(OmegaConf.merge(ours, off, given), resolve=False)
        assert isinstance(over, dict)
        ConfigStore.instance().store(name=PEER_PRIMARY, node={"defaults": defaults, **over})

    # ------------------------------------------------------------------------- composing
    def compose(
        self, overrides: Sequence[str], with_hydra: bool = False, multirun: bool = False
    ) -> DictConfig:
        """The config for `overrides` (Hydra command-line syntax); ConfigError for a mistake.
        A peer's key that chooses a runner (AReaL's scheduler.type) composes again with it."""
        from launcher.config import peers

        check_overrides(overrides)
        try:
            name = self.config_name
        except ConfigError:
            raise
        except Exception as exc:  # the file does not load (a duplicate key): Hydra's own error
            raise self.error(exc, overrides) from None
        cfg = self.explained(lambda: self._composed(name, overrides, multirun), overrides)
        runner = resolved(lambda: peers.runner_choice(cfg, tuple(overrides)), overrides)
        if runner is not None:
            more = [*overrides, f"launcher={runner}"]
            cfg = self.explained(lambda: self._composed(name, more, multirun), overrides)
        if not with_hydra:
            cfg = without_hydra(cfg)
        return cfg

    def _composed(self, name: str, overrides: Sequence[str], multirun: bool) -> DictConfig:
        """Hydra's compose; an override of a top-level key our schema does not declare is
        given again with `++`, for config.run to sort out (a peer's, or an unknown one)."""
        given = list(overrides)
        while True:
            try:
                return hydra_private.compose(self.hydra, name, given, multirun)
            except ConfigCompositionException as exc:
                key = _refused_key(exc)
                at = next((i for i, o in enumerate(given) if _plain(o, key)), None)
                if at is None or key is None or key.split(".")[0] in ROOT_KEYS:
                    raise  # below one of our sections: a key of the user's own dicts takes `+`
                self.added[f"++{given[at]}"] = given[at]
                given[at] = f"++{given[at]}"

    def explained(self, compose: Callable[[], DictConfig], overrides: Sequence[str]) -> DictConfig:
        """`compose()` (Hydra composing for these overrides), its failure as one line."""
        try:
            return compose()
        except Exception as exc:  # Hydra raises several unrelated types for user mistakes
            raise self.error(exc, overrides) from None

    def error(self, exc: BaseException, overrides: Sequence[str]) -> ConfigError:
        """Hydra's failure as one line; a peer's file is named as the user named it."""
        text = explain_hydra_error(exc, overrides, FREE_FORM)
        return ConfigError(text.replace(repr(PEER_PRIMARY), repr(self.source.config_name)))


def _refused_key(exc: BaseException) -> Optional[str]:
    """The key of an override Hydra would not add (a key its config does not have)."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    cause = exc.__cause__
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
        return str(cause.full_key) if cause.full_key else None
    return None


def _plain(override: str, key: Optional[str]) -> bool:
    """`override` sets `key` (or a key below it) without `+` or `~`."""
    written = override.partition("=")[0]
    return (
        key is not None
        and not override.startswith(("+", "~"))
        and (written == key or written.startswith(f"{key}."))
    )


OUR_ROOTS = ("config", "base_config")  # a defaults list naming one of these starts from ours


def _starts_from_ours(loaded: DictConfig) -> bool:
    """Whether a file with a defaults list is a config of ours (`defaults: [config, _self_]`)
    rather than a peer's with its own groups (RLinf's `env/maniskill@env.train`)."""
    if "defaults" not in loaded:
        return False
    entries = OmegaConf.to_container(loaded.defaults, resolve=False)
    return any(str(e).strip() in OUR_ROOTS for e in entries or [] if isinstance(e, str))


def composed_as_written(found: Path) -> dict:
    """A peer's file with its own defaults list, composed as its launcher composes it (Hydra's
    public compose from the file's folder, with the file's own search path, as RLinf's
    `@hydra.main(version_base="1.1")` does), without Hydra's node: the config it means."""
    import warnings

    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    held = GlobalHydra.instance().hydra  # ours, if opened: back in place afterwards
    GlobalHydra.instance().clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Hydra's notes on _self_ and on version 1.1
            # version 1.1: RLinf's, and Hydra's own default for an app that names none (ours)
            with initialize_config_dir(str(found.parent.absolute()), TASK_NAME, "1.1"):
                cfg = hydra_compose(config_name=found.stem)
    finally:
        GlobalHydra.instance().clear()
        if held is not None:
            GlobalHydra.instance().initialize(held)
    raw = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(raw, dict)
    return raw


def without_hydra(cfg: DictConfig) -> DictConfig:
    """A copy of `cfg` without its `hydra` node (the run's own keys only)."""
    import copy

    from omegaconf import open_dict

    job = copy.deepcopy(cfg)
    if "hydra" in job:
        with open_dict(job):
            del job["hydra"]
    return job


def resolved(make: Callable[[], Any], overrides: Sequence[str] = ()) -> Any:
    """`make()`, with an interpolation that fails (`${oc.env:NOPE}`) as one line."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return make()
    except OmegaConfBaseException as exc:
        raise ConfigError(
            unresolved(exc, overrides) or explain_hydra_error(exc, overrides)
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


def check_overrides(overrides: Sequence[str]) -> None:
    """`~key` deletes a key: only the user's own dicts take it."""
    for o in overrides:
        if o.startswith("~"):
            key = o[1:].partition("=")[0]
            if not key.startswith(FREE_FORM):
                fix = (
                    f"to turn {key} off write {key}=none"
                    if key in ENGINES
                    else "set it to another value instead"
                )
                raise ConfigError(f"{shown(o)}: removing a declared key is not supported; {fix}")


# ----------------------------------------------------------------------------- a peer's bases
PEER_BASE = "@_global_"  # AReaL's `defaults: [../math/gsm8k_grpo_megatron@_global_, _self_]`


def peer_bases(path: Path, loaded: Any, depth: int = 0) -> Any:
    """A peer's file whose defaults list only names other files of its own at the top level
    (`../math/base@_global_`, `_self_`): those files merged under it in order, as Hydra
    composes them for the peer, with no defaults list left; any other file as it is."""
    entries = loaded.get("defaults") if isinstance(loaded, DictConfig) else None
    if not entries or depth > 8:
        return loaded
    names = [str(e) for e in entries]
    if not any(n.endswith(PEER_BASE) for n in names) or not all(
        n == "_self_" or n.endswith(PEER_BASE) for n in names
    ):
        return loaded
    raw = OmegaConf.to_container(loaded, resolve=False)  # interpolations as written
    assert isinstance(raw, dict)
    own = OmegaConf.create({k: v for k, v in raw.items() if k != "defaults"})
    parts = []
    for name in names if "_self_" in names else [*names, "_self_"]:
        if name == "_self_":
            parts.append(own)
            continue
        base = (path.parent / f"{name[: -len(PEER_BASE)]}.yaml").resolve()
        if not base.is_file():
            raise ConfigError(f"defaults: {name}: {base} is not a file")
        parts.append(peer_bases(base, OmegaConf.load(base), depth + 1))
    return OmegaConf.merge(*parts)
