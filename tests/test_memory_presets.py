"""The default CPU run and the GPU presets fit on the machines they are written for.

Plans are composed and built as `areal-launch plan` builds them, and their memory checked the
way a launch checks it (launcher/backends/memory_inputs.py maps the config onto the
estimator). The presets name 8 H100 (80 GB, 79.11 GiB) per node.
"""

from __future__ import annotations

import pytest

from launcher.backends.memory_inputs import plan_memory
from launcher.cli.launch import prepare
from launcher.memory.capacity import gpu_memory_from_name, host_memory_gib
from launcher.memory.model_shape import shape_from_config
from tests.model_configs import MODELS

# the checkpoints the presets name, from our table of published configs
PRESET_MODELS = {
    "/models/Qwen2.5-1.5B-Instruct": shape_from_config(MODELS["Qwen2.5-1.5B"]["config"]),
    # Qwen2.5-7B-Instruct's config.json is the base model's with a 32768 context
    "/models/Qwen2.5-7B-Instruct": shape_from_config(
        {**MODELS["Qwen2.5-7B"]["config"], "max_position_embeddings": 32768}
    ),
}
H100 = gpu_memory_from_name("H100")


def preset(name: str, *overrides: str):
    """The preset's real plan (its model is not on this machine: the shape comes from the
    table of published configs) and its memory report on 80 GB cards."""
    prep = prepare([f"experiment={name}", "launcher.check_memory=off", *overrides], to_run=False)
    shape = PRESET_MODELS[prep.plan.meta["model_path"]]
    return plan_memory(prep.plan, prep.planned.engines, shape, H100), prep.plan


@pytest.mark.parametrize(
    "name", ["gpu1x8_collocated_sglang_fsdp", "gpu2x8_disaggregated_sglang_fsdp", "gpu2x8_megatron"]
)
def test_each_gpu_preset_fits_on_the_h100_nodes_its_comment_names(name):
    report, plan = preset(name)
    assert report.fits is True, report.error()
    assert len(report.gpus()) == plan.cluster.total_gpus


TOKENS = "actor.mb_spec.max_tokens_per_mb=16384"  # the preset's 10240 without checkpointing
# only may not fit (the estimate's low end fits): refused at 16384


def test_the_7b_preset_without_checkpointing_is_refused_with_a_fix_that_fits():
    off = "actor.gradient_checkpointing=false"
    report, _ = preset("gpu2x8_disaggregated_sglang_fsdp", off, TOKENS)
    assert report.fits is False
    fix = report.problems[0].fix
    assert fix == "actor.gradient_checkpointing=true"
    fixed, _ = preset(
        "gpu2x8_disaggregated_sglang_fsdp", off, TOKENS, fix
    )  # the fix is a real override: composed like any other
    assert fixed.fits is True


def test_the_default_cpu_run_fits_in_this_hosts_memory(tiny_model):
    prep = prepare(["cluster.device=cpu", f"model_path={tiny_model}"], to_run=False)
    memory = prep.plan.meta["memory"]
    host = host_memory_gib()
    assert host is not None and memory["gpu_capacity_gib"] == pytest.approx(host, rel=0.2)
    # measured: vLLM CPU server 3.0 GiB + 2 ranks x 0.45 + torchrun agent 0.22 (memory_parts)
    assert 3.5 < memory["host_need_gib"] < 5.0
    assert memory["fits"] is True
