"""Every term of the estimate carries its measured error (launcher/memory/error_table.py): a
plan is refused only when even the low end does not fit, warned (naming the term whose range
decides) when it fits at the low end only, and surely fits when the high end does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.memory.error_table import TABLE, term_error
from launcher.memory.estimate import InferenceOptions, Offload, TrainOptions
from launcher.memory.fix import memory_report
from launcher.memory.infer import estimate_inference
from launcher.memory.train import estimate_training
from launcher.spec.alloc import parse_backend
from launcher.spec.cluster import ClusterSpec
from tests.memory_plans import apply_override, cpu_run, engine
from tests.model_configs import shape

H100 = 79.11
NODE = ClusterSpec(1, 8)
QWEN3_8B = shape("Qwen3-8B")
MEASURED = Path(__file__).parents[1] / "benchmarks" / "fsdp_memory_cpu.json"


def disaggregated(tokens: int, checkpointing: bool = False):
    """sglang:d4 beside fsdp:d4 on one node: the actor's GPUs are the fullest."""
    options = TrainOptions(max_tokens_per_mb=tokens, gradient_checkpointing=checkpointing)
    return [
        engine("rollout", "sglang:d4", range(4), QWEN3_8B),
        engine("actor", "fsdp:d4", range(4, 8), QWEN3_8B, options),
    ]


def test_every_term_an_estimate_names_has_a_range_that_holds_the_estimate():
    needs = [
        estimate_training(QWEN3_8B, parse_backend("fsdp:d8"), TrainOptions()),
        estimate_training(QWEN3_8B, parse_backend("megatron:d2p2t2"), TrainOptions()),
        estimate_training(QWEN3_8B, parse_backend("fsdp:d8"), TrainOptions(), "cpu"),
        estimate_inference(QWEN3_8B, parse_backend("sglang:d8"), InferenceOptions(), H100),
        estimate_inference(QWEN3_8B, parse_backend("vllm:d8"), InferenceOptions(), None),
        estimate_inference(QWEN3_8B, parse_backend("vllm:d1"), InferenceOptions(), 20, "cpu"),
    ]
    for need in needs:
        for term in need.parts:
            error = term_error(need.phase, term, need.device)
            assert error.low <= 1 <= error.high and error.source
        low, high = need.peak_range()
        assert low <= need.peak <= high
    assert all(e.low <= 1 <= e.high for e in TABLE.values())


def test_the_tables_measured_ends_hold_the_cpu_measurements():
    """benchmarks/fsdp_memory_cpu.json (benchmarks/measure_fsdp_memory.py): the states, the
    stored activations (checkpointing off against on) and the logits (2048 tokens against 4096
    with checkpointing) of llama-170m, each within its term's range."""
    runs = {
        (r["tokens"], r["checkpointing"]): r
        for r in json.loads(MEASURED.read_text())
        if r["model"] == "llama-170m" and r["rank"] == 0
    }
    for run in runs.values():
        ratio = run["measured_mib"]["states"] / run["estimated_mib"]["states"]
        assert term_error("train", "optimizer", "cpu").high >= ratio
    off, on, longer = runs[(2048, False)], runs[(2048, True)], runs[(4096, True)]

    def grown(a: dict, b: dict, key: str, part: str = "") -> float:
        if part:
            return b["estimate_parts_mib"][part] - a["estimate_parts_mib"][part]
        return b["measured_mib"][key] - a["measured_mib"][key]

    stored = grown(on, off, "step") / grown(on, off, "", "activations")
    assert term_error("train", "activations", "cpu").high >= stored >= 1
    logits = (grown(on, longer, "step") - grown(on, longer, "", "activations") * stored) / grown(
        on, longer, "", "logits"
    )
    assert term_error("train", "logits", "cpu").high >= logits > 1  # the gradient beside them
    overhead = on["measured_mib"]["overhead"] / on["estimated_mib"]["overhead"]
    error = term_error("train", "overhead", "cpu")
    assert error.low <= overhead <= error.high


def test_a_plan_between_the_ends_is_warned_naming_the_term_not_refused():
    report = memory_report(disaggregated(10240), NODE, H100)
    assert report.fits is True and report.sure is False and not report.problems
    risk = report.risks[0]
    assert (risk.engine, risk.gpu, risk.term) == ("actor", 4, "activations")
    assert risk.low_gib is not None and risk.high_gib is not None
    assert risk.low_gib <= H100 < risk.high_gib
    assert "may not fit" in risk.message and "the range of actor's activations decides" in (
        risk.message
    )
    assert risk.line().endswith("to be sure it fits: actor.gradient_checkpointing=true")
    sure = memory_report(apply_override(disaggregated(10240), risk.fix), NODE, H100)
    assert sure.sure is True


def test_a_plan_is_refused_only_when_its_low_end_does_not_fit():
    refused = memory_report(disaggregated(16384), NODE, H100)
    assert refused.fits is False and refused.sure is False
    problem = refused.problems[0]
    assert problem.low_gib is not None and problem.low_gib > H100
    assert "even at the estimate's low end" in problem.message
    assert problem.fix == "actor.gradient_checkpointing=true"


def test_the_range_of_a_phase_adds_each_engines_ends_and_the_budget_holds_a_servers_terms():
    report = memory_report(disaggregated(10240), NODE, H100)
    actor = report.engines["actor"]
    low, high = actor.range_gib
    assert low < actor.per_gpu_gib < high
    assert sum(lo for lo, _ in actor.parts_range.values()) == pytest.approx(low, abs=0.05)
    # SGLang's fraction holds its weights and KV cache: they move together, exactly
    rollout = report.engines["rollout"]
    assert rollout.parts_range["kv_cache"] == (rollout.parts["kv_cache"],) * 2
    vllm = estimate_inference(QWEN3_8B, parse_backend("vllm:d1"), InferenceOptions(), H100)
    budget = sum(vllm.parts[t] for t in ("weights", "kv_cache", "activations", "cuda_graphs"))
    overhead = term_error("rollout", "overhead", "cuda")
    assert vllm.peak_range() == pytest.approx(
        (budget + overhead.low * vllm.parts["overhead"], budget + vllm.parts["overhead"])
    )
    group = report.groups[1]
    assert group.low_gib <= group.total_gib <= group.high_gib


def test_what_a_released_engine_keeps_has_its_range_too():
    engines = [
        engine("rollout", "sglang:d8", range(8), QWEN3_8B, InferenceOptions(release=True)),
        engine(
            "actor",
            "fsdp:d8",
            range(8),
            QWEN3_8B,
            TrainOptions(gradient_checkpointing=True, offload=Offload(True, True, True)),
        ),
    ]
    report = memory_report(engines, NODE, H100)
    kept = report.engines["actor"].released_gib  # its overhead, 1-2 GiB
    group = report.groups[0]
    rollout = report.engines["rollout"]
    assert group.phase == "rollout"
    assert group.high_gib == pytest.approx(rollout.range_gib[1] + kept, abs=0.02)
    assert group.low_gib == pytest.approx(rollout.range_gib[0] + 0.5 * kept, abs=0.02)


def test_the_report_says_the_range_in_the_plans_memory_section():
    data = json.loads(json.dumps(memory_report(disaggregated(10240), NODE, H100).to_dict()))
    assert data["fits"] is True and data["sure"] is False
    assert data["risks"][0]["term"] == "activations" and data["risks"][0]["fix"]
    row = data["gpus"][4]
    low, high = row["range_gib"]
    assert low <= row["total_gib"] <= high
    actor = data["engines"]["actor"]
    assert actor["range_gib"][0] < actor["per_gpu_gib"] < actor["range_gib"][1]
    assert set(actor["parts_range"]) == set(actor["parts"])


def test_a_cpu_host_has_its_range_of_the_measured_process_costs():
    cpu = ClusterSpec(1, 3, "cpu")
    engines = cpu_run()
    report = memory_report(engines, cpu, 21.8)
    assert report.host_range is not None and report.host_need_gib is not None
    low, high = report.host_range
    assert low < report.host_need_gib < high
    # vLLM's CPU server: 1979 MiB steady, 508 MiB more while its compiler runs (the table)
    assert high - report.host_need_gib >= 0.22 * 2.0 - 0.01
    between = memory_report(engines, cpu, report.host_need_gib + 0.3)
    assert between.fits is True and between.risks and between.risks[0].kind == "host"
