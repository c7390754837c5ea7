"""Archon trainers (AReaL's torch-native engine): torchrun workers given the same parallel-size
flags as Megatron, so one entry point can read either."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher.backends.fsdp import INSTALL as INSTALL
from launcher.backends.megatron import REFUSED as REFUSED
from launcher.backends.megatron import parallel_args
from launcher.memory.train import FSDP2, TrainOptions
from launcher.spec.registry import TRAIN

if TYPE_CHECKING:
    from launcher.spec.plan import ComponentPlan

NAME = "archon"
KIND = TRAIN
DIMS = "dtpce"
HYBRID = True
EXAMPLE = "archon:d4t2"
ORDER = 2
MEMORY_MODEL = FSDP2  # FSDP2 like fsdp, with tensor, pipeline and expert parallel
MEMORY_KEYS: dict[str, str] = {}


@dataclass
class Options:
    """<engine>.archon.*: no options yet (an option nothing reads would be a lie)."""


def engine_args(comp: "ComponentPlan", options: Options) -> list[str]:
    """Parallel flags only."""
    return parallel_args(comp.alloc)


def engine_env(device: str) -> dict[str, str]:
    return {}


def train_options(options: Options, base: TrainOptions) -> TrainOptions:
    """No options of its own: the generic knobs as they are."""
    return base
