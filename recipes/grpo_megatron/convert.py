"""HF Llama <-> Megatron-core GPTModel (local layer spec) weights, per tensor-parallel rank.

Megatron fuses and splits differently from HF: q/k/v are one `linear_qkv` whose rows run per
query group [q heads of the group, k, v] and whose groups are split over tp; gate/up are one
`linear_fc1` holding, on each tp rank, [that rank's gate rows, its up rows]; o/down split their
columns; the vocabulary is padded to a multiple of tp and split over it. Pipeline stages hold
the layers whose global numbers they were given. Pure tensor code: tested without a process
group (tests/test_megatron_convert.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

Tensors = dict[str, torch.Tensor]


@dataclass(frozen=True)
class LlamaShape:
    """The sizes the conversion needs, from the HF config, for a given tp."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    padded_vocab: int
    tied: bool

    @classmethod
    def from_hf(cls, config: Any, tp: int) -> "LlamaShape":
        heads, kv = config.num_attention_heads, config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        for what, value in (
            ("num_key_value_heads", kv),
            ("intermediate_size", config.intermediate_size),
        ):
            if value % tp:
                raise ValueError(
                    f"tp={tp} does not divide the model's {what} ({value}): "
                    "choose a t that divides it in actor.backend"
                )
        vocab = config.vocab_size
        return cls(
            config.hidden_size,
            heads,
            kv,
            head_dim,
            config.intermediate_size,
            vocab,
            -(-vocab // tp) * tp,
            bool(getattr(config, "tie_word_embeddings", False)),
        )


def _fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: LlamaShape) -> torch.Tensor:
    per = s.heads // s.kv_heads
    q = q.view(s.kv_heads, per * s.head_dim, -1)
    k = k.view(s.kv_heads, s.head_dim, -1)
    v = v.view(s.kv_heads, s.head_dim, -1)
    return torch.cat([q, k, v], dim=1).reshape(-1, q.shape[-1])


def _unfuse_qkv(fused: torch.Tensor, s: LlamaShape) -> tuple[torch.Tensor, ...]:
    per = s.heads // s.kv_heads
    groups = fused.view(s.kv_heads, (per + 2) * s.head_dim, -1)
    q, k, v = torch.split(groups, [per * s.head_dim, s.head_dim, s.head_dim], dim=1)
    return tuple(t.reshape(-1, fused.shape[-1]) for t in (q, k, v))


def _pad_vocab(weight: torch.Tensor, s: LlamaShape) -> torch.Tensor:
    pad = s.padded_vocab - weight.shape[0]
    return torch.cat([weight, weight.new_zeros(pad, weight.shape[1])]) if pad else weight


def to_megatron(
    hf: Tensors,
    s: LlamaShape,
    tp: int,
    tp_rank: int,
    layers: Sequence[int],
    first: bool,
    last: bool,
) -> Tensors:
    """This (tp rank, stage)'s GPTModel state: `layers` are the stage's global (0-based) layer
    numbers in local order; `first`/`last` say whether it holds the embedding / the head."""

    def part(t: torch.Tensor, dim: int) -> torch.Tensor:
        return t.chunk(tp, dim=dim)[tp_rank].clone()

    out: Tensors = {}
    if first:
        out["embedding.word_embeddings.weight"] = part(
            _pad_vocab(hf["model.embed_tokens.weight"], s), 0
        )
    for local, g in enumerate(layers):
        src, dst = f"model.layers.{g}.", f"decoder.layers.{local}."
        out[dst + "input_layernorm.weight"] = hf[src + "input_layernorm.weight"].clone()
        out[dst + "self_attention.linear_qkv.weight"] = part(
            _fuse_qkv(
                hf[src + "self_attn.q_proj.weight"],
                hf[src + "self_attn.k_proj.weight"],
                hf[src + "self_attn.v_proj.weight"],
                s,
            ),
            0,
        )
        out[dst + "self_attention.linear_proj.weight"] = part(
            hf[src + "self_attn.o_proj.weight"], 1
        )
        out[dst + "pre_mlp_layernorm.weight"] = hf[src + "post_attention_layernorm.weight"].clone()
        out[dst + "mlp.linear_fc1.weight"] = torch.cat(
            [part(hf[src + "mlp.gate_proj.weight"], 0), part(hf[src + "mlp.up_proj.weight"], 0)]
        )
        out[dst + "mlp.linear_fc2.weight"] = part(hf[src + "mlp.down_proj.weight"], 1)
    if last:
        out["decoder.final_layernorm.weight"] = hf["model.norm.weight"].clone()
        if not s.tied:
            out["output_layer.weight"] = part(_pad_vocab(hf["lm_head.weight"], s), 0)
    return out


def to_hf(
    shards: Sequence[Tensors], s: LlamaShape, layers: Sequence[int], first: bool, last: bool
) -> Tensors:
    """One stage's HF tensors, full, from its tp ranks' GPTModel states (tp rank order)."""

    def whole(name: str, dim: int) -> torch.Tensor:
        return torch.cat([sh[name] for sh in shards], dim=dim)

    out: Tensors = {}
    if first:
        out["model.embed_tokens.weight"] = whole("embedding.word_embeddings.weight", 0)[
            : s.vocab
        ].clone()
    for local, g in enumerate(layers):
        src, dst = f"decoder.layers.{local}.", f"model.layers.{g}."
        out[dst + "input_layernorm.weight"] = shards[0][src + "input_layernorm.weight"]
        q, k, v = _unfuse_qkv(whole(src + "self_attention.linear_qkv.weight", 0), s)
        out[dst + "self_attn.q_proj.weight"] = q
        out[dst + "self_attn.k_proj.weight"] = k
        out[dst + "self_attn.v_proj.weight"] = v
        out[dst + "self_attn.o_proj.weight"] = whole(src + "self_attention.linear_proj.weight", 1)
        out[dst + "post_attention_layernorm.weight"] = shards[0][src + "pre_mlp_layernorm.weight"]
        halves = [sh[src + "mlp.linear_fc1.weight"].chunk(2, dim=0) for sh in shards]
        out[dst + "mlp.gate_proj.weight"] = torch.cat([h[0] for h in halves])
        out[dst + "mlp.up_proj.weight"] = torch.cat([h[1] for h in halves])
        out[dst + "mlp.down_proj.weight"] = whole(src + "mlp.linear_fc2.weight", 1)
    if last:
        out["model.norm.weight"] = shards[0]["decoder.final_layernorm.weight"]
        if not s.tied:
            out["lm_head.weight"] = whole("output_layer.weight", 0)[: s.vocab].clone()
    return {k: v.contiguous() for k, v in out.items()}
