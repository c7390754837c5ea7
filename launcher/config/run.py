"""A composed config as the run's typed values: the only reader of the Hydra config.

`run_spec` takes what a Composer composed and returns a `ComposedRun`: the peers' keys
translated into ours by their adapters (launcher.config.peers), the keys our schema does not
declare handed to an entry that is not ours (launcher.config.handoff) or refused for our
recipe, every interpolation resolved, every value typed and checked. Nothing after it reads
the Hydra config: planning and everything below take the dataclasses of config.schema.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from launcher.config import handoff as entry_keys
from launcher.config.compose import resolved, without_hydra
from launcher.config.peers import Context, Translation, translate, unknown_hint
from launcher.config.schema import LaunchConfig, engine
from launcher.spec.builtins import ENGINES
from launcher.spec.errors import ConfigError, UserError
from launcher.spec.limits import MAX_CPUS_PER_GPU, MAX_MEM_GIB_PER_GPU
from launcher.spec.request import EngineAsk

if TYPE_CHECKING:
    from launcher.config.compose import Composer

NAME_MAX = 255  # bytes of one file name on Linux and macOS file systems (ENAMETOOLONG)


@dataclass(frozen=True)
class ComposedRun:
    """A composed run: the typed config, where Hydra says its folders go, the composed config
    itself (written to the run folder as Hydra's own record, hydra.output_subdir), what an
    entry not ours gets (handoff), what the peers' adapters did (translation: notes, the
    spellings messages use, the flags a peer's section gave the servers), and each engine's
    resource asks (what the runner reserves beside its GPUs)."""

    config: LaunchConfig
    run_dir: str
    sweep_dir: str
    composed: DictConfig
    handoff: Optional[entry_keys.Handoff] = None
    translation: Translation = field(default_factory=Translation)
    asks: Mapping[str, EngineAsk] = field(default_factory=dict)

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(self.translation.notes)


def run_spec(composer: "Composer", cfg: DictConfig) -> ComposedRun:
    """The typed run of `cfg` (composed by `composer`, with Hydra's node or without)."""
    overrides = written_overrides(cfg, composer.added)
    if "hydra" in cfg:
        if OmegaConf.select(cfg, "hydra.job.chdir"):
            raise ConfigError(
                "hydra.job.chdir=true: areal-launch stays where it was started (relative paths "
                "are yours) and hands every process its run folder as AREAL_RUN_DIR; leave it "
                "false"
            )
        from hydra.core.hydra_config import HydraConfig

        HydraConfig.instance().set_config(cfg)  # for ${hydra:runtime.choices.X} in a config
    job = without_hydra(cfg)
    entry = str(resolved(lambda: OmegaConf.select(job, "trainer.entry"), overrides))
    ours = entry_keys.ours_entry(entry)
    raw = composer.peer_raw
    theirs = entry_keys.unknown_keys(job)  # before the adapters: every key that is not ours
    values = None if ours or (not theirs and raw is None) else _values(job)
    if values is not None and raw:  # a key the file sets null (`ref: null`) is null to its entry
        values.update({str(k): None for k, v in raw.items() if v is None})
    context = Context(
        overrides=tuple(overrides),
        raw=raw,
        runner=str(
            OmegaConf.select(cfg, "hydra.runtime.choices.launcher", default=None) or "local"
        ),
        ours_entry=ours,
        environ=dict(os.environ),
        config_name=composer.source.config_name,
    )
    translation = resolved(lambda: translate(job, context), overrides)
    try:
        return _typed(
            composer,
            cfg,
            job,
            overrides,
            translation,
            entry if ours else None,
            None
            if values is None
            else entry_keys.handoff(values, entry_keys.mask_of(theirs, raw), overrides),
        )
    except UserError as exc:
        raise translation.restated(exc) from None


def _typed(
    composer: "Composer",
    cfg: DictConfig,
    job: DictConfig,
    overrides: Sequence[str],
    translation: Translation,
    our_entry: Optional[str],
    handoff: Optional[entry_keys.Handoff],
) -> ComposedRun:
    unknown = entry_keys.unknown_keys(job)
    if unknown and our_entry is not None:
        raise _unknown(composer, job, unknown, overrides, our_entry)
    job = entry_keys.pruned(job, unknown)
    spec = resolved(lambda: OmegaConf.to_object(job), overrides)
    assert isinstance(spec, LaunchConfig)
    run_dir = resolved(lambda: str(OmegaConf.select(cfg, "hydra.run.dir") or "outputs"))
    sweep_dir = resolved(lambda: str(OmegaConf.select(cfg, "hydra.sweep.dir") or "multirun"))
    for key, folder in (("hydra.run.dir", run_dir), ("hydra.sweep.dir", sweep_dir)):
        check_folder_name(key, folder)
    asks = resource_asks(spec, translation.as_written)
    return ComposedRun(spec, run_dir, sweep_dir, cfg, handoff, translation, asks)


def _unknown(
    composer: "Composer", job: DictConfig, unknown: list[str], overrides: Sequence[str], entry: str
) -> ConfigError:
    key = unknown[0]
    given = [o for o in overrides if o.lstrip("+~").startswith(key)]
    known = entry_keys.pruned(job, unknown)
    written = [o.lstrip("+~").partition("=")[0] for o in given]
    typed = next((w for w in written if w.startswith(f"{key}.")), None)  # as the user typed it
    if typed is not None and entry_keys.closest_key(typed, known):
        key = typed
    where = (
        ""
        if given or composer.source.config_name == "config"
        else (f" in config {composer.source.config_name!r}")
    )
    added = any(o.startswith("+") for o in given)
    return entry_keys.unknown_error(key, known, where, entry, added, unknown_hint(key))


def _values(job: DictConfig) -> dict:
    """`job` as plain values, resolved where it can be: `${gconfig.x}` of a key only the
    entry's schema has is handed as written, for the entry to resolve."""
    try:
        values = OmegaConf.to_container(job, resolve=True)
    except Exception:  # noqa: BLE001 - an interpolation only the entry can resolve
        values = OmegaConf.to_container(job, resolve=False)
    assert isinstance(values, dict)
    return values


def written_overrides(cfg: DictConfig, added: Mapping[str, str] = {}) -> list[str]:
    """The command line's overrides as written (Hydra's record of them, `added`: those the
    composer gave Hydra with `++`), [] without one."""
    task = OmegaConf.select(cfg, "hydra.overrides.task", default=None) if "hydra" in cfg else None
    written = OmegaConf.to_container(task, resolve=False) if task is not None else []
    return [added.get(str(o), str(o)) for o in written] if isinstance(written, list) else []


def resource_asks(
    config: LaunchConfig, written: Callable[[str], str] = str
) -> dict[str, EngineAsk]:
    """Each running engine's resources per GPU (`<engine>.resources`), bounded, as the asks a
    runner reserves beside its GPUs, each with where the user wrote it (`written`: a key as
    the config spelled it); engines that ask nothing are left out."""
    out = {}
    for name in ENGINES:
        node = engine(config, name)
        if node.backend is None:
            continue
        r = node.resources
        for key, value, top, unit in (
            ("cpus_per_gpu", r.cpus_per_gpu, MAX_CPUS_PER_GPU, "CPU cores"),
            ("mem_gib_per_gpu", r.mem_gib_per_gpu, MAX_MEM_GIB_PER_GPU, "GiB of memory"),
        ):
            if value is not None and (isinstance(value, bool) or not 0 <= value <= top):
                raise ConfigError(
                    f"{name}.resources.{key}={value!r}: {unit} per GPU, a whole number from 0 "
                    f"to {top}"
                )
        for key, value, what, example in (
            ("image", r.image, "a container image name", "rayproject/ray:2.40.0-py311"),
            ("nodelist", r.nodelist, "Slurm's node names", "gpu[01-04]"),
            ("exclude", r.exclude, "Slurm's node names", "gpu[01-04]"),
            ("reservation", r.reservation, "a Slurm reservation's name", "maint_0412"),
        ):
            if value is not None and (
                not str(value).strip() or any(c.isspace() for c in str(value))
            ):
                raise ConfigError(
                    f"{name}.resources.{key}={value!r}: {what} without spaces, e.g. {example}"
                )
        ask = EngineAsk(
            r.cpus_per_gpu or 0,
            r.mem_gib_per_gpu or 0,
            r.image,
            r.nodelist,
            r.exclude,
            key=written(f"{name}.resources"),
            reservation=r.reservation,
            exclusive=r.exclusive,
        )
        if ask.asked():
            out[name] = ask
    return out


def check_folder_name(key: str, folder: str) -> None:
    """Each part of a run folder's path fits in a file name, so making it cannot fail."""
    for part in Path(folder).parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise ConfigError(
                f"{key}: the folder name {part[:40]!r}... is {len(os.fsencode(part))} bytes, "
                f"more than the {NAME_MAX} a file name may have; shorten experiment_name or "
                f"trial_name (they name the run folder) or set {key}"
            )


def hydra_record(run: ComposedRun, run_dir: Path) -> dict[str, str]:
    """Hydra's own record of a run, for its run folder: `<hydra.output_subdir>/config.yaml,
    hydra.yaml, overrides.yaml`, as @hydra.main writes them (nothing when it is null)."""
    cfg = run.composed
    subdir = OmegaConf.select(cfg, "hydra.output_subdir") if "hydra" in cfg else None
    if not subdir:
        return {}
    hydra = OmegaConf.to_container(cfg.hydra, resolve=False)
    assert isinstance(hydra, dict)
    for key in ("help", "hydra_help"):
        hydra.pop(key, None)
    hydra.setdefault("runtime", {})["output_dir"] = str(run_dir)
    return {
        f"{subdir}/config.yaml": OmegaConf.to_yaml(without_hydra(cfg)),
        f"{subdir}/hydra.yaml": OmegaConf.to_yaml({"hydra": hydra}),
        f"{subdir}/overrides.yaml": OmegaConf.to_yaml(cfg.hydra.overrides.task),
    }
