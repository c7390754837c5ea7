"""Model shapes from config.json: published parameter counts, families, and the reader's edges."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from launcher.memory.model_shape import ModelShapeError, read_model_shape, shape_from_config
from launcher.spec.errors import LaunchError
from tests.model_configs import MODELS, TABLE, shape

UNITS = {"B": 10**9, "M": 10**6}


def published_bounds(text: str) -> tuple[float, float]:
    """A published count as an interval: within 1 %, widened by half a unit of the last digit
    the card prints ("3.3B" cannot be checked closer than +-0.05B)."""
    value, unit = Decimal(text[:-1]), UNITS[text[-1]]
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    half_digit = float(Decimal(10) ** exponent) / 2 * unit
    center = float(value) * unit
    slack = 0.01 * center + half_digit
    return center - slack, center + slack


COUNTS = [
    (name, key)
    for name in TABLE + ("Qwen2.5-1.5B", "Qwen3-14B")
    for key in MODELS[name]["published"]
]


@pytest.mark.parametrize("name,key", COUNTS, ids=[f"{n}-{k}" for n, k in COUNTS])
def test_parameter_count_matches_the_published_count_within_one_percent(name, key):
    params = shape(name).params
    ours = {
        "total": params.total,
        "active": params.active,
        "non_embedding": params.non_embedding,
        # DeepSeek's README_WEIGHTS counts the output head but not the input lookup
        "active_without_input_embedding": params.active - params.embedding,
    }[key]
    low, high = published_bounds(MODELS[name]["published"][key])
    assert low <= ours <= high, (
        f"{name} {key}: ours {ours / 1e9:.3f}B, published "
        f"{MODELS[name]['published'][key]} ({MODELS[name]['card']})"
    )


def test_every_model_of_the_table_has_a_source_and_a_published_total():
    for name in TABLE:
        assert MODELS[name]["source"].startswith("https://huggingface.co/")
        assert "total" in MODELS[name]["published"]


def test_deepseek_v3_has_mla_three_dense_layers_and_a_shared_expert():
    s = shape("DeepSeek-V3")
    assert s.is_mla and s.is_moe
    assert (s.num_dense_layers, s.num_moe_layers) == (3, 58)
    assert s.params.shared_experts == 58 * 3 * 7168 * 2048
    assert s.weight_bytes == 1  # fp8 checkpoint


def test_qwen3_moe_and_mixtral_make_every_layer_moe():
    assert shape("Qwen3-30B-A3B").num_moe_layers == 48
    mixtral = shape("Mixtral-8x7B")
    assert mixtral.num_moe_layers == 32 and mixtral.moe_intermediate_size == 14336
    assert mixtral.params.dense_mlp == 0


def test_qwen_mlp_only_layers_and_sparse_step_make_dense_layers():
    cfg = {**MODELS["Qwen3-30B-A3B"]["config"], "mlp_only_layers": [0, 1], "decoder_sparse_step": 2}
    s = shape_from_config(cfg)
    # MoE where (i + 1) % 2 == 0 and i not in {0, 1}: i = 3, 5, ..., 47
    assert s.num_moe_layers == 23 and s.num_dense_layers == 25


def test_qwen2_has_qkv_bias_and_qwen3_has_qk_norm():
    qwen2, qwen3, llama = shape("Qwen2.5-7B"), shape("Qwen3-8B"), shape("Llama-3-8B")
    assert qwen2.qkv_bias and not qwen2.o_bias and not qwen2.qk_norm
    assert qwen3.qk_norm and not qwen3.qkv_bias
    assert not (llama.qkv_bias or llama.qk_norm)
    no_bias = shape_from_config({**MODELS["Qwen2.5-7B"]["config"], "model_type": "llama"})
    per_layer = (28 + 2 * 4) * 128  # q, k, v biases
    assert qwen2.attention_per_layer - no_bias.attention_per_layer == per_layer


def test_tied_embeddings_count_once():
    tied = shape("Qwen2.5-1.5B")
    assert tied.tie_embeddings and tied.params.output == 0
    untied = shape_from_config({**MODELS["Qwen2.5-1.5B"]["config"], "tie_word_embeddings": False})
    assert untied.params.total - tied.params.total == 151936 * 1536


def test_multimodal_config_reads_the_nested_text_config():
    cfg = {"model_type": "llava", "text_config": MODELS["Llama-3-8B"]["config"]}
    assert shape_from_config(cfg).params.total == shape("Llama-3-8B").params.total


def test_read_model_shape_returns_none_without_config_json(tmp_path):
    assert read_model_shape(tmp_path) is None
    assert read_model_shape(tmp_path / "not-there") is None


def test_read_model_shape_reads_a_local_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(MODELS["Qwen3-8B"]["config"]))
    assert read_model_shape(tmp_path) == shape("Qwen3-8B")


def test_a_config_without_hidden_size_names_the_file_and_the_key(tmp_path):
    cfg = dict(MODELS["Qwen3-8B"]["config"])
    del cfg["hidden_size"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelShapeError, match="config.json: missing 'hidden_size'") as e:
        read_model_shape(tmp_path)
    assert isinstance(e.value, LaunchError) and str(tmp_path) in str(e.value)


def test_a_config_that_is_not_json_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelShapeError, match="not readable as JSON"):
        read_model_shape(tmp_path)


@pytest.mark.timeout(60)  # unbounded took minutes; how long it takes is bench_memory.py's
def test_a_huge_size_is_refused():
    cfg = {**MODELS["Llama-3-8B"]["config"], "num_hidden_layers": 10**30}
    with pytest.raises(ModelShapeError, match="num_hidden_layers=1000000000000000000000000000000"):
        shape_from_config(cfg)


def test_an_unknown_dtype_names_the_text():
    with pytest.raises(LaunchError, match="'float13'"):
        shape_from_config({**MODELS["Llama-3-8B"]["config"], "torch_dtype": "float13"})
