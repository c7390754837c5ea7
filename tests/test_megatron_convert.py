"""recipes/grpo_megatron/convert.py: HF Llama <-> Megatron GPTModel weights, per tp rank and
pipeline stage. Plain tensors, no process group: the layout Megatron expects, and a round trip
that gives back every HF tensor exactly."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from recipes.grpo_megatron.convert import LlamaShape, to_hf, to_megatron  # noqa: E402

# GQA: 4 query heads in 2 groups, head_dim 8, odd vocabulary (padded for tp)
CONFIG = SimpleNamespace(
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    intermediate_size=48,
    vocab_size=37,
    tie_word_embeddings=False,
    num_hidden_layers=3,
)


def hf_state(config=CONFIG) -> dict:
    g = torch.Generator().manual_seed(0)
    h, hd, kv, heads = (
        config.hidden_size,
        config.head_dim,
        config.num_key_value_heads,
        config.num_attention_heads,
    )
    out = {
        "model.embed_tokens.weight": torch.randn(config.vocab_size, h, generator=g),
        "model.norm.weight": torch.randn(h, generator=g),
        "lm_head.weight": torch.randn(config.vocab_size, h, generator=g),
    }
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes = {
            "self_attn.q_proj.weight": (heads * hd, h),
            "self_attn.k_proj.weight": (kv * hd, h),
            "self_attn.v_proj.weight": (kv * hd, h),
            "self_attn.o_proj.weight": (h, heads * hd),
            "mlp.gate_proj.weight": (config.intermediate_size, h),
            "mlp.up_proj.weight": (config.intermediate_size, h),
            "mlp.down_proj.weight": (h, config.intermediate_size),
            "input_layernorm.weight": (h,),
            "post_attention_layernorm.weight": (h,),
        }
        out.update({p + k: torch.randn(*v, generator=g) for k, v in shapes.items()})
    return out


@pytest.mark.parametrize(
    "tp,stages", [(1, [[0, 1, 2]]), (2, [[0, 1, 2]]), (2, [[0], [1, 2]]), (1, [[0, 1], [2]])]
)
def test_hf_to_megatron_and_back_is_exact(tp, stages):
    hf = hf_state()
    shape = LlamaShape.from_hf(CONFIG, tp)
    back: dict = {}
    for index, layers in enumerate(stages):
        first, last = index == 0, index == len(stages) - 1
        shards = [to_megatron(hf, shape, tp, r, layers, first, last) for r in range(tp)]
        back.update(to_hf(shards, shape, layers, first, last))
    assert sorted(back) == sorted(hf)
    for name, value in hf.items():
        assert torch.equal(back[name], value), name


def test_qkv_rows_run_per_query_group_and_tp_ranks_take_whole_groups():
    hf = hf_state()
    shape = LlamaShape.from_hf(CONFIG, 2)
    q, k, v = (hf[f"model.layers.0.self_attn.{n}_proj.weight"] for n in "qkv")
    rank1 = to_megatron(hf, shape, 2, 1, [0], True, True)
    qkv = rank1["decoder.layers.0.self_attention.linear_qkv.weight"]
    # group 1 = query heads 2 and 3, key head 1, value head 1
    assert torch.equal(qkv, torch.cat([q[16:32], k[8:16], v[8:16]]))


def test_fc1_holds_this_ranks_gate_rows_then_its_up_rows():
    hf = hf_state()
    rank0 = to_megatron(hf, LlamaShape.from_hf(CONFIG, 2), 2, 0, [0], True, True)
    gate, up = hf["model.layers.0.mlp.gate_proj.weight"], hf["model.layers.0.mlp.up_proj.weight"]
    assert torch.equal(
        rank0["decoder.layers.0.mlp.linear_fc1.weight"], torch.cat([gate[:24], up[:24]])
    )


def test_vocabulary_is_padded_to_split_evenly_and_the_padding_never_reaches_hf():
    hf = hf_state()
    shape = LlamaShape.from_hf(CONFIG, 2)
    assert shape.padded_vocab == 38
    shards = [to_megatron(hf, shape, 2, r, [0, 1, 2], True, True) for r in range(2)]
    assert shards[1]["embedding.word_embeddings.weight"].shape == (19, 32)
    assert torch.equal(shards[1]["output_layer.weight"][-1], torch.zeros(32))


def test_tp_that_does_not_divide_the_kv_heads_is_one_clear_error():
    with pytest.raises(ValueError, match=r"tp=4 does not divide the model's num_key_value_heads"):
        LlamaShape.from_hf(CONFIG, 4)
