"""FSDP2 trainers: plain torchrun workers. The entry point builds its (dp, cp, tp) device mesh
from the plan it is handed (AREAL_LAUNCH_PLAN), so no parallel flags go on its command line."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from launcher.backends.protocol import Install
from launcher.memory.train import FSDP2, TrainOptions
from launcher.spec.registry import TRAIN

if TYPE_CHECKING:
    from launcher.spec.plan import ComponentPlan

NAME = "fsdp"
KIND = TRAIN
DIMS = "dtc"
HYBRID = False
EXAMPLE = "fsdp:d8"
ORDER = 0
REFUSED: dict[str, str] = {}
INSTALL = Install("torch", "pip install 'areal-launch[torch]'")
MEMORY_MODEL = FSDP2
MEMORY_KEYS = {"params_cpu_offload": "offload_params"}
MIXED_PRECISION = (None, "bf16", "bfloat16", "fp16", "float16")


@dataclass
class Options:
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


def engine_args(comp: "ComponentPlan", options: Options) -> list[str]:
    """Flags after the entry point: none (fsdp.* options are not command-line flags)."""
    return []


def engine_env(device: str) -> dict[str, str]:
    """Environment defaults for its workers."""
    return {}


def train_options(options: Options, base: TrainOptions) -> TrainOptions:
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
