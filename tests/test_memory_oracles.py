"""Model-state bytes against two published estimators, transcribed here as cited oracles.

- DeepSpeed `estimate_zero3_model_states_mem_needs` (deepspeed/runtime/zero/stage3.py, read at
  deepspeedai/DeepSpeed@007cca6a2ffe3ed9d393459f4a3081bd54341ba6): ZeRO-3 shards 18 bytes
  per parameter over all GPUs (2 16-bit params + 4 fp32 grads + 4 fp32 master + 8 Adam), keeps
  the 16-bit params (2) on the GPU when the optimizer is offloaded, and nothing but the
  largest layer when params are offloaded too. Our FSDP full shard, given the same bytes per
  parameter, must give the same terms.
- Megatron-LM `compute_weight_and_optimizer_memory` (megatron/training/
  theoretical_memory_usage.py, read at NVIDIA/Megatron-LM@00caa53af30912914981c86f39db123961678bbd):
  the most loaded shard's parameters times 18 bytes, or `6 + 12/d` with the distributed
  optimizer. Its count leaves out q/k/v biases, q/k norms and routers, and it ignores expert
  parallel, so MoE models are compared at e=1, t=1.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from launcher.memory.train import TrainOptions, model_state_bytes
from launcher.spec.alloc import parse_backend
from tests.model_configs import TABLE, shape

DEEPSPEED_BYTES = (2, 4, 12)  # 16-bit weights, fp32 grads, fp32 master + Adam moments


# ------------------------------------------------------------------ DeepSpeed, transcribed
def estimate_zero3_model_states_mem_needs(
    total_params,
    largest_layer_params,
    num_gpus_per_node=1,
    num_nodes=1,
    cpu_offload=True,
    cpu_offload_params=True,
    zero_init=True,
    additional_buffer_factor=1.5,
):
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            if zero_init:
                cpu_mem = total_params * 18 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = (
                    total_params
                    * max(4 * num_gpus_per_node, 18 * gpus_factor)
                    * additional_buffer_factor
                )
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            if zero_init:
                cpu_mem = total_params * 16 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = (
                    total_params
                    * max(4 * num_gpus_per_node, 16 * gpus_factor)
                    * additional_buffer_factor
                )
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        if zero_init:
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem), largest_layer_memory


# ------------------------------------------------------------------ Megatron-LM, transcribed
def compute_weight_and_optimizer_memory(args):
    query_projection_size = args.kv_channels * args.num_attention_heads
    query_projection_to_hidden_size_ratio = query_projection_size / args.hidden_size
    if not args.group_query_attention:
        args.num_query_groups = args.num_attention_heads
    num_experts = 1 if args.num_experts is None else args.num_experts
    gated_linear_multiplier = 3 / 2 if args.swiglu else 1
    shared_expert_ffn_hidden_size = (
        0
        if args.moe_shared_expert_intermediate_size is None
        else args.moe_shared_expert_intermediate_size
    )
    if args.num_experts is not None:
        moe_layer_pattern = args.moe_layer_freq
        num_dense_layers = args.num_layers - sum(moe_layer_pattern)
        num_moe_layers = sum(moe_layer_pattern)
        moe_ffn_hidden_size = args.moe_ffn_hidden_size
    else:
        num_dense_layers, num_moe_layers, moe_ffn_hidden_size = args.num_layers, 0, 0
    norm_size = 1 if args.normalization == "RMSNorm" else 2
    if args.multi_latent_attention:
        if args.q_lora_rank is None:
            q_term = (
                args.hidden_size
                * args.num_attention_heads
                * (args.qk_head_dim + args.qk_pos_emb_head_dim)
            )
        else:
            q_term = args.q_lora_rank * (
                args.hidden_size
                + args.num_attention_heads * (args.qk_head_dim + args.qk_pos_emb_head_dim)
                + norm_size
            )
        self_attn_term = (
            q_term
            + args.kv_lora_rank
            * (
                args.hidden_size
                + args.num_attention_heads * (args.qk_head_dim + args.v_head_dim)
                + norm_size
            )
            + args.hidden_size * args.qk_pos_emb_head_dim
            + (args.num_attention_heads * args.v_head_dim) * args.hidden_size
        )
    else:
        self_attn_term = (
            2
            * args.hidden_size
            * args.hidden_size
            * (
                (1 + (args.num_query_groups / args.num_attention_heads))
                * query_projection_to_hidden_size_ratio
            )
        )
    dense_layer = (
        2 * args.hidden_size * (args.ffn_hidden_size * gated_linear_multiplier + norm_size)
        + self_attn_term
    )
    moe_layer = (
        2
        * args.hidden_size
        * (
            moe_ffn_hidden_size * num_experts * gated_linear_multiplier
            + shared_expert_ffn_hidden_size * gated_linear_multiplier
            + norm_size
        )
        + self_attn_term
    )
    embedding_size = args.hidden_size * args.padded_vocab_size
    final_layernorm = norm_size * args.hidden_size
    block = dense_layer * num_dense_layers + moe_layer * num_moe_layers + final_layernorm
    most_loaded = (
        block / args.pipeline_model_parallel_size + embedding_size
    ) / args.tensor_model_parallel_size
    if args.untie_embeddings_and_output_weights and args.pipeline_model_parallel_size == 1:
        most_loaded += embedding_size / args.tensor_model_parallel_size
    bytes_per_parameter = (
        18 if not args.use_distributed_optimizer else 6 + (12 / args.data_parallel_size)
    )
    return most_loaded * bytes_per_parameter


def megatron_args(s, tp: int, pp: int, dp: int, distributed: bool) -> SimpleNamespace:
    """Megatron's arguments for a ModelShape (what its HF->mcore bridges pass)."""
    moe = s.is_moe
    first_dense = s.num_dense_layers  # every table model puts its dense layers first
    return SimpleNamespace(
        hidden_size=s.hidden_size,
        num_layers=s.num_layers,
        num_attention_heads=s.num_heads,
        kv_channels=s.head_dim,
        group_query_attention=s.num_kv_heads < s.num_heads,
        num_query_groups=s.num_kv_heads,
        ffn_hidden_size=s.intermediate_size,
        swiglu=True,
        num_experts=s.num_experts if moe else None,
        moe_layer_freq=[0] * first_dense + [1] * s.num_moe_layers,
        moe_ffn_hidden_size=s.moe_intermediate_size,
        moe_shared_expert_intermediate_size=(
            s.num_shared_experts * s.moe_intermediate_size + s.shared_expert_intermediate_size
        )
        or None,
        normalization="RMSNorm",
        multi_latent_attention=s.is_mla,
        q_lora_rank=s.q_lora_rank,
        kv_lora_rank=s.kv_lora_rank,
        qk_head_dim=s.qk_nope_head_dim,
        qk_pos_emb_head_dim=s.qk_rope_head_dim,
        v_head_dim=s.v_head_dim,
        padded_vocab_size=s.vocab_size,
        untie_embeddings_and_output_weights=not s.tie_embeddings,
        pipeline_model_parallel_size=pp,
        tensor_model_parallel_size=tp,
        use_distributed_optimizer=distributed,
        data_parallel_size=dp,
    )


# ------------------------------------------------------------------ the tests
FSDP_LAYOUTS = [(1, 8), (4, 8), (16, 8), (128, 8)]  # nodes x GPUs per node


@pytest.mark.parametrize("name", TABLE)
@pytest.mark.parametrize("nodes,per_node", FSDP_LAYOUTS)
def test_fsdp_full_shard_model_states_equal_deepspeed_zero3_term_by_term(name, nodes, per_node):
    s = shape(name)
    n = nodes * per_node
    states = model_state_bytes(s, parse_backend(f"fsdp:d{n}"), TrainOptions(), DEEPSPEED_BYTES)
    largest = max(s.layer_params, s.params.embedding)
    ds_args = dict(
        total_params=s.params.total,
        largest_layer_params=largest,
        num_gpus_per_node=per_node,
        num_nodes=nodes,
    )
    _, no_offload, layer = estimate_zero3_model_states_mem_needs(cpu_offload=False, **ds_args)
    _, optim_offload, _ = estimate_zero3_model_states_mem_needs(
        cpu_offload=True, cpu_offload_params=False, **ds_args
    )
    _, all_offload, _ = estimate_zero3_model_states_mem_needs(
        cpu_offload=True, cpu_offload_params=True, **ds_args
    )
    sharded = sum(states.values())
    assert sharded == pytest.approx(no_offload - layer, rel=0.02)
    assert states["weights"] == pytest.approx(optim_offload - layer, rel=0.02)
    offloaded = model_state_bytes(s, parse_backend(f"fsdp:d{n}"), TrainOptions(), (0, 0, 0))
    assert sum(offloaded.values()) == all_offload - layer == 0


MEGATRON_LAYOUTS = [
    "megatron:d8",
    "megatron:d4t2",
    "megatron:d2t8",
    "megatron:d2p4t2",
    "megatron:d8p2t4",
    "megatron:d1p4t8",
]


@pytest.mark.parametrize("name", TABLE)
@pytest.mark.parametrize("spec", MEGATRON_LAYOUTS)
@pytest.mark.parametrize("distributed", [True, False], ids=["dist-opt", "no-dist-opt"])
def test_megatron_model_states_match_megatrons_theoretical_formula(name, spec, distributed):
    s = shape(name)
    alloc = parse_backend(spec)
    if s.is_moe and alloc.tp > 1:
        pytest.skip("Megatron's formula splits experts by tp and ignores ep; ours keeps etp=1")
    opts = TrainOptions(use_distributed_optimizer=distributed)
    ours = sum(model_state_bytes(s, alloc, opts).values())
    theirs = compute_weight_and_optimizer_memory(
        megatron_args(s, alloc.tp, alloc.pp, alloc.dp, distributed)
    )
    assert ours == pytest.approx(theirs, rel=0.02)


def test_megatron_bytes_per_parameter_are_eighteen_and_six_plus_twelve_over_d():
    s = shape("Llama-3-8B")
    for d in (1, 2, 8):
        alloc = parse_backend(f"megatron:d{d}")
        dense = sum(model_state_bytes(s, alloc, TrainOptions()).values()) / s.params.total
        plain = (
            sum(model_state_bytes(s, alloc, TrainOptions(use_distributed_optimizer=False)).values())
            / s.params.total
        )
        assert (dense, plain) == (pytest.approx(6 + 12 / d), pytest.approx(18))


def test_fsdp_keeps_weights_grads_and_both_moments_in_the_training_dtype():
    s = shape("Qwen3-8B")
    alloc = parse_backend("fsdp:d8")
    bf16 = sum(model_state_bytes(s, alloc, TrainOptions(dtype="bfloat16")).values())
    fp32 = sum(model_state_bytes(s, alloc, TrainOptions(dtype="float32")).values())
    assert bf16 == pytest.approx(8 * s.params.total / 8)
    assert fp32 == pytest.approx(16 * s.params.total / 8)
