"""Engines turn plan entries into ProcessSpecs: one module per backend (DESIGN §1, §6, §7).

`build_processes(plan, cfg, ctx)` is pure: everything outside the plan and the config (ports,
node addresses, the interpreter, the run folder) comes through `LaunchContext`, which the
runner fills. Servers come first (one per rollout instance and node), then trainers (one
torchrun per node of each trainer job), so the servers' addresses are known to the trainers.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from launcher.engines import sglang, torchrun, vllm
from launcher.engines.context import LaunchContext
from launcher.engines.options import check_unused_options
from launcher.plan import Plan, ProcessSpec

SERVERS = {"sglang": sglang.server_processes, "vllm": vllm.server_processes}

__all__ = ["LaunchContext", "build_processes", "plan_with_processes", "check_unused_options"]


def build_processes(plan: Plan, cfg: Any, ctx: LaunchContext) -> tuple[ProcessSpec, ...]:
    """Every process the plan needs, servers first, then trainers."""
    return processes_and_warnings(plan, cfg, ctx)[0]


def plan_with_processes(plan: Plan, cfg: Any, ctx: LaunchContext) -> Plan:
    """The plan with its processes filled in and the engines' warnings added."""
    processes, warnings = processes_and_warnings(plan, cfg, ctx)
    return dataclasses.replace(plan, processes=processes,
                               warnings=tuple(plan.warnings) + warnings)


def processes_and_warnings(plan: Plan, cfg: Any, ctx: LaunchContext
                           ) -> tuple[tuple[ProcessSpec, ...], tuple[str, ...]]:
    """The processes, plus what the user should know about them (e.g. an offload not done)."""
    servers: list[ProcessSpec] = []
    addrs: list[str] = []
    warnings: list[str] = []
    for comp in plan.components.values():
        if comp.is_inference:
            made = SERVERS[comp.backend](comp, plan, cfg, ctx)
            servers += made.processes
            addrs += made.addrs
            warnings += made.warnings
    trainers = torchrun.trainer_processes(plan, cfg, ctx, addrs)
    processes = tuple(servers) + tuple(trainers)
    names = [p.name for p in processes]
    if len(set(names)) != len(names):  # a bug here, not a user mistake
        raise AssertionError(f"duplicate process names: {names}")
    return processes, tuple(warnings)
