"""FSDP2 trainers: plain torchrun workers. The entry point builds its (dp, cp, tp) device mesh
from the plan it is handed (AREAL_LAUNCH_PLAN), so no parallel flags go on its command line."""
from __future__ import annotations

from typing import Any

from launcher.plan import ComponentPlan


def engine_args(comp: ComponentPlan, options: Any) -> list[str]:
    """Flags after the entry point: none (fsdp.* options are not command-line flags)."""
    return []


def engine_env(device: str) -> dict[str, str]:
    """Environment defaults for its workers."""
    return {}


REFUSED: dict[str, str] = {}
