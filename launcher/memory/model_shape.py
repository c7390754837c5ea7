"""The model's shape, read from its HF config.json: what every memory estimate starts from.

`shape_from_config` is pure (a dict in, a ModelShape out); `read_model_shape` is the one thin
reader (`<path>/config.json`, never a download) and returns None when there is no file, so the
caller can say "memory unknown" instead of failing. Parameter counts follow Megatron-LM's
accounting (reference/memory.md §2) plus what it leaves out (q/k/v biases, q/k norms, router,
MLA norms), so totals match the published counts. Families: Llama, Mistral, Qwen2/2.5/3,
Qwen2-MoE/Qwen3-MoE, Mixtral, DeepSeek-V2/V3 (MLA, shared experts, dense first layers).
Multi-token-prediction layers (`num_nextn_predict_layers`) are not counted: RL runs disable them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping, Optional

from launcher.spec.errors import ConfigError

# bytes per element of each dtype name that configs and users write
DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float8": 1,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
}
# bounds on config values: no published model comes near them; past them the file is wrong
LIMITS = {
    "hidden_size": 1 << 20,
    "num_hidden_layers": 10_000,
    "num_attention_heads": 1 << 14,
    "vocab_size": 1 << 27,
    "intermediate_size": 1 << 24,
    "experts": 1 << 16,
    "max_position_embeddings": 1 << 30,
}
QKV_BIAS_TYPES = ("qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl")  # bias on q, k, v always
QK_NORM_TYPES = ("qwen3", "qwen3_moe")  # RMSNorm over head_dim on q and k


class ModelShapeError(ConfigError):
    """config.json cannot be read as a model shape; the message names the file and the key."""


def dtype_bytes(name: str, what: str = "dtype") -> int:
    """Bytes per element of a dtype name (`bfloat16`, `torch.float32`, `fp8`)."""
    key = str(name).lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise ConfigError(
            f"{what}={name!r}: unknown dtype (use one of bfloat16, float16, float32, fp8)"
        )
    return DTYPE_BYTES[key]


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by the groups the estimators shard differently (Megatron's grouping)."""

    embedding: int  # input embedding, V*h
    output: int  # lm_head, V*h when untied, else 0
    attention: int  # all layers: projections, biases, q/k norms, MLA norms
    dense_mlp: int  # the MLPs of dense layers
    shared_experts: int  # MoE layers' shared experts (and their gate)
    routed_experts: int  # MoE layers' routed experts, all of them
    router: int  # MoE gates (and DeepSeek's correction bias)
    norms: int  # two per layer plus the final norm
    routed_active: int  # routed experts one token passes through (top-k of E)

    @property
    def total(self) -> int:
        return (
            self.embedding
            + self.output
            + self.attention
            + self.dense_mlp
            + self.shared_experts
            + self.routed_experts
            + self.router
            + self.norms
        )

    @property
    def active(self) -> int:
        """What one token uses: all but the routed experts it is not sent to."""
        return self.total - self.routed_experts + self.routed_active

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding - self.output

    def to_dict(self) -> dict:
        return {
            "total": self.total,
            "active": self.active,
            "embedding": self.embedding,
            "output": self.output,
            "attention": self.attention,
            "dense_mlp": self.dense_mlp,
            "shared_experts": self.shared_experts,
            "routed_experts": self.routed_experts,
            "router": self.router,
            "norms": self.norms,
        }


@dataclass(frozen=True)
class ModelShape:
    """What memory depends on in a decoder-only LM. Sizes are element counts, not bytes."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width (Mixtral: the expert width, every layer is MoE)
    vocab_size: int
    tie_embeddings: bool = False
    dtype: str = "bfloat16"  # torch_dtype of the checkpoint
    max_position_embeddings: int = 4096
    model_type: str = ""
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    quant_method: Optional[str] = None  # quantization_config.quant_method (fp8 halves weights)
    # MoE (num_experts 0: dense)
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0  # DeepSeek: shared experts of moe_intermediate_size each
    shared_expert_intermediate_size: int = 0  # Qwen2-MoE: one shared expert of this width
    shared_expert_gate: bool = False  # Qwen2-MoE gates its shared expert (h -> 1)
    router_bias: bool = False  # DeepSeek-V3 e_score_correction_bias
    num_moe_layers: int = 0  # the rest are dense
    # MLA (kv_lora_rank 0: ordinary multi-head / grouped-query attention)
    q_lora_rank: Optional[int] = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and self.num_moe_layers > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def weight_bytes(self) -> int:
        """Bytes per parameter of the checkpoint as served (fp8-quantized checkpoints: 1)."""
        if self.quant_method and "fp8" in self.quant_method.lower():
            return 1
        return dtype_bytes(self.dtype, "torch_dtype")

    # ------------------------------------------------------------------ per layer
    @cached_property
    def attention_per_layer(self) -> int:
        h, a = self.hidden_size, self.num_heads
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * a * qk
            else:
                q = h * a * qk
            kv = (
                h * (self.kv_lora_rank + self.qk_rope_head_dim)
                + self.kv_lora_rank
                + self.kv_lora_rank * a * (self.qk_nope_head_dim + self.v_head_dim)
            )
            return q + kv + a * self.v_head_dim * h
        k, d = self.num_kv_heads, self.head_dim
        params = 2 * h * a * d + 2 * h * k * d
        if self.qkv_bias:
            params += (a + 2 * k) * d
        if self.o_bias:
            params += h
        if self.qk_norm:
            params += 2 * d
        return params

    @property
    def dense_mlp_per_layer(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size  # SwiGLU: gate, up, down

    @property
    def expert_params(self) -> int:
        """One routed expert (SwiGLU of moe_intermediate_size)."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def shared_per_moe_layer(self) -> int:
        h = self.hidden_size
        params = self.num_shared_experts * self.expert_params
        params += 3 * h * self.shared_expert_intermediate_size
        return params + (h if self.shared_expert_gate else 0)

    @property
    def router_per_moe_layer(self) -> int:
        return self.num_experts * (self.hidden_size + (1 if self.router_bias else 0))

    @property
    def routed_per_moe_layer(self) -> int:
        return self.num_experts * self.expert_params

    @cached_property
    def layer_params(self) -> int:
        """The largest decoder layer (one FSDP unit): a MoE layer when there are any."""
        base = self.attention_per_layer + 2 * self.hidden_size
        dense = base + self.dense_mlp_per_layer if self.num_dense_layers else 0
        moe = (
            (
                base
                + self.routed_per_moe_layer
                + self.shared_per_moe_layer
                + self.router_per_moe_layer
            )
            if self.num_moe_layers
            else 0
        )
        return max(dense, moe)

    @cached_property
    def params(self) -> ParamCounts:
        h, vocab = self.hidden_size, self.vocab_size
        moe = self.num_moe_layers
        return ParamCounts(
            embedding=vocab * h,
            output=0 if self.tie_embeddings else vocab * h,
            attention=self.num_layers * self.attention_per_layer,
            dense_mlp=self.num_dense_layers * self.dense_mlp_per_layer,
            shared_experts=moe * self.shared_per_moe_layer,
            routed_experts=moe * self.routed_per_moe_layer,
            router=moe * self.router_per_moe_layer,
            norms=(2 * self.num_layers + 1) * h,
            routed_active=moe * self.experts_per_token * self.expert_params,
        )

    def to_dict(self) -> dict:
        out = {
            k: v
            for k, v in self.__dict__.items()
            if not k.startswith("_") and k not in ("attention_per_layer", "layer_params", "params")
        }
        out["params"] = self.params.to_dict()
        return out


# ---------------------------------------------------------------------- from config.json
def _int(
    cfg: Mapping[str, Any],
    key: str,
    where: str,
    default: Optional[int] = None,
    limit: Optional[int] = None,
) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise ModelShapeError(f"{where}: missing {key!r} (is this a decoder-only LM's config?)")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelShapeError(f"{where}: {key}={value!r} is not a non-negative integer")
    bound = limit or LIMITS.get(key)
    if bound is not None and value > bound:
        raise ModelShapeError(
            f"{where}: {key}={value} is larger than any model ({bound}); is the file corrupt?"
        )
    return value


def _moe_layers(cfg: Mapping[str, Any], layers: int, experts: int, where: str) -> int:
    """How many layers are MoE: DeepSeek first_k_dense_replace/moe_layer_freq, Qwen-MoE
    mlp_only_layers/decoder_sparse_step, else (Mixtral) all of them."""
    if not experts:
        return 0
    if "first_k_dense_replace" in cfg or "moe_layer_freq" in cfg:
        first = _int(cfg, "first_k_dense_replace", where, 0, layers)
        freq = max(1, _int(cfg, "moe_layer_freq", where, 1, layers))
        return sum(1 for i in range(layers) if i >= first and i % freq == 0)
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, (list, tuple)):
        raise ModelShapeError(f"{where}: mlp_only_layers={only!r} is not a list")
    step = max(1, _int(cfg, "decoder_sparse_step", where, 1, layers))
    dense = set(only)
    return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)


def shape_from_config(config: Mapping[str, Any], where: str = "config.json") -> ModelShape:
    """A HF config.json dict -> ModelShape. `where` names the file in error messages."""
    cfg: Mapping[str, Any] = config
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), Mapping):
        cfg = {**cfg, **cfg["text_config"]}  # multimodal configs nest the language model
    attention = _attention(cfg, where)
    model_type = str(cfg.get("model_type", ""))
    # DeepSeek: n_routed_experts; Mixtral: num_local_experts; Qwen-MoE: num_experts
    key = next(
        (
            k
            for k in ("n_routed_experts", "num_local_experts", "num_experts")
            if cfg.get(k) is not None
        ),
        "num_experts",
    )
    experts = _int(cfg, key, where, 0, LIMITS["experts"])
    intermediate = _int(cfg, "intermediate_size", where, 0)
    moe_width = _int(cfg, "moe_intermediate_size", where, 0, LIMITS["intermediate_size"])
    if experts and not moe_width:
        moe_width = intermediate  # Mixtral: intermediate_size is the expert width
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    dtype_bytes(dtype, f"{where}: torch_dtype")
    quant = cfg.get("quantization_config")
    bias = cfg.get("attention_bias")
    return ModelShape(
        **attention,
        intermediate_size=intermediate,
        vocab_size=_int(cfg, "vocab_size", where),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        dtype=dtype,
        max_position_embeddings=_int(cfg, "max_position_embeddings", where, 4096),
        model_type=model_type,
        qkv_bias=bool(bias) if bias is not None else model_type in QKV_BIAS_TYPES,
        o_bias=bool(bias),
        qk_norm=model_type in QK_NORM_TYPES,
        quant_method=str(quant.get("quant_method")) if isinstance(quant, Mapping) else None,
        **_experts(cfg, where, experts, moe_width, attention["num_layers"]),
        **_latent_attention(cfg, where),
    )


def _attention(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The transformer's width, depth and attention heads."""
    h = _int(cfg, "hidden_size", where)
    layers = _int(cfg, "num_hidden_layers", where)
    heads = _int(cfg, "num_attention_heads", where)
    if not (h and layers and heads):
        raise ModelShapeError(
            f"{where}: hidden_size, num_hidden_layers and num_attention_heads must be positive"
        )
    kv_heads = (
        _int(cfg, "num_key_value_heads", where, heads, LIMITS["num_attention_heads"]) or heads
    )
    head_dim = cfg.get("head_dim") or h // heads
    head_dim = _int({"head_dim": head_dim}, "head_dim", where, limit=LIMITS["hidden_size"])
    return dict(
        hidden_size=h, num_layers=layers, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim
    )


def _experts(
    cfg: Mapping[str, Any], where: str, experts: int, width: int, layers: int
) -> dict[str, Any]:
    """A mixture of experts' routed and shared experts (all zero for a dense model)."""
    router_bias = cfg.get("topk_method") == "noaux_tc"
    if not experts:
        return dict(router_bias=router_bias)
    return dict(
        num_experts=experts,
        experts_per_token=_int(cfg, "num_experts_per_tok", where, 0, LIMITS["experts"]),
        moe_intermediate_size=width,
        num_shared_experts=_int(cfg, "n_shared_experts", where, 0, LIMITS["experts"]),
        shared_expert_intermediate_size=_int(
            cfg, "shared_expert_intermediate_size", where, 0, LIMITS["intermediate_size"]
        ),
        shared_expert_gate=bool(cfg.get("shared_expert_intermediate_size")),
        router_bias=router_bias,
        num_moe_layers=_moe_layers(cfg, layers, experts, where),
    )


def _latent_attention(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Multi-head latent attention's ranks and head dims (DeepSeek; absent elsewhere)."""
    if cfg.get("kv_lora_rank") is None:
        return {}
    limit = LIMITS["hidden_size"]
    return dict(
        q_lora_rank=_int(cfg, "q_lora_rank", where, None, limit)
        if cfg.get("q_lora_rank") is not None
        else None,
        kv_lora_rank=_int(cfg, "kv_lora_rank", where, 0, limit),
        qk_nope_head_dim=_int(cfg, "qk_nope_head_dim", where, 0, limit),
        qk_rope_head_dim=_int(cfg, "qk_rope_head_dim", where, 0, limit),
        v_head_dim=_int(cfg, "v_head_dim", where, 0, limit),
    )


def read_model_shape(path: os.PathLike | str) -> Optional[ModelShape]:
    """`<path>/config.json` as a ModelShape; None when the file is not there (memory unknown).

    Local files only: a hub id that is not a folder here is simply unknown. A file that is
    there but is not a model config raises ModelShapeError naming the file.
    """
    file = Path(os.path.expanduser(str(path))) / "config.json"
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelShapeError(f"{file}: not readable as JSON ({e})") from None
    if not isinstance(data, Mapping):
        raise ModelShapeError(f"{file}: expected a JSON object")
    return shape_from_config(data, where=str(file))
