"""Archon trainers (AReaL's torch-native engine): torchrun workers given the same parallel-size
flags as Megatron, so one entry point can read either."""
from __future__ import annotations

from typing import Any

from launcher.engines.megatron import REFUSED, parallel_args
from launcher.plan import ComponentPlan

__all__ = ["REFUSED", "engine_args", "engine_env"]


def engine_args(comp: ComponentPlan, options: Any) -> list[str]:
    """Parallel flags only (archon.* options are not command-line flags)."""
    return parallel_args(comp.alloc)


def engine_env(device: str) -> dict[str, str]:
    return {}
