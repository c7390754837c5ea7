"""The plan's processes: servers first, then workers and trainers, so the servers' addresses
are known to both when their environment is written. A node's supervisor reads requests
(launcher.spec.request), it never builds them, so it never imports this."""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from launcher.backends.context import LaunchContext
from launcher.backends.protocol import serve_backend, worker_backend
from launcher.backends.servers import served_model_name
from launcher.backends.torchrun import trainer_processes
from launcher.spec.plan import Plan, ProcessSpec


def build_processes(planned: Any, entry: str, entry_args: Sequence[str],
                    ctx: LaunchContext) -> Plan:
    """The plan with every process it needs and the backends' warnings added.

    `planned` is a launcher.planning.build.Planned (the plan and its typed engines)."""
    plan: Plan = planned.plan
    servers: list[ProcessSpec] = []
    addrs: list[str] = []
    warnings: list[str] = []
    served: Optional[str] = None
    for comp in plan.components.values():
        if comp.is_inference:
            engine = planned.engines[comp.name]
            made = serve_backend(comp.backend).servers(comp, plan, engine, ctx)
            servers += made.processes
            addrs += made.addrs
            warnings += made.warnings
            served = served_model_name(engine.options)
    trainers = trainer_processes(plan, planned.engines, entry, entry_args, ctx, addrs, served)
    workers = [p for comp in plan.components.values() if comp.is_worker
               for p in worker_backend(comp.backend).workers(
                   comp, plan, planned.workers[comp.name], ctx, addrs)]
    processes = tuple(servers) + tuple(workers) + tuple(trainers)
    names = [p.name for p in processes]
    if len(set(names)) != len(names):  # a bug here, not a user mistake
        raise AssertionError(f"duplicate process names: {names}")
    return dataclasses.replace(plan, processes=processes,
                               warnings=tuple(plan.warnings) + tuple(warnings))
