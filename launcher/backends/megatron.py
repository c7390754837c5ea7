"""Megatron trainers: torchrun workers told their parallel layout with Megatron-LM's own flags.

dp is not a flag: Megatron derives it (world / (tp*pp*cp)). The MoE hybrid form's expert
layout is `--expert-model-parallel-size` (e) and `--expert-tensor-parallel-size` (etp).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from launcher.backends.kinds import TrainBackend
from launcher.memory.train import TrainOptions
from launcher.spec.backend_facts import BUILTIN_BACKENDS

if TYPE_CHECKING:
    from launcher.planning.resolve import Engine
    from launcher.spec.alloc import ModelAllocation
    from launcher.spec.plan import ComponentPlan


@dataclass
class MegatronOptions:
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
PARALLEL_REFUSED = {
    flag: (
        f"would change the parallel layout: set it with the backend string's {dim} "
        f"(e.g. actor.backend=megatron:d2t2p2)"
    )
    for flag, _, dim in PARALLEL_FLAGS
}


def parallel_args(alloc: ModelAllocation) -> list[str]:
    """The five parallel-size flags, from the parsed backend string."""
    args: list[str] = []
    for flag, attr, _ in PARALLEL_FLAGS:
        args += [flag, str(getattr(alloc, attr))]
    return args


class MegatronBackend(TrainBackend[MegatronOptions]):
    """Parallel flags plus <engine>.megatron.* as Megatron-LM flags."""

    facts = BUILTIN_BACKENDS["megatron"]
    Options = MegatronOptions
    refused = PARALLEL_REFUSED

    def engine_args(self, comp: ComponentPlan, engine: Engine) -> list[str]:
        options = self.options_of(engine)
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

    def engine_env(self, device: str) -> dict[str, str]:
        """Megatron's tensor-parallel overlap needs one CUDA connection (it asserts otherwise)."""
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if device == "cuda" else {}

    def memory_effects(self, engine: Engine, base: TrainOptions) -> TrainOptions:
        """<engine>.megatron.* as the estimator's inputs (Megatron's layout and offload)."""
        options = self.options_of(engine)
        return dataclasses.replace(
            base,
            optimizer_cpu_offload=options.optimizer_cpu_offload,
            sequence_parallel=options.sequence_parallel,
            use_distributed_optimizer=options.use_distributed_optimizer,
            recompute=options.recompute_granularity,
        )
