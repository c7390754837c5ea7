"""FSDP2 trainers: plain torchrun workers. The entry point builds its (dp, cp, tp) device mesh
from the plan it is handed (AREAL_LAUNCH_PLAN), so no parallel flags go on its command line."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from launcher.backends.kinds import TrainBackend
from launcher.memory.train import TrainOptions
from launcher.spec.backend_facts import BUILTIN_BACKENDS

if TYPE_CHECKING:
    from launcher.planning.resolve import Engine

MIXED_PRECISION = (None, "bf16", "bfloat16", "fp16", "float16")


@dataclass
class FsdpOptions:
    """<engine>.fsdp.*: read by the entry point from the plan (engine_options)."""

    reshard_after_forward: bool = True
    mixed_precision: Optional[str] = None  # bf16 | fp16: parameters in it, reductions in fp32
    offload_params: bool = False  # FSDP2 CPUOffloadPolicy: shards live on the host (cuda)

    def problem(self) -> Optional[str]:
        """What is wrong with these options (resolve prefixes the engine and backend)."""
        if self.mixed_precision not in MIXED_PRECISION:
            return (
                f"mixed_precision={self.mixed_precision}: choose bf16 or fp16 (or null: "
                "compute in the training dtype)"
            )
        return None


class FsdpBackend(TrainBackend[FsdpOptions]):
    """No flags after the entry and no environment of its own: the defaults."""

    facts = BUILTIN_BACKENDS["fsdp"]
    Options = FsdpOptions

    def memory_effects(self, engine: Engine, base: TrainOptions) -> TrainOptions:
        return fsdp_memory_effects(self.options_of(engine), base)


def fsdp_memory_effects(options: FsdpOptions, base: TrainOptions) -> TrainOptions:
    """<engine>.fsdp.* as the estimator's inputs: mixed precision computes (activations,
    logits, gathered layers) in its dtype and reduces gradients in fp32 while weights, grads
    and optimizer state stay in `dtype` (recipes/grpo/mesh.py mixed_precision_policy; without
    it FSDP2 reduces in the parameters' dtype); reshard_after_forward off keeps every
    gathered layer; CPUOffloadPolicy keeps the shards on the host."""
    mixed = options.mixed_precision
    return dataclasses.replace(
        base,
        params_cpu_offload=options.offload_params,
        compute_dtype=mixed or None,
        reduce_dtype="float32" if mixed else base.dtype,
        reshard_after_forward=options.reshard_after_forward,
    )
