"""Per-GPU memory of an inference engine (sglang, vllm): reference/memory.md §4.

- Weights per GPU: everything but the norms split over t*p (routed experts too: SGLang and
  vLLM shard experts over the instance's tp, or spread them over ep = tp, the same bytes per
  GPU), embeddings on the first and lm_head on the last pipeline stage.
- KV cache per token per GPU: `2 * layers/p * max(1, k // t) * head_dim * bytes`; MLA keeps one
  latent `(kv_lora_rank + qk_rope_head_dim) * layers/p * bytes` on every tp rank.
- SGLang claims `mem_fraction_static` of the memory free when it starts (B) for weights + KV
  pool; we take B = card - its own context (the launcher starts servers and trainers together,
  so nothing else may hold memory yet: the largest SGLang, the worst case for its neighbours).
  Default fraction: SGLang's auto rule (sglang_auto_mem_fraction). Activations and CUDA graphs
  live outside the fraction.
- vLLM claims `gpu_memory_utilization` of the whole card (default 0.9) for everything but its
  context; its KV cache is what is left after weights, activations and graphs.
- A KV cache that cannot hold one full context (context_length, else the model's
  max_position_embeddings) is a failure, like a static budget smaller than the weights.
- On cpu (vLLM's CPU build): weights + VLLM_CPU_KVCACHE_SPACE + the measured server overhead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from launcher.memory.model_shape import ModelShape, dtype_bytes
from launcher.memory.parts import (
    CPU_VLLM_SERVER_OVERHEAD_GIB,
    CPU_VLLM_TP_WORKER_GIB,
    GIB,
    INFER_GRAPHS_GIB,
    INFER_OVERHEAD_GIB,
    EngineNeed,
    memory_model,
)
from launcher.spec.alloc import ModelAllocation
from launcher.spec.backend_facts import STATIC_BUDGET
from launcher.spec.errors import ConfigError

VLLM_DEFAULT_UTILIZATION = 0.9  # vLLM's gpu_memory_utilization default
VLLM_DEFAULT_BATCHED_TOKENS = 8192  # vLLM V1 max_num_batched_tokens for serving on big GPUs
DEFAULT_CPU_KVCACHE_GIB = 1.0  # as launcher/backends/vllm.py VllmOptions.cpu_kvcache_space_gb
MAX_CONTEXT = 1 << 24
# what a server's memory share holds, so that it sizes its KV cache to fill the rest: SGLang's
# mem_fraction_static weights and KV cache; vLLM's gpu_memory_utilization its activations and
# CUDA graphs too (it profiles them before sizing the cache)
SGLANG_BUDGET = ("weights", "kv_cache")
VLLM_BUDGET = ("weights", "kv_cache", "activations", "cuda_graphs")


@dataclass(frozen=True)
class InferenceOptions:
    """One rollout engine's memory knobs."""

    mem_fraction: Optional[float] = None  # sglang mem_fraction_static / vllm gpu_memory_utilization
    context_length: Optional[int] = None  # sglang context_length / vllm max_model_len
    dtype: Optional[str] = None  # None: the checkpoint's (an fp8-quantized one serves 1 B/param)
    kv_cache_dtype: str = "auto"  # auto: the model dtype; fp8: 1 byte
    chunked_prefill_size: Optional[int] = None  # sglang; vllm max_num_batched_tokens
    release: bool = (
        False  # rollout.offload: memory saver / sleep frees weights and KV between phases
    )
    cpu_kvcache_space_gib: float = DEFAULT_CPU_KVCACHE_GIB  # vLLM CPU: VLLM_CPU_KVCACHE_SPACE

    def __post_init__(self) -> None:
        f = self.mem_fraction
        if f is not None and (
            isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f < 1
        ):
            raise ConfigError(f"memory fraction {f!r}: must be between 0 and 1 (e.g. 0.8)")
        for name in ("context_length", "chunked_prefill_size"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 < value <= MAX_CONTEXT
            ):
                raise ConfigError(
                    f"{name}={value!r}: must be a whole number of tokens from 1 to {MAX_CONTEXT}"
                )
        if self.dtype is not None:
            dtype_bytes(self.dtype, "dtype")
        if self.kv_cache_dtype != "auto":
            dtype_bytes(self.kv_cache_dtype, "kv_cache_dtype")
        space = self.cpu_kvcache_space_gib
        if (
            isinstance(space, bool)
            or not isinstance(space, (int, float))
            or not 0 < space <= 1 << 16
        ):
            raise ConfigError(f"cpu_kvcache_space_gb={space!r}: must be a positive number of GiB")
        object.__setattr__(self, "cpu_kvcache_space_gib", float(space))  # GiB, whole or not


def _sglang_defaults(capacity_mb: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode cuda-graph max batch) SGLang picks for a card this size."""
    if capacity_mb < 20 * 1024:
        return 2048, 8
    if capacity_mb < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if capacity_mb < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if capacity_mb < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def _prefill_graph_sizes(max_tokens: int) -> int:
    """How many prefill graphs SGLang captures up to max_tokens
    (generate_prefill_cuda_graph_batch_sizes)."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_tokens + 1, 512))
    )
    return sum(1 for s in sizes if s <= max_tokens)


def sglang_auto_mem_fraction(
    capacity_gib: float,
    tp: int = 1,
    pp: int = 1,
    chunked_prefill: Optional[int] = None,
    mla: bool = False,
) -> float:
    """SGLang's default mem_fraction_static for a card of this size (SGLang 0.5.x,
    srt/arg_groups/memory_hook.py handle_gpu_memory_settings, without post-capture sizing):
    reserved MB = 512 + 1.5*max(chunked_prefill, 2048) + 1024*tp*pp/8 + graphs, at least
    10 GiB on cards over 60 GB; fraction = (capacity - reserved) / capacity."""
    mb = capacity_gib * 1024
    default_chunk, max_bs = _sglang_defaults(mb, tp)
    chunk = chunked_prefill or default_chunk
    graphs = 2 * max_bs + (
        1.5 * 1024 if mla else 8 * _prefill_graph_sizes(min(chunk, 8192) if mla else chunk)
    )
    reserved = 512 + 1.5 * max(chunk, 2048) + tp * pp / 8 * 1024 + graphs
    if mb > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mb - reserved) / mb, 3)


def inference_weight_bytes(
    shape: ModelShape, alloc: ModelAllocation, dtype: Optional[str] = None
) -> float:
    """Weights on the most loaded GPU of one instance."""
    p = shape.params
    per = dtype_bytes(dtype) if dtype else shape.weight_bytes
    t, pp = alloc.tp, alloc.pp
    body = p.total - p.norms - p.embedding - p.output
    ends = p.embedding + p.output if pp == 1 else max(p.embedding, p.output)
    return (body / (t * pp) + ends / t + p.norms / pp) * per


def kv_bytes_per_token(shape: ModelShape, alloc: ModelAllocation, kv_bytes: int) -> float:
    """KV cache bytes per token on each GPU of an instance (its pipeline stage's layers)."""
    layers = math.ceil(shape.num_layers / alloc.pp)
    if shape.is_mla:
        return (shape.kv_lora_rank + shape.qk_rope_head_dim) * layers * kv_bytes
    heads = max(1, shape.num_kv_heads // alloc.tp)  # replicated when tp > kv heads
    return 2 * layers * heads * shape.head_dim * kv_bytes


def _activation_bytes(shape: ModelShape, alloc: ModelAllocation, tokens: int, act: int) -> float:
    """Peak of one prefill chunk through one layer (the forward frees each layer's activations)."""
    t = alloc.tp
    width = (
        shape.experts_per_token * shape.moe_intermediate_size
        if shape.is_moe
        else shape.intermediate_size
    )
    per_token = (
        4 * shape.hidden_size
        + (2 * shape.num_heads + 2 * shape.num_kv_heads) * shape.head_dim / t
        + 3 * width / t
    )
    return tokens * per_token * act


def _kv_bytes(shape: ModelShape, opts: InferenceOptions) -> int:
    if opts.kv_cache_dtype != "auto":
        return dtype_bytes(opts.kv_cache_dtype)
    return dtype_bytes(opts.dtype or ("bfloat16" if shape.weight_bytes == 1 else shape.dtype))


def estimate_inference(
    shape: ModelShape,
    alloc: ModelAllocation,
    opts: InferenceOptions,
    capacity_gib: Optional[float],
    device: str = "cuda",
) -> EngineNeed:
    """Bytes per GPU of one rollout engine while it serves, and after it releases its memory.

    capacity_gib None (unknown card): the engine's fraction cannot be resolved, so the KV part
    is the minimum it needs (one full context) and kv_tokens stays None.
    """
    weights = inference_weight_bytes(shape, alloc, opts.dtype)
    kv_token = kv_bytes_per_token(shape, alloc, _kv_bytes(shape, opts))
    context = opts.context_length or shape.max_position_embeddings
    act = dtype_bytes(opts.dtype or ("bfloat16" if shape.weight_bytes == 1 else shape.dtype))
    if device == "cpu":
        return _cpu_server(alloc, opts, weights, kv_token, context)
    static_budget = memory_model(alloc.backend) == STATIC_BUDGET
    fraction, chunk = _fraction_and_chunk(shape, alloc, opts, capacity_gib, static_budget)
    runtime = _activation_bytes(shape, alloc, chunk, act)
    graphs = INFER_GRAPHS_GIB * GIB
    overhead = INFER_OVERHEAD_GIB * GIB
    if capacity_gib is None or fraction is None:
        kv, tokens, static = kv_token * context, None, weights + kv_token * context
    else:
        card = capacity_gib * GIB
        # SGLang's fraction is of what is free at its start; vLLM's of the card, activations
        # and graphs included
        static = (
            fraction * (card - overhead) if static_budget else fraction * card - runtime - graphs
        )
        kv = static - weights
        tokens = max(0, int(kv // kv_token))
    notes = () if tokens is None else _notes(alloc, weights, static, tokens, context, fraction)
    parts = {
        "weights": weights,
        "kv_cache": max(kv, 0.0),
        "activations": runtime,
        "cuda_graphs": graphs,
        "overhead": overhead,
    }
    released = {"cuda_graphs": graphs, "overhead": overhead} if opts.release else dict(parts)
    return EngineNeed(
        phase="rollout",
        parts=parts,
        released=released,
        kv_tokens=tokens,
        kv_bytes_per_token=kv_token,
        context_tokens=context,
        mem_fraction=fraction,
        notes=notes,
        budget=() if tokens is None else SGLANG_BUDGET if static_budget else VLLM_BUDGET,
    )


def _notes(
    alloc: ModelAllocation,
    weights: float,
    static: float,
    tokens: int,
    context: int,
    fraction: Optional[float],
) -> tuple[str, ...]:
    """What does not fit inside the server itself: weights over its budget (then no KV cache
    is left), or a KV cache short of one full context."""
    if static <= weights:
        return (
            f"weights {weights / GIB:.1f} GiB per GPU exceed the {_budget(alloc)} of "
            f"{static / GIB:.1f} GiB (fraction {fraction})",
        )
    if tokens < context:
        return (f"KV cache holds {tokens} tokens, less than one context of {context}",)
    return ()


def _fraction_and_chunk(
    shape: ModelShape,
    alloc: ModelAllocation,
    opts: InferenceOptions,
    capacity_gib: Optional[float],
    static_budget: bool,
) -> tuple[Optional[float], int]:
    """The memory fraction the server runs with (SGLang's auto value when unset and the card
    is known; None when it cannot be known) and its prefill chunk in tokens."""
    if static_budget:
        fraction = opts.mem_fraction
        if fraction is None and capacity_gib is not None:
            fraction = sglang_auto_mem_fraction(
                capacity_gib, alloc.tp, alloc.pp, opts.chunked_prefill_size, shape.is_mla
            )
        default_chunk = _sglang_defaults((capacity_gib or 80) * 1024, alloc.tp)[0]
        return fraction, opts.chunked_prefill_size or default_chunk
    fraction = opts.mem_fraction or VLLM_DEFAULT_UTILIZATION
    return fraction, opts.chunked_prefill_size or VLLM_DEFAULT_BATCHED_TOKENS


def _budget(alloc: ModelAllocation) -> str:
    static = memory_model(alloc.backend) == STATIC_BUDGET
    return "static budget" if static else "memory budget"


def _cpu_server(
    alloc: ModelAllocation, opts: InferenceOptions, weights: float, kv_token: float, context: int
) -> EngineNeed:
    """vLLM's CPU build: weights, its KV space (VLLM_CPU_KVCACHE_SPACE, taken by each worker),
    and the measured process overhead spread over the instance's t*p slots (the host check
    adds the slots back up)."""
    slots = alloc.tp * alloc.pp
    space = opts.cpu_kvcache_space_gib * GIB
    overhead = (CPU_VLLM_SERVER_OVERHEAD_GIB + (slots - 1) * CPU_VLLM_TP_WORKER_GIB) * GIB / slots
    tokens = int(space // kv_token) if kv_token else 0
    notes = (
        ()
        if tokens >= context
        else (
            f"KV space of {opts.cpu_kvcache_space_gib} GiB holds {tokens} tokens, less than one "
            f"context of {context}",
        )
    )
    parts = {"weights": weights, "kv_cache": space, "overhead": overhead}
    return EngineNeed(
        phase="rollout",
        parts=parts,
        released=dict(parts),
        kv_tokens=tokens,
        kv_bytes_per_token=kv_token,
        context_tokens=context,
        notes=notes,
        device="cpu",
    )
