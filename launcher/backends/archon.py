"""Archon trainers (a torch-native FSDP2 engine, torchtitan-style): torchrun workers given the
same parallel-size flags as Megatron, so one entry point can read either."""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.backends.kinds import NoOptions, TrainBackend
from launcher.backends.megatron import PARALLEL_REFUSED, parallel_args
from launcher.spec.backend_facts import BUILTIN_BACKENDS

if TYPE_CHECKING:
    from launcher.planning.resolve import Engine
    from launcher.spec.plan import ComponentPlan


class ArchonBackend(TrainBackend[NoOptions]):
    """Parallel flags only; no options of its own yet (<engine>.archon.* is empty)."""

    facts = BUILTIN_BACKENDS["archon"]
    Options = NoOptions
    refused = PARALLEL_REFUSED

    def engine_args(self, comp: ComponentPlan, engine: Engine) -> list[str]:
        return parallel_args(comp.alloc)
