"""Per-GPU memory of a training engine (fsdp, megatron, archon): reference/memory.md §3.

What we assume, per engine (bytes per parameter of weights / grads / optimizer):
- fsdp (AReaL's FSDPEngine, our recipe): weights, grads and both AdamW moments in the training
  dtype: bf16 2/2/4 = 8, float32 4/4/8 = 16; `adam_bf16` moments 2+2; sgd keeps no state. All
  of it sharded over the whole mesh d*c*t (FSDP2 full shard over d*c, tensor parallel
  dividing again). Set compute_dtype=bfloat16 with dtype=float32 for an fp32-master engine
  (verl: 16 B/param, bf16 compute).
- archon (AReaL's torch-native engine, torchtitan-style): FSDP2 like fsdp, with tensor,
  pipeline and expert parallel inside the mesh, so every state is sharded over the world.
- megatron: bf16 weights 2 + fp32 main grads 4 + fp32 master and Adam moments 12, the 12
  sharded over d*c by the distributed optimizer (`6 + 12/d`, Megatron-LM
  theoretical_memory_usage.py); float32 4/4/8; float16 2/2/16; `adam_bf16` (precision-aware
  optimizer) 4+2+2. Most loaded rank: `(block/p + embedding)/t` + replicated norms and router
  + routed experts `/(p*e*etp)` with their optimizer over edp.
Activations come from `max_tokens_per_mb` tokens per micro-batch (divided by c), stored per
layer unless gradient checkpointing / recompute keeps only each layer's input; logits at 6 B
per entry (bf16 logits + the fp32 log-softmax autograd keeps; AReaL computes log-probs in
1024-token chunks). Offload between phases (`Offload`) frees the GPU for a collocated rollout
engine but does not lower the train peak; only `optimizer_cpu_offload` / `params_cpu_offload`
(offload during compute) do.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Optional

from launcher.memory.model_shape import ModelShape, ParamCounts, dtype_bytes
from launcher.memory.parts import (
    CPU_TRAINER_RANK_OVERHEAD_GIB,
    GIB,
    TRAIN_OVERHEAD_GIB,
    EngineNeed,
    memory_model,
)
from launcher.spec.alloc import ModelAllocation
from launcher.spec.errors import ConfigError

# AReaL's examples set actor.mb_spec.max_tokens_per_mb to 10240 more than to any other value
# (65 of ~100 uses in examples/*.yaml); AReaL's own default (None) means one micro-batch
DEFAULT_MAX_TOKENS_PER_MB = 10240
MAX_TOKENS_LIMIT = 1 << 24  # 16M tokens in one micro-batch: larger is a typo
LOGIT_BYTES = 6  # per logit entry while training: bf16 logits + fp32 log-softmax kept
LOGPROB_CHUNK_TOKENS = 1024  # AReaL's gather_logprobs chunk: the fp32 copy of a forward pass
REDUCE_BYTES = 4  # grad_reduce_dtype float32 (AReaL's default): one unit's unsharded grads
OPTIMIZERS = ("adam", "adam_bf16", "sgd")
# how a trainer holds its model (a training backend's MEMORY_MODEL)
FSDP2 = "fsdp2"  # FSDP2 full shard over the whole mesh, gathered units (fsdp, archon)
MEGATRON = "megatron"  # Megatron-LM: t/p-split layers, distributed optimizer over d*c
RECOMPUTE = ("full", "selective", "none")


@dataclass(frozen=True)
class Offload:
    """What a trainer moves to host memory between the train and rollout phases (AReaL
    `enable_offload` / torch_memory_saver, verl `*_offload`): it frees the GPU for a collocated
    rollout engine, and comes back before the train phase, so the train peak is unchanged."""

    weight: bool = False
    optimizer: bool = False
    grad: bool = False

    @property
    def any(self) -> bool:
        return self.weight or self.optimizer or self.grad


@dataclass(frozen=True)
class TrainOptions:
    """One training engine's memory knobs (AReaL's names in the comments)."""

    dtype: str = "bfloat16"  # actor.dtype: weights (and FSDP's grads and moments)
    compute_dtype: Optional[str] = None  # None: dtype; bfloat16 with dtype float32: fp32 master
    optimizer: str = "adam"  # actor.optimizer.type: adam | adam_bf16 | sgd
    max_tokens_per_mb: int = DEFAULT_MAX_TOKENS_PER_MB  # actor.mb_spec.max_tokens_per_mb
    gradient_checkpointing: bool = False  # actor.gradient_checkpointing (AReaL's default)
    trainable: bool = True  # False: ref / teacher, forward only
    offload: Offload = field(default_factory=Offload)
    optimizer_cpu_offload: bool = False  # megatron --optimizer-cpu-offload: master+moments on host
    params_cpu_offload: bool = False  # FSDP2 CPUOffloadPolicy (actor.fsdp.offload_params)
    value_head: bool = False  # critic: a 1-wide value head instead of lm_head
    sequence_parallel: bool = False  # actor.megatron.sequence_parallel (fsdp/archon: with t > 1)
    use_distributed_optimizer: bool = True  # actor.megatron.use_distributed_optimizer
    recompute: Optional[str] = None  # actor.megatron.recompute_granularity; None: from above

    def __post_init__(self) -> None:
        dtype_bytes(self.dtype, "dtype")
        if self.compute_dtype is not None:
            dtype_bytes(self.compute_dtype, "compute_dtype")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"optimizer={self.optimizer!r}: choose {', '.join(OPTIMIZERS)}")
        tokens = self.max_tokens_per_mb
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 < tokens <= MAX_TOKENS_LIMIT:
            raise ConfigError(f"max_tokens_per_mb={tokens!r}: must be a whole number of tokens "
                              f"from 1 to {MAX_TOKENS_LIMIT}")
        if self.recompute is not None and self.recompute not in RECOMPUTE:
            raise ConfigError(f"recompute_granularity={self.recompute!r}: choose full, selective "
                              "or none")

    @property
    def recompute_mode(self) -> str:
        if self.recompute is not None:
            return self.recompute
        return "full" if self.gradient_checkpointing else "none"


def _megatron(backend: str) -> bool:
    return memory_model(backend, FSDP2) == MEGATRON


def state_bytes(backend: str, opts: TrainOptions) -> tuple[int, int, int]:
    """Bytes per parameter of (weights, grads, optimizer) before sharding, for this engine."""
    b = dtype_bytes(opts.dtype)
    if not opts.trainable:
        return dtype_bytes(opts.compute_dtype or opts.dtype), 0, 0
    if _megatron(backend):
        weight, grad = (4, 4) if b == 4 else (2, 2) if opts.dtype in ("float16", "fp16", "half") \
            else (2, 4)
        master = 0 if b == 4 else 4 + (4 if weight == 2 and grad == 2 else 0)
        moments = 0 if opts.optimizer == "sgd" else 4 if opts.optimizer == "adam_bf16" else 8
        return weight, grad, master + moments
    moments = {"adam": 2 * b, "adam_bf16": 4, "sgd": 0}[opts.optimizer]
    return b, b, moments


def param_counts(shape: ModelShape, opts: TrainOptions) -> ParamCounts:
    """The model's parameters as this engine builds it (a critic swaps lm_head for 1 x h)."""
    if opts.value_head:
        return dataclasses.replace(shape.params, output=shape.hidden_size)
    return shape.params


def _per_gpu_params(shape: ModelShape, alloc: ModelAllocation,
                    opts: TrainOptions) -> tuple[float, float]:
    """(non-expert params, routed-expert params) on the most loaded GPU of the engine."""
    p = param_counts(shape, opts)
    if not _megatron(alloc.backend):
        return (p.total - p.routed_experts) / alloc.world_size, p.routed_experts / alloc.world_size
    t, pp = alloc.tp, alloc.pp
    block = p.attention + p.dense_mlp + p.shared_experts
    embedding = p.embedding + (p.output if pp == 1 else 0)
    dense = (block / pp + embedding) / t + (p.norms + p.router) / pp
    return dense, p.routed_experts / (pp * alloc.ep * alloc.etp)


def model_state_bytes(shape: ModelShape, alloc: ModelAllocation, opts: TrainOptions,
                      per_param: Optional[tuple[int, int, int]] = None) -> dict[str, float]:
    """Weights, grads and optimizer states on the most loaded GPU (bytes), before offload.

    per_param: (weights, grads, optimizer) bytes per parameter instead of the engine's own,
    to compare the sharding with another estimator under its byte assumptions.
    """
    weight, grad, optim = per_param or state_bytes(alloc.backend, opts)
    dense, experts = _per_gpu_params(shape, alloc, opts)
    if _megatron(alloc.backend) and opts.use_distributed_optimizer:
        optimizer = dense * optim / (alloc.dp * alloc.cp) + experts * optim / alloc.edp
    else:
        optimizer = (dense + experts) * optim
    return {"weights": (dense + experts) * weight, "grads": (dense + experts) * grad,
            "optimizer": optimizer}


def _attention_dims(shape: ModelShape) -> int:
    """Activation elements per token of one attention block beyond its input: q, k, v, out."""
    if shape.is_mla:
        qk = shape.qk_nope_head_dim + shape.qk_rope_head_dim
        return (shape.num_heads * (2 * qk + 2 * shape.v_head_dim) + (shape.q_lora_rank or 0)
                + shape.kv_lora_rank + shape.qk_rope_head_dim)
    return 2 * shape.num_heads * shape.head_dim + 2 * shape.num_kv_heads * shape.head_dim


def layer_activation_bytes(shape: ModelShape, alloc: ModelAllocation, act: int,
                           sequence_parallel: bool) -> float:
    """Bytes per token that one decoder layer keeps for backward (flash attention: no scores).

    Norm inputs/outputs and residuals (4h; split by t only with sequence parallel), q/k/v and
    attention output, SwiGLU gate/up/activation/product (4f; MoE: top-k experts' worth, plus
    the router's fp32 logits and the dispatched tokens in and out).
    """
    t = alloc.tp
    h = shape.hidden_size
    hidden = 4 * h / (t if sequence_parallel else 1)
    attention = _attention_dims(shape) / t
    dense = 4 * shape.intermediate_size / t if shape.num_dense_layers else 0.0
    moe = 0.0
    if shape.is_moe:
        routed = 4 * shape.experts_per_token * shape.moe_intermediate_size / alloc.etp
        shared = 4 * (shape.num_shared_experts * shape.moe_intermediate_size
                      + shape.shared_expert_intermediate_size) / t
        dispatch = 2 * shape.experts_per_token * h
        moe = routed + shared + dispatch + shape.num_experts * 4 / act
    return act * (hidden + attention + max(dense, moe))


def _working_set(shape: ModelShape, alloc: ModelAllocation, opts: TrainOptions,
                 act: int) -> float:
    """FSDP2 / archon: gathered units. Two decoder layers (the current one and the prefetched
    next), the root unit (embeddings, final norm, lm_head) held through forward and backward,
    and one unit's unsharded gradient in the reduce dtype. Megatron keeps none."""
    if _megatron(alloc.backend):
        return 0.0
    p = param_counts(shape, opts)
    t = alloc.tp
    layer = float(shape.layer_params)
    if shape.is_moe and alloc.ep * alloc.etp > 1:
        layer = layer - shape.routed_per_moe_layer + shape.routed_per_moe_layer * t / (
            alloc.ep * alloc.etp)
    layer /= t
    root = (p.embedding + p.output if alloc.pp == 1 else max(p.embedding, p.output)) / t
    gathered = (2 * layer + root) * act
    if not opts.trainable:
        return gathered
    return gathered + max(layer, root) * REDUCE_BYTES


def activation_parts(shape: ModelShape, alloc: ModelAllocation,
                     opts: TrainOptions) -> dict[str, float]:
    """Activations and logits on the most loaded pipeline stage (bytes)."""
    act = dtype_bytes(opts.compute_dtype or opts.dtype)
    t, pp = alloc.tp, alloc.pp
    tokens = math.ceil(opts.max_tokens_per_mb / alloc.cp)
    sp = opts.sequence_parallel if _megatron(alloc.backend) else t > 1
    per_layer = tokens * layer_activation_bytes(shape, alloc, act, sp)
    vocab = (1 if opts.value_head else shape.vocab_size) / t
    if not opts.trainable:  # forward only: one layer at a time, bf16 logits + one fp32 chunk
        logits = tokens * vocab * act + min(tokens, LOGPROB_CHUNK_TOKENS) * vocab * 4
        return {"activations": per_layer, "logits": logits}
    layers = math.ceil(shape.num_layers / pp)
    mode = opts.recompute_mode
    if mode == "full":  # each layer's input, plus the layer being recomputed
        stored = layers * tokens * shape.hidden_size * act / (t if sp else 1)
        transient = per_layer
    else:  # "selective" recomputes core attention, which flash attention never stores
        stored, transient = layers * per_layer, 0.0
    logits = tokens * vocab * LOGIT_BYTES
    if pp == 1:
        return {"activations": stored + transient, "logits": logits}
    first = stored * pp + transient  # 1F1B: the first stage holds p micro-batches in flight
    last = stored + transient + logits
    if first >= last:
        return {"activations": stored * pp + transient, "logits": 0.0}
    return {"activations": stored + transient, "logits": logits}


def estimate_training(shape: ModelShape, alloc: ModelAllocation, opts: TrainOptions,
                      device: str = "cuda") -> EngineNeed:
    """Peak bytes per GPU of one training engine in the train phase, and what it keeps while
    the rollout phase runs."""
    states = model_state_bytes(shape, alloc, opts)
    if opts.params_cpu_offload:
        states = {k: 0.0 for k in states}
    elif opts.optimizer_cpu_offload:
        states["optimizer"] = 0.0
    act = dtype_bytes(opts.compute_dtype or opts.dtype)
    working = _working_set(shape, alloc, opts, act)
    acts = activation_parts(shape, alloc, opts)
    overhead = (CPU_TRAINER_RANK_OVERHEAD_GIB if device == "cpu" else TRAIN_OVERHEAD_GIB) * GIB
    parts = {**states, "gathered": working, **acts, "overhead": overhead}
    if not opts.trainable:
        del parts["grads"], parts["optimizer"]
    moved = {"weights": opts.offload.weight, "grads": opts.offload.grad,
             "optimizer": opts.offload.optimizer}
    released = {k: v for k, v in parts.items() if k in moved and not moved[k]}
    released["overhead"] = overhead
    return EngineNeed(phase="train", parts=parts, released=released)
