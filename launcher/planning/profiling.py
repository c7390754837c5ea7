"""`cluster.profiling` checked against the plan it profiles (pure): the backend, the components
(none named: every trainer), the steps, where the reports go, nsys's options and flags. Every
mistake is one line naming the key; a component the launcher knows of that is off in this run
is a warning (nothing of it is profiled), a name it does not know an error."""

from __future__ import annotations

import re
from typing import Any, Collection, Optional, Sequence

from launcher.config.schema import ProfilingConfig
from launcher.spec.errors import ConfigError
from launcher.spec.plan import Plan
from launcher.spec.process import ProcessSpec
from launcher.spec.profiling import (
    BACKENDS,
    MAX_STEP,
    MAX_STEPS_LISTED,
    NSIGHT,
    PROFILES,
    TORCH,
    Profiling,
)
from launcher.spec.registry import TRAIN

KEY = "cluster.profiling"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")  # an nsys option or flag, without dashes
OUTPUT = ("o", "output")  # the launcher names each process's report


def is_on(cfg: ProfilingConfig) -> bool:
    """`enabled`, or when it is unset, whether any other key is set (RLinf's reading)."""
    if cfg.enabled is not None:
        return bool(cfg.enabled)
    return any(
        (
            cfg.backend is not None,
            cfg.components,
            cfg.steps,
            cfg.output_dir is not None,
            cfg.options,
            cfg.flags,
        )
    )


def profiling(
    cfg: ProfilingConfig,
    plan: Plan,
    processes: Sequence[ProcessSpec],
    run_dir: str,
    known: Collection[str],
    recipe: Optional[str],
    recipe_steps: Optional[int] = None,
) -> tuple[Optional[Profiling], list[str]]:
    """What the run profiles (None: nothing) and the warnings to print.

    `known`: every component name the launcher knows of, on or off; `recipe`: None when
    trainer.entry is one of this project's recipes (which record torch traces), else the
    entry as written; `recipe_steps`: how many steps that recipe runs, when it says."""
    if not is_on(cfg):
        return None, []
    backend = TORCH if cfg.backend is None else str(cfg.backend)
    if backend not in BACKENDS:
        raise ConfigError(
            f"{KEY}.backend={backend}: not a profiler areal-launch runs; choose torch "
            "(torch.profiler traces of the default recipe's trainer ranks) or nsight (the "
            "processes under `nsys profile`)"
        )
    names, warnings = _components(cfg.components, plan, processes, known, backend)
    if backend == TORCH:
        _torch_only(cfg, recipe)
    steps = _steps(cfg.steps, None if recipe else recipe_steps)
    options, flags = _nsys(cfg) if backend == NSIGHT else ({}, ())
    whole = [n for n in names if plan.components[n].kind != TRAIN]
    if backend == NSIGHT and steps and whole:
        warnings.append(
            f"{KEY}.steps gate the trainers' capture (the recipe opens it around each step); "
            f"{', '.join(whole)} run under nsys from start to end"
        )
    if cfg.output_dir is not None and not str(cfg.output_dir).strip():
        raise ConfigError(
            f"{KEY}.output_dir is empty: give a folder, or leave it unset for "
            f"<run folder>/{PROFILES}"
        )
    out = str(cfg.output_dir) if cfg.output_dir else f"{run_dir}/{PROFILES}"
    return Profiling(backend, names, out.rstrip("/") or "/", steps, options, flags), warnings


def _components(
    given: Sequence[str],
    plan: Plan,
    processes: Sequence[ProcessSpec],
    known: Collection[str],
    backend: str,
) -> tuple[tuple[str, ...], list[str]]:
    """The components profiled: those named that this run has, else every trainer."""
    here = plan.components
    trainers = tuple(n for n, c in here.items() if c.kind == TRAIN)
    warnings: list[str] = []
    names: list[str] = []
    for raw in given or ():
        name = str(raw).strip()
        if name in here:
            names += [] if name in names else [name]
        elif name in known:
            warnings.append(
                f"{KEY}.components: {name} is off in this run; nothing of it is profiled"
            )
        else:
            raise ConfigError(
                f"{KEY}.components: {name!r} is no component of this run (its components: "
                f"{', '.join(here) or 'none'})"
            )
    if not given:
        names = list(trainers)
    if not names:
        raise ConfigError(
            f"{KEY}: nothing to profile: "
            + (
                "no component named is in this run"
                if given
                else "this run has no trainer; "
                "name the components with cluster.profiling.components"
            )
        )
    run = {c for p in processes for c in p.component.split(",")}
    for name in names:
        kind = here[name].kind
        if backend == TORCH and kind != TRAIN:
            raise ConfigError(
                f"{KEY}.components: {name} is a {kind} component; backend torch records the "
                "default recipe's trainer ranks: use backend nsight to run its processes under "
                "nsys"
            )
        if backend == NSIGHT and name not in run:
            raise ConfigError(
                f"{KEY}.components: {name} has no process in this plan to run under nsys"
            )
    return tuple(names), warnings


def _torch_only(cfg: ProfilingConfig, recipe: Optional[str]) -> None:
    for key, value in (("options", cfg.options), ("flags", cfg.flags)):
        if value:
            raise ConfigError(
                f"{KEY}.{key}: nsys's {key}, for backend nsight; backend torch takes none"
            )
    if recipe is not None:
        raise ConfigError(
            f"{KEY}.backend=torch: the default recipe records the traces, and trainer.entry="
            f"{recipe} is not one of this project's recipes: use backend nsight"
        )


def _steps(given: Optional[Sequence[Any]], last: Optional[int]) -> tuple[int, ...]:
    """The step numbers, bounded and sorted (empty: every step)."""
    given = list(given or ())
    if len(given) > MAX_STEPS_LISTED:
        raise ConfigError(
            f"{KEY}.steps: {len(given)} steps listed; at most {MAX_STEPS_LISTED} (leave it "
            "unset for every step)"
        )
    for s in given:
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= MAX_STEP:
            raise ConfigError(
                f"{KEY}.steps: {s!r} is no step number; steps count from 1 to {MAX_STEP}"
            )
        if last is not None and s > last:
            raise ConfigError(
                f"{KEY}.steps: step {s} is past recipe.steps={last}; no such step runs"
            )
    return tuple(sorted(set(given)))


def _nsys(cfg: ProfilingConfig) -> tuple[dict[str, str], tuple[str, ...]]:
    """nsys's options (values as text, booleans as nsys writes them) and flags, checked."""
    options: dict[str, str] = {}
    for name, value in dict(cfg.options or {}).items():
        name = str(name)
        where = f"{KEY}.options.{name}"
        if not _NAME.match(name):
            raise ConfigError(f"{where}: not an nsys option name (letters, digits, '-')")
        if name in OUTPUT:
            raise ConfigError(
                f"{where}: the launcher names each process's report; set "
                f"{KEY}.output_dir for the folder"
            )
        if value is None or isinstance(value, (dict, list)):
            raise ConfigError(f"{where}={value!r}: give one value (a flag goes in {KEY}.flags)")
        options[name] = str(value).lower() if isinstance(value, bool) else str(value)
    given = cfg.flags or ()
    if not isinstance(given, (str, list, tuple)):
        raise ConfigError(f"{KEY}.flags={given!r}: a list of nsys's flags (python-backtrace)")
    flags = (given,) if isinstance(given, str) else tuple(str(f) for f in given)
    for flag in flags:
        if not _NAME.match(flag):
            raise ConfigError(f"{KEY}.flags: {flag!r} is not an nsys flag name")
        if flag in options:
            raise ConfigError(f"{KEY}.flags: {flag} is an option too; give it once")
    return options, flags
