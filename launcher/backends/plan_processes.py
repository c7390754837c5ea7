"""The plan's processes: servers first, then workers and trainers, so the servers' addresses
are known to both when their environment is written. A node's supervisor reads requests
(launcher.spec.request), it never builds them, so it never imports this."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional, Sequence

from launcher.backends.context import LaunchContext
from launcher.backends.kinds import serve_backend, worker_backend
from launcher.backends.torchrun import trainer_processes
from launcher.spec.builtins import ENGINES
from launcher.spec.plan import WORKERS, Plan
from launcher.spec.process import (
    CONTRACT_PREFIX,
    MAX_ENV_ADDRS,
    ProcessSpec,
    component_addrs_env,
    host_placeholder,
)
from launcher.spec.profiling import NSIGHT, Profiling
from launcher.spec.registry import TRAIN

if TYPE_CHECKING:
    from launcher.planning.build import Planned


def build_processes(
    planned: Planned,
    entry: str,
    entry_args: Sequence[str],
    ctx: LaunchContext,
    trainer_python: Optional[str] = None,
) -> Plan:
    """The plan with every process it needs and the backends' warnings added.

    `planned`: the plan and its typed engines and workers; `trainer_python`: the interpreter
    of every training engine's ranks (trainer.python)."""
    plan: Plan = planned.plan
    servers: list[ProcessSpec] = []
    addrs: list[str] = []
    by_server: dict[str, list[str]] = {}
    warnings: list[str] = []
    served: Optional[str] = None
    for comp in plan.components.values():
        if comp.is_inference:
            engine = planned.engines[comp.name]
            backend = serve_backend(comp.backend)
            made = backend.servers(comp, plan, engine, ctx)
            servers += made.processes
            addrs += made.addrs
            by_server[comp.name] = list(made.addrs)
            warnings += made.warnings
            served = served or backend.served_model(engine)  # the first (rollout's)
    workers = [
        p
        for comp in plan.components.values()
        if comp.is_worker
        for p in worker_backend(comp.backend).workers(
            comp, plan, planned.workers[comp.name], ctx, addrs
        )
    ]
    trainers = trainer_processes(plan, planned.engines, entry, entry_args, ctx, by_server, served)
    told = coordination(workers, by_server)
    own = {name: e.python for name, e in planned.engines.items() if e.python}
    own.update({name: w.python for name, w in planned.workers.items() if w.python})
    if trainer_python:
        own.update({c.name: trainer_python for c in plan.components.values() if c.kind == TRAIN})
    processes = tuple(interpreter(plan, p, ctx.python, own) for p in servers) + tuple(
        interpreter(plan, on_node(plan, p, told), ctx.python, own) for p in workers + trainers
    )
    names = [p.name for p in processes]
    if len(set(names)) != len(names):  # a bug here, not a user mistake
        raise AssertionError(f"duplicate process names: {names}")
    profiled, said = profiling_of(planned, processes, entry, ctx.run_dir)
    meta = dict(plan.meta)
    if profiled is not None:
        meta.update(profiled.as_meta())
        if profiled.backend == NSIGHT:
            processes = tuple(under_nsys(profiled, p) for p in processes)
    return dataclasses.replace(
        plan,
        processes=processes,
        warnings=tuple(plan.warnings) + tuple(warnings) + tuple(said),
        meta=meta,
    )


def profiling_of(
    planned: Planned, processes: Sequence[ProcessSpec], entry: str, run_dir: str
) -> tuple[Optional[Profiling], list[str]]:
    """cluster.profiling checked against this plan (launcher.planning.profiling)."""
    from launcher.config.handoff import ours_entry
    from launcher.planning.profiling import profiling

    config = planned.config
    known = {*ENGINES, *WORKERS, *map(str, config.components)}
    steps = getattr(config.recipe, "steps", None)
    return profiling(
        config.cluster.profiling,
        planned.plan,
        processes,
        run_dir,
        known,
        None if ours_entry(entry) else entry,
        steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
    )


def under_nsys(profiled: Profiling, p: ProcessSpec) -> ProcessSpec:
    """`p` run under `nsys profile` when its component is profiled (nsight)."""
    if not profiled.covers(p.component):
        return p
    return dataclasses.replace(p, argv=profiled.nsys_argv(p.name, p.argv, p.is_trainer))


def coordination(workers: Sequence[ProcessSpec], servers: dict[str, list[str]]) -> dict[str, str]:
    """`AREAL_<NAME>_ADDRS` for each serving component and each worker component that answers
    on a port (host:port,..., in process order); the plan has them too."""
    addrs: dict[str, list[str]] = {name: list(a) for name, a in servers.items()}
    for p in workers:
        if p.ports:
            addrs.setdefault(p.component, []).append(f"{host_placeholder(p.node)}:{p.ports[0]}")
    told = {component_addrs_env(name): ",".join(a) for name, a in addrs.items()}
    return {k: v for k, v in told.items() if len(v) <= MAX_ENV_ADDRS}


def on_node(plan: Plan, p: ProcessSpec, told: dict[str, str]) -> ProcessSpec:
    """A trainer or worker as its node group has it (the group's environment below the
    launcher's own variables), told where every worker answers."""
    group = plan.cluster.group_of(p.node)
    env = {**p.env, **told}
    if group is not None:
        env.update({k: v for k, v in group.env.items() if not k.startswith(CONTRACT_PREFIX)})
    return dataclasses.replace(p, env=env)


def interpreter(plan: Plan, p: ProcessSpec, default: str, own: dict[str, str]) -> ProcessSpec:
    """`p` run by its interpreter: its component's own (`own`: component -> interpreter),
    else its node group's, else the runner's `default`, which the backends wrote
    (launcher.spec.entry says why in that order)."""
    if not p.argv or p.argv[0] != default:
        return p
    group = plan.cluster.group_of(p.node)
    python = own.get(p.component.split(",")[0]) or (group.python if group else None) or default
    return p if python == default else dataclasses.replace(p, argv=(python, *p.argv[1:]))
