"""Megatron trainers: torchrun workers told their parallel layout with Megatron-LM's own flags.

dp is not a flag: Megatron derives it (world / (tp*pp*cp)). The MoE hybrid form's expert
layout is `--expert-model-parallel-size` (e) and `--expert-tensor-parallel-size` (etp).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from launcher.backends.fsdp import INSTALL as INSTALL  # torch, like every trainer
from launcher.memory.train import MEGATRON, TrainOptions
from launcher.spec.registry import TRAIN

if TYPE_CHECKING:
    from launcher.spec.alloc import ModelAllocation
    from launcher.spec.plan import ComponentPlan

NAME = "megatron"
KIND = TRAIN
DIMS = "dtpce"
HYBRID = True
EXAMPLE = "megatron:d2p2t2"
ORDER = 1
MEMORY_MODEL = MEGATRON
MEMORY_KEYS = {"optimizer_cpu_offload": "optimizer_cpu_offload"}


@dataclass
class Options:
    """<engine>.megatron.*: Megatron-LM flags after the entry point."""

    sequence_parallel: bool = False
    use_distributed_optimizer: bool = True
    recompute_granularity: Optional[str] = None  # full | selective
    optimizer_cpu_offload: bool = False  # master weights and Adam moments on the host

    def problem(self) -> Optional[str]:
        """What is wrong with these options (resolve prefixes the engine and backend)."""
        if self.recompute_granularity not in (None, "full", "selective"):
            return (
                f"recompute_granularity={self.recompute_granularity}: choose full or "
                "selective (or null)"
            )
        return None


PARALLEL_FLAGS = (
    ("--tensor-model-parallel-size", "tp", "t"),
    ("--pipeline-model-parallel-size", "pp", "p"),
    ("--context-parallel-size", "cp", "c"),
    ("--expert-model-parallel-size", "ep", "e"),
    ("--expert-tensor-parallel-size", "etp", "the ffn part's t"),
)
REFUSED = {
    flag: (
        f"would change the parallel layout: set it with the backend string's {dim} "
        f"(e.g. actor.backend=megatron:d2t2p2)"
    )
    for flag, _, dim in PARALLEL_FLAGS
}


def parallel_args(alloc: "ModelAllocation") -> list[str]:
    """The five parallel-size flags, from the parsed backend string."""
    args: list[str] = []
    for flag, attr, _ in PARALLEL_FLAGS:
        args += [flag, str(getattr(alloc, attr))]
    return args


def engine_args(comp: "ComponentPlan", options: Options) -> list[str]:
    """Parallel flags plus <engine>.megatron.* as Megatron-LM flags."""
    args = parallel_args(comp.alloc)
    if options.sequence_parallel:
        args.append("--sequence-parallel")
    if options.use_distributed_optimizer:
        args.append("--use-distributed-optimizer")
    if options.recompute_granularity:
        args += ["--recompute-granularity", str(options.recompute_granularity)]
    if options.optimizer_cpu_offload:
        args += ["--optimizer-cpu-offload"]
    return args


def engine_env(device: str) -> dict[str, str]:
    """Megatron's tensor-parallel overlap needs one CUDA connection (it asserts otherwise)."""
    return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if device == "cuda" else {}


def train_options(options: Options, base: TrainOptions) -> TrainOptions:
    """<engine>.megatron.* as the estimator's inputs (Megatron's layout and offload)."""
    return dataclasses.replace(
        base,
        optimizer_cpu_offload=options.optimizer_cpu_offload,
        sequence_parallel=options.sequence_parallel,
        use_distributed_optimizer=options.use_distributed_optimizer,
        recompute=options.recompute_granularity,
    )
