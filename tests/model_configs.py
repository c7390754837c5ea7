"""Published models: the config.json fields the memory estimates read, and the published counts.

Each entry: `config` (only the fields we read, copied from the model's config.json on the
Hugging Face hub at `source`), `card` (where the published parameter counts are written) and
`published` (the counts as written there, as text: "8.03B" is checked to its own precision).
"""

from __future__ import annotations

MODELS = {
    "Llama-3-8B": {
        "source": "https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json",
        "card": "https://huggingface.co/meta-llama/Meta-Llama-3-8B (model size: 8.03B params)",
        "published": {"total": "8.03B"},
        "config": {
            "model_type": "llama",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "vocab_size": 128256,
            "max_position_embeddings": 8192,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "torch_dtype": "bfloat16",
        },
    },
    "Llama-3-70B": {
        "source": "https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json",
        "card": "https://huggingface.co/meta-llama/Meta-Llama-3-70B (model size: 70.6B params)",
        "published": {"total": "70.6B"},
        "config": {
            "model_type": "llama",
            "hidden_size": 8192,
            "intermediate_size": 28672,
            "num_attention_heads": 64,
            "num_hidden_layers": 80,
            "num_key_value_heads": 8,
            "vocab_size": 128256,
            "max_position_embeddings": 8192,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "torch_dtype": "bfloat16",
        },
    },
    "Qwen2.5-1.5B": {
        "source": "https://huggingface.co/Qwen/Qwen2.5-1.5B-Instruct/blob/main/config.json",
        "card": "https://huggingface.co/Qwen/Qwen2.5-1.5B-Instruct (Number of Parameters: "
        "1.54B; Non-Embedding: 1.31B)",
        "published": {"total": "1.54B", "non_embedding": "1.31B"},
        "config": {
            "model_type": "qwen2",
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_attention_heads": 12,
            "num_hidden_layers": 28,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "max_position_embeddings": 32768,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
        },
    },
    "Qwen2.5-7B": {
        "source": "https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json",
        "card": "https://huggingface.co/Qwen/Qwen2.5-7B (Number of Parameters: 7.61B; "
        "Non-Embedding: 6.53B)",
        "published": {"total": "7.61B", "non_embedding": "6.53B"},
        "config": {
            "model_type": "qwen2",
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_attention_heads": 28,
            "num_hidden_layers": 28,
            "num_key_value_heads": 4,
            "vocab_size": 152064,
            "max_position_embeddings": 131072,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
        },
    },
    "Qwen2.5-72B": {
        "source": "https://huggingface.co/Qwen/Qwen2.5-72B/blob/main/config.json",
        "card": "https://huggingface.co/Qwen/Qwen2.5-72B (Number of Parameters: 72.7B; "
        "Non-Embedding: 70.0B)",
        "published": {"total": "72.7B", "non_embedding": "70.0B"},
        "config": {
            "model_type": "qwen2",
            "hidden_size": 8192,
            "intermediate_size": 29568,
            "num_attention_heads": 64,
            "num_hidden_layers": 80,
            "num_key_value_heads": 8,
            "vocab_size": 152064,
            "max_position_embeddings": 131072,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
        },
    },
    "Qwen3-8B": {
        "source": "https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json",
        "card": "https://huggingface.co/Qwen/Qwen3-8B (Number of Parameters: 8.2B; "
        "Non-Embedding: 6.95B)",
        "published": {"total": "8.2B", "non_embedding": "6.95B"},
        "config": {
            "model_type": "qwen3",
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_attention_heads": 32,
            "num_hidden_layers": 36,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
            "max_position_embeddings": 40960,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "torch_dtype": "bfloat16",
        },
    },
    "Qwen3-14B": {
        "source": "https://huggingface.co/Qwen/Qwen3-14B/blob/main/config.json",
        "card": "https://huggingface.co/Qwen/Qwen3-14B (Number of Parameters: 14.8B; "
        "Non-Embedding: 13.2B)",
        "published": {"total": "14.8B", "non_embedding": "13.2B"},
        "config": {
            "model_type": "qwen3",
            "hidden_size": 5120,
            "intermediate_size": 17408,
            "num_attention_heads": 40,
            "num_hidden_layers": 40,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
            "max_position_embeddings": 40960,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "torch_dtype": "bfloat16",
        },
    },
    "Qwen3-32B": {
        "source": "https://huggingface.co/Qwen/Qwen3-32B/blob/main/config.json",
        "card": "https://huggingface.co/Qwen/Qwen3-32B (Number of Parameters: 32.8B; "
        "Non-Embedding: 31.2B)",
        "published": {"total": "32.8B", "non_embedding": "31.2B"},
        "config": {
            "model_type": "qwen3",
            "hidden_size": 5120,
            "intermediate_size": 25600,
            "num_attention_heads": 64,
            "num_hidden_layers": 64,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
            "max_position_embeddings": 40960,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "torch_dtype": "bfloat16",
        },
    },
    "Qwen3-30B-A3B": {
        "source": "https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json",
        "card": "https://huggingface.co/Qwen/Qwen3-30B-A3B (Number of Parameters: 30.5B in "
        "total and 3.3B activated; Non-Embedding: 29.9B)",
        "published": {"total": "30.5B", "active": "3.3B", "non_embedding": "29.9B"},
        "config": {
            "model_type": "qwen3_moe",
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "moe_intermediate_size": 768,
            "num_attention_heads": 32,
            "num_hidden_layers": 48,
            "num_key_value_heads": 4,
            "head_dim": 128,
            "vocab_size": 151936,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "max_position_embeddings": 40960,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "torch_dtype": "bfloat16",
        },
    },
    "Qwen3-235B-A22B": {
        "source": "https://huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json",
        "card": "https://huggingface.co/Qwen/Qwen3-235B-A22B (Number of Parameters: 235B in "
        "total and 22B activated; Non-Embedding: 234B)",
        "published": {"total": "235B", "active": "22B", "non_embedding": "234B"},
        "config": {
            "model_type": "qwen3_moe",
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "moe_intermediate_size": 1536,
            "num_attention_heads": 64,
            "num_hidden_layers": 94,
            "num_key_value_heads": 4,
            "head_dim": 128,
            "vocab_size": 151936,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "max_position_embeddings": 40960,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "torch_dtype": "bfloat16",
        },
    },
    "Mixtral-8x7B": {
        "source": "https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json",
        "card": "https://mistral.ai/news/mixtral-of-experts/ (46.7B total parameters, 12.9B "
        "parameters per token)",
        "published": {"total": "46.7B", "active": "12.9B"},
        "config": {
            "model_type": "mixtral",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "vocab_size": 32000,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "max_position_embeddings": 32768,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
        },
    },
    "DeepSeek-V3": {
        "source": "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
        # README_WEIGHTS.md: "Total parameters: 671B; Activation parameters: 36.6B (including
        # 0.9B for the output Head)" -- the main model without the MTP module, and the
        # activated count leaves out the input embedding (a lookup), see test_model_shape.
        "card": "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/README_WEIGHTS.md",
        "published": {"total": "671B", "active_without_input_embedding": "36.6B"},
        "config": {
            "model_type": "deepseek_v3",
            "hidden_size": 7168,
            "intermediate_size": 18432,
            "moe_intermediate_size": 2048,
            "num_attention_heads": 128,
            "num_hidden_layers": 61,
            "num_key_value_heads": 128,
            "vocab_size": 129280,
            "n_routed_experts": 256,
            "n_shared_experts": 1,
            "num_experts_per_tok": 8,
            "first_k_dense_replace": 3,
            "moe_layer_freq": 1,
            "q_lora_rank": 1536,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
            "topk_method": "noaux_tc",
            "num_nextn_predict_layers": 1,
            "max_position_embeddings": 163840,
            "tie_word_embeddings": False,
            "quantization_config": {"quant_method": "fp8"},
            "torch_dtype": "bfloat16",
        },
    },
}

# The models of the brief's table (the two Qwen2.5-1.5B/Qwen3-14B entries serve peer cases).
TABLE = (
    "Llama-3-8B",
    "Llama-3-70B",
    "Qwen2.5-7B",
    "Qwen2.5-72B",
    "Qwen3-8B",
    "Qwen3-32B",
    "Qwen3-30B-A3B",
    "Qwen3-235B-A22B",
    "Mixtral-8x7B",
    "DeepSeek-V3",
)


def shape(name: str):
    """The ModelShape of a table model."""
    from launcher.memory.model_shape import shape_from_config

    return shape_from_config(MODELS[name]["config"], where=MODELS[name]["source"])
