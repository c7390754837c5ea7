"""Per-GPU memory of a training engine (fsdp, megatron, archon): reference/memory.md §3.

What we assume, per engine (bytes per parameter of weights / grads / optimizer):
- fsdp (FSDP2 as our recipe runs it): weights, grads and both AdamW moments in the training
  dtype: bf16 2/2/4 = 8, float32 4/4/8 = 16; `adam_bf16` moments 2+2; sgd keeps no state. All
  of it sharded over the whole mesh d*c*t (FSDP2 full shard over d*c, tensor parallel
  dividing again). `actor.fsdp.mixed_precision=bf16` with `actor.dtype=float32` is an
  fp32-master engine (verl, NeMo-RL, DeepSpeed bf16: 16 B/param, bf16 compute).
- archon (a torch-native engine, torchtitan-style): FSDP2 like fsdp, with tensor,
  pipeline and expert parallel inside the mesh, so every state is sharded over the world.
- megatron: bf16 weights 2 + fp32 main grads 4 + fp32 master and Adam moments 12, the 12
  sharded over d*c by the distributed optimizer (`6 + 12/d`, Megatron-LM
  theoretical_memory_usage.py); float32 4/4/8; float16 2/2/16; `adam_bf16` (precision-aware
  optimizer) 4+2+2. Most loaded rank: `(block/p + embedding)/t` + replicated norms and router
  + routed experts `/(p*e*etp)` with their optimizer over edp.
Activations come from `max_tokens_per_mb` tokens per micro-batch (divided by c), stored per
layer unless gradient checkpointing / recompute keeps only each layer's input, all in the
*compute* dtype (mixed precision: bf16 activations beside fp32 master weights); each term the
estimate adds is a function below with its own docstring, and a named part of the plan's
memory section (reference/memory.md §9 says where the old, larger terms came from). Offload
between phases (`Offload`) frees the GPU for a collocated rollout engine but does not lower
the train peak; only `optimizer_cpu_offload` / `params_cpu_offload` (offload during compute) do.
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
from launcher.spec.backend_facts import MEGATRON
from launcher.spec.errors import ConfigError
from launcher.spec.offload import Offload

# the micro-batch size (tokens) the peers' example configurations set most often
# source of the number, named so: AReaL's examples/*.yaml set 10240 in 65 of ~100 uses
DEFAULT_MAX_TOKENS_PER_MB = 10240
MAX_TOKENS_LIMIT = 1 << 24  # 16M tokens in one micro-batch: larger is a typo
FP32_BYTES = 4  # the fp32 log-softmax / exp-logits a cross-entropy keeps for backward
# a forward-only engine gathers its fp32 log-probs in chunks of this many tokens
LOGPROB_CHUNK_TOKENS = 1024  # source of the number, named so: AReaL's gather_logprobs chunk
REDUCE_DTYPE = "float32"  # gradients reduce in fp32: our recipe's mixed precision
OPTIMIZERS = ("adam", "adam_bf16", "sgd")
RECOMPUTE = ("full", "selective", "none")


@dataclass(frozen=True)
class TrainOptions:
    """One training engine's memory knobs (the config keys that set them in the comments)."""

    dtype: str = "bfloat16"  # actor.dtype: weights (and FSDP's grads and moments)
    # actor.fsdp.mixed_precision: the dtype of activations, logits and gathered layers;
    # None: dtype (bfloat16 with dtype float32 is verl's fp32-master default)
    compute_dtype: Optional[str] = None
    reduce_dtype: Optional[str] = None  # FSDP2 reduce-scatter dtype; None: REDUCE_DTYPE
    reshard_after_forward: bool = True  # actor.fsdp.reshard_after_forward: False keeps layers
    optimizer: str = "adam"  # actor.optimizer.type: adam | adam_bf16 | sgd
    max_tokens_per_mb: int = DEFAULT_MAX_TOKENS_PER_MB  # actor.mb_spec.max_tokens_per_mb
    gradient_checkpointing: bool = False  # actor.gradient_checkpointing (off unless set)
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
        for name in ("compute_dtype", "reduce_dtype"):
            if getattr(self, name) is not None:
                dtype_bytes(getattr(self, name), name)
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"optimizer={self.optimizer!r}: choose {', '.join(OPTIMIZERS)}")
        tokens = self.max_tokens_per_mb
        if (
            isinstance(tokens, bool)
            or not isinstance(tokens, int)
            or not 0 < tokens <= MAX_TOKENS_LIMIT
        ):
            raise ConfigError(
                f"max_tokens_per_mb={tokens!r}: must be a whole number of tokens "
                f"from 1 to {MAX_TOKENS_LIMIT}"
            )
        if self.recompute is not None and self.recompute not in RECOMPUTE:
            raise ConfigError(
                f"recompute_granularity={self.recompute!r}: choose full, selective or none"
            )

    @property
    def recompute_mode(self) -> str:
        if self.recompute is not None:
            return self.recompute
        return "full" if self.gradient_checkpointing else "none"

    @property
    def compute_bytes(self) -> int:
        """Bytes of an activation, a logit and a gathered weight: the compute dtype (mixed
        precision), not the storage dtype of weights, grads and optimizer state."""
        return dtype_bytes(self.compute_dtype or self.dtype)

    @property
    def reduce_bytes(self) -> int:
        """Bytes per element of an unsharded gradient on its way to reduce-scatter."""
        return dtype_bytes(self.reduce_dtype or REDUCE_DTYPE)


def _megatron(backend: str) -> bool:
    return memory_model(backend) == MEGATRON


def state_bytes(backend: str, opts: TrainOptions) -> tuple[int, int, int]:
    """Bytes per parameter of (weights, grads, optimizer) before sharding, for this engine."""
    b = dtype_bytes(opts.dtype)
    if not opts.trainable:
        return dtype_bytes(opts.compute_dtype or opts.dtype), 0, 0
    if _megatron(backend):
        weight, grad = (
            (4, 4) if b == 4 else (2, 2) if opts.dtype in ("float16", "fp16", "half") else (2, 4)
        )
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


def _per_gpu_params(
    shape: ModelShape, alloc: ModelAllocation, opts: TrainOptions
) -> tuple[float, float]:
    """(non-expert params, routed-expert params) on the most loaded GPU of the engine."""
    p = param_counts(shape, opts)
    if not _megatron(alloc.backend):
        return (p.total - p.routed_experts) / alloc.world_size, p.routed_experts / alloc.world_size
    t, pp = alloc.tp, alloc.pp
    block = p.attention + p.dense_mlp + p.shared_experts
    embedding = p.embedding + (p.output if pp == 1 else 0)
    dense = (block / pp + embedding) / t + (p.norms + p.router) / pp
    return dense, p.routed_experts / (pp * alloc.ep * alloc.etp)


def model_state_bytes(
    shape: ModelShape,
    alloc: ModelAllocation,
    opts: TrainOptions,
    per_param: Optional[tuple[int, int, int]] = None,
) -> dict[str, float]:
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
    return {
        "weights": (dense + experts) * weight,
        "grads": (dense + experts) * grad,
        "optimizer": optimizer,
    }


def _attention_dims(shape: ModelShape) -> int:
    """Activation elements per token of one attention block beyond its input: q, k, v, out."""
    if shape.is_mla:
        qk = shape.qk_nope_head_dim + shape.qk_rope_head_dim
        return (
            shape.num_heads * (2 * qk + 2 * shape.v_head_dim)
            + (shape.q_lora_rank or 0)
            + shape.kv_lora_rank
            + shape.qk_rope_head_dim
        )
    return 2 * shape.num_heads * shape.head_dim + 2 * shape.num_kv_heads * shape.head_dim


def swiglu_width(backend: str) -> int:
    """Elements per token and intermediate channel a SwiGLU MLP keeps for backward.

    Megatron's fused bias-SwiGLU keeps its fused gate/up output (2f) and its product (f, the
    input of the down projection): 3f. Unfused (HF models under FSDP2) also keep the
    activation of the gate: 4f."""
    return 3 if _megatron(backend) else 4


def sequence_parallel(alloc: ModelAllocation, opts: TrainOptions) -> bool:
    """Whether the tokens outside attention and MLP are split over the t ranks.

    Megatron: its `sequence_parallel` option (RL trainers commonly turn it on with t > 1).
    FSDP2 engines (torchtitan-style tensor-parallel plans) shard norms and residuals along
    the sequence whenever t > 1."""
    if alloc.tp == 1:
        return False
    return opts.sequence_parallel if _megatron(alloc.backend) else True


def norm_bytes(backend: str, act: int) -> int:
    """Bytes per hidden channel and token the two RMSNorms of a layer keep for backward.

    Megatron's fused norms keep their input and output: 2 x 2 x act. An HF model's eager
    RMSNorm (FSDP2 engines, our recipe's among them) upcasts its input to fp32 and keeps that
    copy, the normalized value in the compute dtype and the scaled output the projections read:
    2 x (4 + 2 x act) (16 under bf16, 24 under fp32)."""
    return 4 * act if _megatron(backend) else 2 * (FP32_BYTES + 2 * act)


def layer_activation_bytes(
    shape: ModelShape, alloc: ModelAllocation, act: int, sequence_parallel: bool, swiglu: int = 4
) -> float:
    """Bytes per token that one decoder layer keeps for backward (flash attention: no scores).

    The two norms' inputs and outputs (norm_bytes per channel; split by t only with sequence
    parallel), q/k/v and
    attention output (split by t), the SwiGLU's `swiglu` x f (see swiglu_width; split by t),
    and for MoE the top-k experts' SwiGLU (split by etp), the dispatched tokens in and out
    (2kh) and the router's fp32 logits; with sequence parallel each tp rank routes only its
    T/t tokens, so the routed, dispatch and router terms are split by t too
    (reference/memory.md §9).
    """
    t = alloc.tp
    h = shape.hidden_size
    split = t if sequence_parallel else 1
    hidden = norm_bytes(alloc.backend, act) * h / split / act
    attention = _attention_dims(shape) / t
    dense = swiglu * shape.intermediate_size / t if shape.num_dense_layers else 0.0
    moe = 0.0
    if shape.is_moe:
        routed = swiglu * shape.experts_per_token * shape.moe_intermediate_size / alloc.etp
        shared = (
            swiglu
            * (
                shape.num_shared_experts * shape.moe_intermediate_size
                + shape.shared_expert_intermediate_size
            )
            / t
        )
        dispatch = 2 * shape.experts_per_token * h
        router = shape.num_experts * FP32_BYTES / act
        moe = (routed + dispatch + router) / split + shared
    return act * (hidden + attention + max(dense, moe))


def logit_bytes(act: int) -> int:
    """Bytes per logit entry (token x vocab / t) a training step holds at the loss: the
    compute-dtype logits and the fp32 copy the log-softmax works on and keeps for backward,
    alive together (6 under bf16). Both our recipes do this: the FSDP2 one casts the logits
    and takes log_softmax (recipes/grpo/weights.py token_logprobs), the Megatron one casts
    them before megatron-core's vocab-parallel cross-entropy, which also upcasts
    (recipes/grpo_megatron/step.py). An engine with a fused or in-place cross-entropy that
    never makes the fp32 copy (verl's flash-attn path) needs only `act`."""
    return act + FP32_BYTES


def _gathered_layer_params(shape: ModelShape, alloc: ModelAllocation) -> float:
    """Parameters of one all-gathered decoder layer on a GPU (t-split; experts over e*etp)."""
    t = alloc.tp
    layer = float(shape.layer_params)
    if shape.is_moe and alloc.ep * alloc.etp > 1:
        layer = (
            layer
            - shape.routed_per_moe_layer
            + shape.routed_per_moe_layer * t / (alloc.ep * alloc.etp)
        )
    return layer / t


def _root_params(shape: ModelShape, alloc: ModelAllocation, opts: TrainOptions) -> float:
    """The root unit (embeddings, final norm, lm_head) on a GPU: both ends unless pipelined."""
    p = param_counts(shape, opts)
    return (p.embedding + p.output if alloc.pp == 1 else max(p.embedding, p.output)) / alloc.tp


def gathered_bytes(shape: ModelShape, alloc: ModelAllocation, opts: TrainOptions) -> float:
    """FSDP2 / archon: the all-gathered copies in the compute dtype: the current decoder layer
    and the prefetched next one (every layer with reshard_after_forward off), and the root
    unit held through forward and backward. Megatron gathers nothing."""
    if _megatron(alloc.backend):
        return 0.0
    layer = _gathered_layer_params(shape, alloc)
    layers = 2 if opts.reshard_after_forward else math.ceil(shape.num_layers / alloc.pp)
    return (layers * layer + _root_params(shape, alloc, opts)) * opts.compute_bytes


def grad_reduce_bytes(
    shape: ModelShape, alloc: ModelAllocation, opts: TrainOptions, activations: float
) -> float:
    """FSDP2 / archon: unsharded gradients on their way to reduce-scatter, above the
    activations. During backward one layer's gradient is copied to the reduce dtype; the root
    unit's gradient (compute dtype) and its reduce copy appear at the end of backward, when
    the activations (`activations`: stored, recomputed and logits) are gone. The peak is the
    larger of the two moments: max(activations + layer copy, root x (act + reduce)), so this
    term is what it adds to the activations."""
    if _megatron(alloc.backend) or not opts.trainable:
        return 0.0
    layer = _gathered_layer_params(shape, alloc) * opts.reduce_bytes
    root = _root_params(shape, alloc, opts) * (opts.compute_bytes + opts.reduce_bytes)
    return max(layer, root - activations)


def activation_parts(
    shape: ModelShape, alloc: ModelAllocation, opts: TrainOptions
) -> dict[str, float]:
    """What a step holds beyond the model states, on the most loaded pipeline stage (bytes).

    activations: what the forward stores for backward (every layer's activations, or with
    full recompute each layer's input). Then two moments that do not overlap in time:
    logits (see logit_bytes) exist at the loss, before backward reaches the decoder layers;
    later, backward through a layer holds that layer's activations (recomputed, with full
    recompute) and a gradient for each of them, while the logits are gone. The peak is the
    larger moment: logits, and layer_backward is what the layer moment adds beyond them
    (0 when the logits are larger). Measured on CPU: benchmarks/measure_fsdp_memory.py."""
    act = opts.compute_bytes
    t, pp = alloc.tp, alloc.pp
    tokens = math.ceil(opts.max_tokens_per_mb / alloc.cp)
    sp = sequence_parallel(alloc, opts)
    per_layer = tokens * layer_activation_bytes(shape, alloc, act, sp, swiglu_width(alloc.backend))
    vocab = (1 if opts.value_head else shape.vocab_size) / t
    if not opts.trainable:  # forward only: one layer at a time, logits + one fp32 chunk
        logits = tokens * vocab * act + min(tokens, LOGPROB_CHUNK_TOKENS) * vocab * FP32_BYTES
        return {"activations": per_layer, "logits": logits}
    layers = math.ceil(shape.num_layers / pp)
    if opts.recompute_mode == "full":  # each layer's input; the layer is recomputed in backward
        stored = layers * tokens * shape.hidden_size * act / (t if sp else 1)
        layer_moment = 2 * per_layer
    else:  # "selective" recomputes core attention, which flash attention never stores
        stored, layer_moment = layers * per_layer, per_layer
    logits = tokens * vocab * logit_bytes(act)
    if pp > 1 and stored * pp >= stored + logits:  # 1F1B: p micro-batches on the first stage
        stored, logits = stored * pp, 0.0
    return {
        "activations": stored,
        "logits": logits,
        "layer_backward": max(0.0, layer_moment - logits),
    }


def estimate_training(
    shape: ModelShape, alloc: ModelAllocation, opts: TrainOptions, device: str = "cuda"
) -> EngineNeed:
    """Peak bytes per GPU of one training engine in the train phase, and what it keeps while
    the rollout phase runs."""
    states = model_state_bytes(shape, alloc, opts)
    if opts.params_cpu_offload:
        states = {k: 0.0 for k in states}
    elif opts.optimizer_cpu_offload:
        states["optimizer"] = 0.0
    acts = activation_parts(shape, alloc, opts)
    reduce = grad_reduce_bytes(shape, alloc, opts, sum(acts.values()))
    overhead = (CPU_TRAINER_RANK_OVERHEAD_GIB if device == "cpu" else TRAIN_OVERHEAD_GIB) * GIB
    parts = {
        **states,
        "gathered": gathered_bytes(shape, alloc, opts),
        **acts,
        "grad_reduce": reduce,
        "overhead": overhead,
    }
    if not opts.trainable:
        del parts["grads"], parts["optimizer"], parts["grad_reduce"]
    moved = {
        "weights": opts.offload.weight,
        "grads": opts.offload.grad,
        "optimizer": opts.offload.optimizer,
    }
    released = {k: v for k, v in parts.items() if k in moved and not moved[k]}
    released["overhead"] = overhead
    return EngineNeed(phase="train", parts=parts, released=released, device=device)
