"""Peers' published working configurations fit; their reported out-of-memory ones do not.

Each case keeps only what can be read back from its source: model, GPU type (hence memory),
parallel sizes and memory knobs, translated into our backends and options. What had to be
assumed is written beside the case. GPU memory is what the card reports (launcher.memory.capacity).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest

from launcher.memory.capacity import gpu_memory_from_name
from launcher.memory.estimate import EngineInput, InferenceOptions, Offload, TrainOptions
from launcher.memory.fix import memory_report
from launcher.spec.cluster import ClusterSpec
from tests.memory_plans import engine
from tests.model_configs import shape

AREAL = "https://github.com/inclusionAI/AReaL/blob/4aef98d8d818af55b43621aaadba047ae10f4e77/"
SLIME = "https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/"


@dataclass(frozen=True)
class Case:
    sources: tuple[str, ...]
    gpu: str  # GPU type named by the source (or assumed, see `assumed`)
    nodes: int
    engines: Callable[[], list[EngineInput]]
    fits: bool
    assumed: str = ""


def areal_gsm8k(actor: str, checkpointing: bool) -> list[EngineInput]:
    """AReaL examples/math/gsm8k_grpo*.yaml: Qwen2.5-1.5B-Instruct, sglang:d4 (mfs 0.8,
    context 32768) beside actor and ref on the other 4 GPUs, 10240 tokens per micro-batch."""
    model = shape("Qwen2.5-1.5B")
    return [engine("rollout", "sglang:d4", range(4), model,
                   InferenceOptions(mem_fraction=0.8, context_length=32768)),
            engine("actor", actor, range(4, 8), model,
                   TrainOptions(gradient_checkpointing=checkpointing, max_tokens_per_mb=10240)),
            engine("ref", actor, range(4, 8), model,
                   TrainOptions(trainable=False, max_tokens_per_mb=10240))]


def areal_tau2_8b() -> list[EngineInput]:
    """AReaL examples/tau2/config_8b_airline.yaml: Qwen3-8B, sglang:d16 (mfs 0.8, context
    32768) + archon:d8 actor and ref, gradient checkpointing, 32768 tokens per micro-batch."""
    model = shape("Qwen3-8B")
    return [engine("rollout", "sglang:d16", range(16), model,
                   InferenceOptions(mem_fraction=0.8, context_length=32768)),
            engine("actor", "archon:d8", range(16, 24), model,
                   TrainOptions(gradient_checkpointing=True, max_tokens_per_mb=32768)),
            engine("ref", "archon:d8", range(16, 24), model,
                   TrainOptions(trainable=False, max_tokens_per_mb=32768))]


def areal_tau2_30b() -> list[EngineInput]:
    """AReaL examples/tau2/config_30b_moe_airline.yaml: Qwen3-30B-A3B, sglang:d8t4 + megatron
    (attn:d4p4t2|ffn:d2p4e4) actor and ref, full recompute, distributed optimizer, 32768
    tokens; AReaL turns sequence parallel on with tp > 1 (areal/engine/megatron_engine.py)."""
    model = shape("Qwen3-30B-A3B")
    spec = "megatron:(attn:d4p4t2|ffn:d2p4e4)"
    return [engine("rollout", "sglang:d8t4", range(32), model,
                   InferenceOptions(mem_fraction=0.8, context_length=32768)),
            engine("actor", spec, range(32, 64), model,
                   TrainOptions(gradient_checkpointing=True, max_tokens_per_mb=32768,
                                sequence_parallel=True)),
            engine("ref", spec, range(32, 64), model,
                   TrainOptions(trainable=False, max_tokens_per_mb=32768,
                                sequence_parallel=True))]


def slime_qwen3_30b(cpu_adam: bool) -> list[EngineInput]:
    """slime scripts/run-qwen3-30B-A3B.sh: --colocate on 8 GPUs; Megatron tp 4 + sequence
    parallel, ep 8, etp 1, pp 1 (so d 2), full recompute, --max-tokens-per-gpu 20480,
    `--optimizer-cpu-offload` (with the precision-aware optimizer); SGLang one engine of 8
    GPUs, mem-fraction-static 0.7; colocation offloads the trainer and releases SGLang."""
    model = shape("Qwen3-30B-A3B")
    return [engine("rollout", "sglang:t8", range(8), model,
                   InferenceOptions(mem_fraction=0.7, release=True)),
            engine("actor", "megatron:(attn:d2t4|ffn:e8)", range(8), model,
                   TrainOptions(gradient_checkpointing=True, max_tokens_per_mb=20480,
                                sequence_parallel=True, optimizer_cpu_offload=cpu_adam,
                                offload=Offload(True, True, True)))]


def reference_qwen3_8b_without_offload() -> list[EngineInput]:
    """reference/memory.md §6: Qwen3-8B, fsdp:d8 + sglang:d8 collocated, mfs 0.8, 16384
    tokens with checkpointing, no offload on either side."""
    model = shape("Qwen3-8B")
    return [engine("rollout", "sglang:d8", range(8), model, InferenceOptions(mem_fraction=0.8)),
            engine("actor", "fsdp:d8", range(8), model,
                   TrainOptions(gradient_checkpointing=True, max_tokens_per_mb=16384))]


CASES = {
    "areal-gsm8k-fsdp-8xH800": Case(
        (AREAL + "examples/math/gsm8k_grpo.yaml", AREAL + "examples/math/README.md"),
        "H800", 1, lambda: areal_gsm8k("fsdp:d4", checkpointing=True), fits=True),
    "areal-gsm8k-megatron-8xH800": Case(
        (AREAL + "examples/math/gsm8k_grpo_megatron.yaml", AREAL + "examples/math/README.md"),
        "H800", 1, lambda: areal_gsm8k("megatron:d4", checkpointing=False), fits=True,
        assumed="the README's 8 x H800 for the Megatron variant of the same example"),
    "areal-tau2-qwen3-8b-archon": Case(
        (AREAL + "examples/tau2/config_8b_airline.yaml",
         AREAL + "docs/en/tutorial/installation.md"),
        "H800", 3, areal_tau2_8b, fits=True,
        assumed="the config names no GPU: the installation guide's 8 x H800 per node"),
    "areal-tau2-qwen3-30b-megatron": Case(
        (AREAL + "examples/tau2/config_30b_moe_airline.yaml",
         AREAL + "docs/en/tutorial/installation.md"),
        "H800", 8, areal_tau2_30b, fits=True,
        assumed="the config names no GPU: the installation guide's 8 x H800 per node"),
    "slime-qwen3-30b-colocated-cpu-adam-8xH100": Case(
        (SLIME + "scripts/run-qwen3-30B-A3B.sh", SLIME + "docs/en/examples/qwen3-30B-A3B.md"),
        "H100", 1, lambda: slime_qwen3_30b(cpu_adam=True), fits=True),
    # The same page: "To support running Qwen3-30B-A3B in an 8xH800 environment, we need to
    # enable Megatron's CPU Adam to save GPU memory": without it, it does not fit.
    "slime-qwen3-30b-colocated-without-cpu-adam-8xH800": Case(
        (SLIME + "docs/en/examples/qwen3-30B-A3B.md",),
        "H800", 1, lambda: slime_qwen3_30b(cpu_adam=False), fits=False,
        assumed="Adam states in fp32: the precision-aware optimizer only comes with the offload"),
    "reference-qwen3-8b-collocated-without-offload": Case(
        ("reference/memory.md §6 (worked example)",), "H100", 1,
        reference_qwen3_8b_without_offload, fits=False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_published_working_configs_fit_and_reported_oom_configs_do_not(name):
    case = CASES[name]
    capacity = gpu_memory_from_name(case.gpu)
    assert capacity is not None
    report = memory_report(case.engines(), ClusterSpec(case.nodes, 8), capacity)
    assert report.fits is case.fits, "\n".join(p.line() for p in report.problems) or \
        {n: e.per_gpu_gib for n, e in report.engines.items()}
    if not case.fits:  # a refused plan always says what to change
        assert report.problems[0].fix


def test_the_table_has_working_and_failing_cases_with_sources():
    assert {c.fits for c in CASES.values()} == {True, False}
    assert all(c.sources for c in CASES.values())
