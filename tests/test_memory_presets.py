"""The default CPU run and the GPU presets fit on the machines they are written for.

Plans are composed and built as `areal-launch plan` builds them; the config -> options mapping
below is the one the plan integration needs (keys that exist today; the rest are defaults).
Preset comments name "8 GPUs" without a type: taken as 80 GB cards (H100, 79.11 GiB).
"""
from __future__ import annotations

from typing import Any

import pytest

from launcher.build import build_plan, explicit_keys
from launcher.capacity import gpu_memory_from_name, host_memory_gib
from launcher.compose import compose_config
from launcher.config import rollout_offload
from launcher.memory import (EngineInput, InferenceOptions, Offload, TrainOptions,
                             memory_report)
from launcher.model_shape import ModelShape, read_model_shape, shape_from_config
from tests.memory_plans import apply_override
from tests.model_configs import MODELS

# the checkpoints the presets name, from our table of published configs
PRESET_MODELS = {
    "/models/Qwen2.5-1.5B-Instruct": shape_from_config(MODELS["Qwen2.5-1.5B"]["config"]),
    # Qwen2.5-7B-Instruct's config.json is the base model's with a 32768 context
    "/models/Qwen2.5-7B-Instruct": shape_from_config(
        {**MODELS["Qwen2.5-7B"]["config"], "max_position_embeddings": 32768}),
}
# what the presets need beyond today's keys: actor.gradient_checkpointing (to add with the
# key; without it the 7B presets need more than an 80 GB card, see the last test)
CHECKPOINTING = {"gpu1x8_collocated_sglang_fsdp": False,
                 "gpu2x8_disaggregated_sglang_fsdp": True, "gpu2x8_megatron": True}


def engine_inputs(cfg: Any, plan, shape: ModelShape, checkpointing: bool) -> list[EngineInput]:
    """Typed memory inputs from a composed config and its plan."""
    out = []
    for name, comp in plan.components.items():
        node = getattr(cfg, name)
        if comp.is_inference:
            opts = getattr(node, comp.backend)
            sglang = comp.backend == "sglang"
            options: Any = InferenceOptions(
                mem_fraction=opts.mem_fraction_static if sglang else opts.gpu_memory_utilization,
                context_length=opts.context_length if sglang else opts.max_model_len,
                dtype=opts.dtype, release=rollout_offload(cfg),
                **({} if sglang else {"cpu_kvcache_space_gib": opts.cpu_kvcache_space_gb}))
        else:
            megatron = node.megatron
            options = TrainOptions(
                dtype=str(cfg.recipe.get("dtype", "bfloat16")) if plan.cluster.device == "cpu"
                else "bfloat16",
                trainable=name in ("actor", "critic"), gradient_checkpointing=checkpointing,
                offload=Offload(node.offload.weight, node.offload.optimizer, node.offload.grad),
                sequence_parallel=megatron.sequence_parallel,
                use_distributed_optimizer=megatron.use_distributed_optimizer)
        out.append(EngineInput(comp, shape, options))
    return out


def preset(name: str, checkpointing: bool):
    overrides = [f"experiment={name}"]
    cfg = compose_config(overrides)
    plan = build_plan(cfg, 0, explicit_keys(overrides))
    return engine_inputs(cfg, plan, PRESET_MODELS[cfg.model_path], checkpointing), plan


@pytest.mark.parametrize("name", sorted(CHECKPOINTING))
def test_each_gpu_preset_fits_on_eight_80gb_gpus_per_node(name):
    engines, plan = preset(name, CHECKPOINTING[name])
    report = memory_report(engines, plan.cluster, gpu_memory_from_name("H100"))
    assert report.fits is True, report.error()
    assert len(report.gpus()) == plan.cluster.total_gpus


def test_the_7b_preset_without_checkpointing_is_refused_with_that_fix():
    engines, plan = preset("gpu2x8_disaggregated_sglang_fsdp", checkpointing=False)
    report = memory_report(engines, plan.cluster, gpu_memory_from_name("H100"))
    assert report.fits is False
    fix = report.problems[0].fix
    assert fix == "actor.gradient_checkpointing=true"
    assert memory_report(apply_override(engines, fix), plan.cluster,
                         gpu_memory_from_name("H100")).fits is True


def test_the_default_cpu_run_fits_in_this_hosts_memory(tiny_model):
    overrides = ["cluster.device=cpu", f"model_path={tiny_model}"]
    cfg = compose_config(overrides)
    plan = build_plan(cfg, 0, explicit_keys(overrides))
    shape = read_model_shape(tiny_model)
    assert shape is not None
    host = host_memory_gib()
    assert host is not None
    report = memory_report(engine_inputs(cfg, plan, shape, False), plan.cluster, host)
    # measured: vLLM CPU server 3.0 GiB + 2 ranks x 0.45 + torchrun agent 0.22 (memory_parts)
    assert 3.5 < report.host_need_gib < 5.0
    assert report.fits is True, report.error()
