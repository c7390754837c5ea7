"""The tiny HF Llama as a Megatron-core GPTModel on this rank's tp slice and pipeline stage:
built from the HF config, loaded from the HF checkpoint, and gathered back to the full HF
layout for a weight push.

Builds on CPU (use_cpu_initialization); its forward needs CUDA on megatron-core 0.16.1 (see
recipes/grpo_megatron/train.py). actor.megatron.recompute_granularity goes into the
TransformerConfig here; sequence_parallel is refused before start (the local layers refuse it).
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Optional

import torch
import torch.distributed as dist

from recipes.grpo.layout import WeightShard
from recipes.grpo_megatron.convert import LlamaShape, Tensors, to_hf, to_megatron

RECORDED_WEIGHT = "self_attention.linear_qkv.weight"  # of the stage's first layer


def unsupported_option(options: Mapping[str, Any]) -> Optional[str]:
    """A line for an actor.megatron option these layers cannot honour, before anything starts
    (megatron-core's local layers, no Transformer Engine, refuse sequence parallel)."""
    if options.get("sequence_parallel"):
        return (
            "actor.megatron.sequence_parallel=true: megatron-core's local layers (this "
            "recipe builds without Transformer Engine) refuse sequence parallel; set it false"
        )
    recompute = options.get("recompute_granularity")
    if recompute not in (None, "", "full", "selective"):
        return f"actor.megatron.recompute_granularity={recompute}: choose full or selective"
    return None


def transformer_config(
    hf: Any, sizes: Mapping[str, int], options: Mapping[str, Any], dtype: torch.dtype
) -> Any:
    """Megatron's TransformerConfig for the HF Llama config on the plan's layout. The expert
    sizes stay out: a dense model has no expert layer to split (Megatron refuses ep > 1
    without experts), while its parallel state still forms and checks the expert groups."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    experts = getattr(hf, "num_local_experts", None) or getattr(hf, "num_experts", None)
    if experts:
        raise ValueError(
            f"the model has {experts} experts: this recipe converts dense Llama weights only"
        )
    recompute = options.get("recompute_granularity")
    return TransformerConfig(
        num_layers=hf.num_hidden_layers,
        hidden_size=hf.hidden_size,
        num_attention_heads=hf.num_attention_heads,
        num_query_groups=hf.num_key_value_heads,
        kv_channels=getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads,
        ffn_hidden_size=hf.intermediate_size,
        normalization="RMSNorm",
        layernorm_epsilon=hf.rms_norm_eps,
        gated_linear_unit=True,
        activation_func=torch.nn.functional.silu,
        add_bias_linear=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        tensor_model_parallel_size=sizes["tp"],
        pipeline_model_parallel_size=sizes["pp"],
        context_parallel_size=sizes["cp"],
        recompute_granularity=recompute or None,
        recompute_method="uniform" if recompute == "full" else None,
        recompute_num_layers=1 if recompute == "full" else None,
        use_cpu_initialization=True,
        perform_initialization=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
        rotary_interleaved=False,
    )


def rope_base(hf: Any) -> float:
    rope = getattr(hf, "rope_parameters", None) or {}
    return float(rope.get("rope_theta", getattr(hf, "rope_theta", 1e4)))


def build(
    hf: Any, sizes: Mapping[str, int], options: Mapping[str, Any], dtype: torch.dtype
) -> tuple[torch.nn.Module, LlamaShape]:
    """This rank's GPTModel (its stage's layers, its tp slice), weights not yet loaded."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    config = transformer_config(hf, sizes, options, dtype)
    shape = LlamaShape.from_hf(hf, sizes["tp"])
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
        vocab_size=shape.padded_vocab,
        max_sequence_length=hf.max_position_embeddings,
        pre_process=ps.is_pipeline_first_stage(),
        post_process=ps.is_pipeline_last_stage(),
        share_embeddings_and_output_weights=shape.tied,
        position_embedding_type="rope",
        rotary_base=rope_base(hf),
    )
    return model, shape


def stage_layers(model: torch.nn.Module) -> list[int]:
    """The global (0-based) numbers of the layers this stage holds, in local order."""
    return [layer.layer_number - 1 for layer in model.decoder.layers]


def stage_ends() -> tuple[bool, bool]:
    from megatron.core import parallel_state as ps

    return ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage()


def local_state(model: torch.nn.Module) -> Tensors:
    """The model's tensors (Megatron's _extra_state entries left out)."""
    return {
        k: v
        for k, v in model.state_dict().items()
        if isinstance(v, torch.Tensor) and not k.endswith("_extra_state")
    }


def load_hf(model: torch.nn.Module, shape: LlamaShape, hf_state: Tensors) -> None:
    """Copy this rank's part of the HF checkpoint into the model (strict: every tensor)."""
    from megatron.core import parallel_state as ps

    first, last = stage_ends()
    mine = to_megatron(
        hf_state,
        shape,
        ps.get_tensor_model_parallel_world_size(),
        ps.get_tensor_model_parallel_rank(),
        stage_layers(model),
        first,
        last,
    )
    have = local_state(model)
    if set(mine) != set(have):
        raise ValueError(f"HF -> Megatron names differ: {sorted(set(mine) ^ set(have))[:4]}")
    with torch.no_grad():
        for name, value in mine.items():
            have[name].copy_(value)


def gather_hf(model: torch.nn.Module, shape: LlamaShape) -> Tensors:
    """The full HF-layout weights on global rank 0 (collective over every rank): each stage's
    tp ranks all-gather their shards, its tp rank 0 converts them, and the first data/context
    replica's stages send theirs to rank 0 over the pipeline group."""
    from megatron.core import parallel_state as ps

    if ps.get_data_parallel_rank() != 0 or ps.get_context_parallel_rank() != 0:
        return {}
    tp_group = ps.get_tensor_model_parallel_group()
    tp = ps.get_tensor_model_parallel_world_size()
    shards: list[Tensors] = [dict() for _ in range(tp)]
    for name, value in local_state(model).items():
        parts = [value.detach()]
        if tp > 1:
            parts = [torch.empty_like(value) for _ in range(tp)]
            dist.all_gather(parts, value.detach().contiguous(), group=tp_group)
        for r in range(tp):
            shards[r][name] = parts[r].cpu()
    if ps.get_tensor_model_parallel_rank() != 0:
        return {}
    first, last = stage_ends()
    stage = to_hf(shards, shape, stage_layers(model), first, last)
    pp_group = ps.get_pipeline_model_parallel_group()
    if ps.get_pipeline_model_parallel_world_size() == 1:
        return stage
    stages: list[Any] = [None] * ps.get_pipeline_model_parallel_world_size()
    dist.gather_object(stage, stages if dist.get_rank() == 0 else None, dst=0, group=pp_group)
    return {k: v for part in stages or [] for k, v in (part or {}).items()}


def weight_shard(model: torch.nn.Module) -> WeightShard:
    """The stage's first attention qkv weight as this rank holds it (rows split over tp)."""
    from megatron.core import parallel_state as ps

    layer = stage_layers(model)[0]
    local = local_state(model)[f"decoder.layers.0.{RECORDED_WEIGHT}"]
    tp, tp_rank = (ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_rank())
    data = local.detach().to("cpu", torch.float32).contiguous()
    return WeightShard(
        f"decoder.layers.{layer}.{RECORDED_WEIGHT}",
        list(local.shape),
        [local.shape[0] * tp, local.shape[1]],
        [local.shape[0] * tp_rank, 0],
        hashlib.sha256(data.numpy().tobytes()).hexdigest(),
    )
