"""Per-GPU memory: one test per promise of launcher.memory.estimate (reference/memory.md,
docs/architecture.md §10)."""

from __future__ import annotations

import json

import pytest

from launcher.memory.estimate import (
    EngineInput,
    InferenceOptions,
    Offload,
    TrainOptions,
    margin_gib,
)
from launcher.memory.fix import memory_report
from launcher.memory.infer import estimate_inference, kv_bytes_per_token, sglang_auto_mem_fraction
from launcher.memory.parts import GIB, INFER_OVERHEAD_GIB
from launcher.memory.train import estimate_training, model_state_bytes
from launcher.spec.alloc import parse_backend
from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import ConfigError, LaunchError
from tests.memory_plans import apply_override, component, cpu_run, engine
from tests.model_configs import shape

H100 = 79.11
NODE = ClusterSpec(1, 8)
QWEN3_8B = shape("Qwen3-8B")
CHECKPOINTED = TrainOptions(gradient_checkpointing=True)


def states(need) -> float:
    return sum(need.parts[k] for k in ("weights", "grads", "optimizer") if k in need.parts)


def fits_after(engines, fix, cluster=NODE, capacity=H100) -> bool:
    return memory_report(apply_override(engines, fix), cluster, capacity).fits is True


def surely_fits_after(engines, fix, cluster=NODE, capacity=H100) -> bool:
    """It fits at the estimate's high end, what a fix aims at where it can."""
    return memory_report(apply_override(engines, fix), cluster, capacity).sure is True


# ------------------------------------------------------------------ training
def test_fsdp_shards_model_states_over_d_times_c_and_t_divides_again():
    per_gpu = {
        spec: states(estimate_training(QWEN3_8B, parse_backend(spec), TrainOptions()))
        for spec in ("fsdp:d8", "fsdp:d4c2", "fsdp:d2t4", "fsdp:d4")
    }
    assert per_gpu["fsdp:d8"] == pytest.approx(8 * QWEN3_8B.params.total / 8)
    assert per_gpu["fsdp:d4c2"] == pytest.approx(per_gpu["fsdp:d8"])
    assert per_gpu["fsdp:d2t4"] == pytest.approx(per_gpu["fsdp:d8"])
    assert per_gpu["fsdp:d4"] == pytest.approx(2 * per_gpu["fsdp:d8"])


def test_megatron_shards_experts_over_e_and_their_optimizer_over_expert_dp():
    s = shape("Qwen3-30B-A3B")
    e8 = model_state_bytes(s, parse_backend("megatron:(attn:d2t4|ffn:e8)"), TrainOptions())
    e4 = model_state_bytes(s, parse_backend("megatron:(attn:d2t4|ffn:d2e4)"), TrainOptions())
    routed = s.params.routed_experts
    # half the expert parallel on the same 8 GPUs: twice the expert weights on each GPU, but
    # their optimizer is sharded over an expert data-parallel group twice as large (edp 1 -> 2)
    assert e4["weights"] - e8["weights"] == pytest.approx(2 * routed / 8)
    assert e4["optimizer"] == pytest.approx(e8["optimizer"])


def test_offload_between_phases_frees_the_rollout_phase_but_not_the_train_peak():
    alloc = parse_backend("fsdp:d8")
    kept = estimate_training(QWEN3_8B, alloc, TrainOptions())
    moved = estimate_training(QWEN3_8B, alloc, TrainOptions(offload=Offload(True, True, True)))
    assert moved.peak == kept.peak
    assert moved.residue == moved.parts["overhead"] < kept.residue


def test_megatron_optimizer_cpu_offload_leaves_six_bytes_per_parameter_on_the_gpu():
    alloc = parse_backend("megatron:d8")
    need = estimate_training(QWEN3_8B, alloc, TrainOptions(optimizer_cpu_offload=True))
    assert states(need) == pytest.approx(6 * QWEN3_8B.params.total, rel=0.01)


def test_activations_grow_with_tokens_and_shrink_with_checkpointing_and_context_parallel():
    def acts(spec, **kw):
        return estimate_training(QWEN3_8B, parse_backend(spec), TrainOptions(**kw)).parts[
            "activations"
        ]

    assert acts("fsdp:d8", max_tokens_per_mb=16384) == pytest.approx(
        2 * acts("fsdp:d8", max_tokens_per_mb=8192)
    )
    assert acts("fsdp:d8", gradient_checkpointing=True) < acts("fsdp:d8") / 5
    assert acts("fsdp:d4c2", max_tokens_per_mb=16384) == pytest.approx(
        acts("fsdp:d8", max_tokens_per_mb=8192)
    )


def test_logits_take_six_bytes_per_entry_split_by_tensor_parallel():
    t1 = estimate_training(
        QWEN3_8B, parse_backend("fsdp:d8"), TrainOptions(max_tokens_per_mb=16384)
    )
    t2 = estimate_training(
        QWEN3_8B, parse_backend("fsdp:d4t2"), TrainOptions(max_tokens_per_mb=16384)
    )
    assert t1.parts["logits"] == 16384 * 151936 * 6  # 13.9 GiB: reference/memory.md §6
    assert t2.parts["logits"] == t1.parts["logits"] / 2


def test_a_forward_only_engine_keeps_weights_only():
    ref = estimate_training(QWEN3_8B, parse_backend("fsdp:d8"), TrainOptions(trainable=False))
    assert "grads" not in ref.parts and "optimizer" not in ref.parts
    assert ref.parts["weights"] == pytest.approx(2 * QWEN3_8B.params.total / 8)


def test_a_critic_swaps_lm_head_for_a_one_wide_value_head():
    alloc = parse_backend("fsdp:d8")
    actor = estimate_training(QWEN3_8B, alloc, TrainOptions())
    critic = estimate_training(QWEN3_8B, alloc, TrainOptions(value_head=True))
    head = (151936 - 1) * 4096
    assert states(actor) - states(critic) == pytest.approx(8 * head / 8)
    assert critic.parts["logits"] < actor.parts["logits"] / 10000


# ------------------------------------------------------------------ inference
def test_sglang_static_budget_is_its_fraction_of_the_card_less_its_context():
    need = estimate_inference(
        QWEN3_8B, parse_backend("sglang:d1"), InferenceOptions(mem_fraction=0.8), H100
    )
    static = need.parts["weights"] + need.parts["kv_cache"]
    assert static == pytest.approx(0.8 * (H100 - INFER_OVERHEAD_GIB) * GIB)
    per_token = 2 * 36 * 8 * 128 * 2  # 144 KiB: reference/memory.md §6
    assert need.kv_tokens == int(need.parts["kv_cache"] // per_token)


def test_sglang_default_fraction_keeps_sglangs_reserve_of_at_least_ten_gib_on_big_cards():
    h100 = sglang_auto_mem_fraction(H100)
    assert 0.8 < h100 <= 1 - 10 / H100
    assert sglang_auto_mem_fraction(H100, tp=8) < h100
    assert sglang_auto_mem_fraction(139.81) > h100  # the same reserve on a bigger card
    assert sglang_auto_mem_fraction(H100, chunked_prefill=32768) < h100
    assert sglang_auto_mem_fraction(22.05) < sglang_auto_mem_fraction(39.39) < h100


def test_vllm_claims_its_utilization_of_the_whole_card():
    need = estimate_inference(QWEN3_8B, parse_backend("vllm:d1"), InferenceOptions(), H100)
    assert need.peak == pytest.approx((0.9 * H100 + INFER_OVERHEAD_GIB) * GIB)
    assert need.mem_fraction == 0.9


def test_gqa_kv_heads_are_replicated_when_tensor_parallel_exceeds_them():
    s = shape("Qwen3-30B-A3B")  # 4 kv heads
    per = {t: kv_bytes_per_token(s, parse_backend(f"sglang:t{t}"), 2) for t in (1, 2, 4, 8)}
    assert per[1] == 2 * 48 * 4 * 128 * 2
    assert per[2] == per[1] / 2 and per[4] == per[8] == per[1] / 4


def test_mla_kv_cache_is_one_latent_per_token_on_every_tensor_parallel_rank():
    s = shape("DeepSeek-V3")
    for t in (1, 8):
        assert kv_bytes_per_token(s, parse_backend(f"sglang:t{t}"), 2) == (512 + 64) * 61 * 2


def test_a_kv_cache_smaller_than_one_context_fails_with_the_fix_that_fits():
    engines = [
        engine("rollout", "sglang:d1", [0], QWEN3_8B, InferenceOptions(context_length=131072))
    ]
    one = ClusterSpec(1, 1)
    report = memory_report(engines, one, 39.39)  # A100 40GB
    assert report.fits is False
    problem = report.problems[0]
    assert problem.kind == "kv" and problem.engine == "rollout" and "131072" in problem.message
    assert problem.fix is not None and fits_after(engines, problem.fix, one, 39.39)
    assert problem.fix.split("=")[0] in (
        "rollout.sglang.mem_fraction_static",
        "rollout.sglang.context_length",
    )


def test_weights_larger_than_the_static_budget_are_a_failure():
    engines = [engine("rollout", "sglang:d1", [0], shape("Qwen2.5-72B"))]
    report = memory_report(engines, ClusterSpec(1, 1), H100)
    assert report.fits is False and report.problems[0].kind == "weights"


# ------------------------------------------------------------------ shared GPUs and phases
def collocated(release: bool, offload: bool, **train):
    return [
        engine(
            "rollout",
            "sglang:d8",
            range(8),
            QWEN3_8B,
            InferenceOptions(mem_fraction=0.8, release=release),
        ),
        engine(
            "actor",
            "fsdp:d8",
            range(8),
            QWEN3_8B,
            TrainOptions(
                gradient_checkpointing=True,
                max_tokens_per_mb=16384,
                offload=Offload(offload, offload, offload),
                **train,
            ),
        ),
    ]


def test_a_collocated_gpu_needs_the_larger_phase_when_engines_release():
    report = memory_report(collocated(True, True), NODE, H100)
    rollout, actor = report.engines["rollout"], report.engines["actor"]
    group = report.groups[0]
    assert group.phases["rollout"] == pytest.approx(
        rollout.per_gpu_gib + actor.released_gib, abs=0.02
    )
    assert group.phases["train"] == pytest.approx(
        actor.per_gpu_gib + rollout.released_gib, abs=0.02
    )
    assert group.total_gib == max(group.phases.values())
    assert report.fits is True


def test_engines_that_share_a_gpu_without_release_are_summed():
    report = memory_report(collocated(False, False), NODE, H100)
    rollout, actor = report.engines["rollout"], report.engines["actor"]
    assert report.groups[0].phases["train"] == pytest.approx(
        rollout.per_gpu_gib + actor.per_gpu_gib, abs=0.02
    )


def test_actor_and_ref_on_the_same_gpus_take_turns():
    ref_opts = TrainOptions(trainable=False, max_tokens_per_mb=16384)
    act_opts = TrainOptions(gradient_checkpointing=True, max_tokens_per_mb=16384)
    engines = [
        engine("actor", "fsdp:d8", range(8), QWEN3_8B, act_opts),
        engine("ref", "fsdp:d8", range(8), QWEN3_8B, ref_opts),
    ]
    report = memory_report(engines, NODE, H100)
    actor, ref = report.engines["actor"], report.engines["ref"]
    assert report.groups[0].total_gib == pytest.approx(
        max(actor.per_gpu_gib + ref.released_gib, ref.per_gpu_gib + actor.released_gib), abs=0.02
    )
    assert report.groups[0].total_gib < actor.per_gpu_gib + ref.per_gpu_gib


def test_margin_is_five_percent_of_the_card_or_three_gib_and_five_percent_of_a_host():
    assert margin_gib(H100) == 3.96
    assert margin_gib(39.39) == 3.0
    assert margin_gib(139.81) == 6.99
    assert margin_gib(21.82, "cpu") == 1.09


# ------------------------------------------------------------------ the report
def test_report_serialises_to_the_plans_memory_shape():
    cluster = ClusterSpec(2, 8)
    engines = [
        engine("rollout", "sglang:d4t2", range(8), QWEN3_8B),
        engine("actor", "fsdp:d8", range(8, 16), QWEN3_8B, CHECKPOINTED),
    ]
    data = json.loads(json.dumps(memory_report(engines, cluster, H100).to_dict()))
    assert {"gpu_capacity_gib", "fits", "gpus", "engines"} <= set(data)
    assert [g["gpu"] for g in data["gpus"]] == list(range(16))
    assert [g["node"] for g in data["gpus"]] == [0] * 8 + [1] * 8
    assert set(data["gpus"][0]["engines"]) == {"rollout"}
    assert set(data["gpus"][8]["engines"]) == {"actor"}
    for name in ("rollout", "actor"):
        entry = data["engines"][name]
        assert entry["per_gpu_gib"] == pytest.approx(sum(entry["parts"].values()), abs=0.05)
    assert data["fits"] is True and data["gpu_capacity_gib"] == H100


def test_a_model_without_config_json_leaves_memory_unknown_with_a_warning():
    engines = [
        engine("rollout", "sglang:d8", range(8), None),
        engine("actor", "fsdp:d8", range(8), QWEN3_8B, CHECKPOINTED),
    ]
    report = memory_report(engines, NODE, H100)
    assert report.fits is None and report.error() is None
    assert any("rollout" in w and "config.json" in w for w in report.warnings)
    assert "actor" in report.engines and "rollout" not in report.engines


def test_unknown_gpu_memory_still_gives_every_estimate_but_no_verdict():
    report = memory_report(collocated(True, True), NODE, None)
    assert report.fits is None and report.capacity_gib is None
    assert report.engines["actor"].per_gpu_gib > 0 and report.engines["rollout"].kv_tokens is None
    assert any("gpu_memory_gib" in w for w in report.warnings)


def test_a_plan_that_does_not_fit_names_engine_gpu_need_have_and_the_smallest_fix():
    engines = collocated(False, False)
    report = memory_report(engines, NODE, H100)
    problem = report.problems[0]
    assert (problem.kind, problem.engine, problem.gpu, problem.node) == ("train", "actor", 0, 0)
    assert problem.need_gib > problem.have_gib == H100
    assert problem.fix == "rollout.offload=true"
    text = report.error()
    assert "GPU 0" in text and "actor (fsdp:d8)" in text and f"> {H100} GiB" in text
    assert text.endswith("smallest change that fits: rollout.offload=true")
    assert fits_after(engines, problem.fix)


def test_the_fix_for_a_trainer_is_the_largest_max_tokens_per_mb_that_fits():
    """Refused at the estimate's low end (196608 tokens: 131072 now only may not fit); the
    fix is the largest micro-batch that surely fits."""
    engines = [
        engine(
            "actor",
            "fsdp:d8",
            range(8),
            QWEN3_8B,
            TrainOptions(gradient_checkpointing=True, max_tokens_per_mb=196608),
        )
    ]
    fix = memory_report(engines, NODE, H100).problems[0].fix
    assert fix is not None and fix.startswith("actor.mb_spec.max_tokens_per_mb=")
    tokens = int(fix.split("=")[1])
    assert tokens % 1024 == 0 and surely_fits_after(engines, fix)
    assert not surely_fits_after(engines, f"actor.mb_spec.max_tokens_per_mb={tokens + 1024}")


def test_the_fix_turns_on_gradient_checkpointing_before_shrinking_micro_batches():
    engines = [
        engine("actor", "fsdp:d8", range(8), QWEN3_8B, TrainOptions(max_tokens_per_mb=32768))
    ]
    assert memory_report(engines, NODE, H100).problems[0].fix == "actor.gradient_checkpointing=true"


def test_the_fix_for_a_crowded_rollout_phase_is_the_largest_fraction_that_fits():
    engines = [
        engine(
            "rollout",
            "sglang:d8",
            range(8),
            QWEN3_8B,
            InferenceOptions(mem_fraction=0.95, release=True),
        ),
        engine(
            "actor",
            "fsdp:d8",
            range(8),
            QWEN3_8B,
            TrainOptions(gradient_checkpointing=True, offload=Offload(True, True, True)),
        ),
    ]
    problem = memory_report(engines, NODE, H100).problems[0]
    assert problem.kind == "rollout" and problem.fix is not None
    key, value = problem.fix.split("=")
    assert key == "rollout.sglang.mem_fraction_static" and surely_fits_after(engines, problem.fix)
    assert not surely_fits_after(engines, f"{key}={float(value) + 0.01:.2f}")


def test_the_cpu_run_is_checked_against_the_hosts_memory():
    cpu = ClusterSpec(1, 3, "cpu")
    engines = cpu_run()
    roomy, tight = memory_report(engines, cpu, 21.8), memory_report(engines, cpu, 4.0)
    assert roomy.fits is True and 3.5 < roomy.host_need_gib < 5
    assert tight.fits is False and tight.problems[0].kind == "host"
    assert "this machine's memory" in tight.error()


@pytest.mark.timeout(60)  # unbounded took minutes; how long it takes is bench_memory.py's
def test_options_out_of_range_are_clear_errors():
    with pytest.raises(ConfigError, match="max_tokens_per_mb=1000000000000"):
        TrainOptions(max_tokens_per_mb=10**12)
    with pytest.raises(ConfigError, match="memory fraction 1.5"):
        InferenceOptions(mem_fraction=1.5)
    with pytest.raises(ConfigError, match="context_length"):
        InferenceOptions(context_length=10**30)
    with pytest.raises(ConfigError, match="optimizer='lion'"):
        TrainOptions(optimizer="lion")


def test_options_must_match_the_kind_of_engine():
    with pytest.raises(LaunchError, match="actor .* takes TrainOptions"):
        EngineInput(component("actor", "fsdp:d8", range(8)), QWEN3_8B, InferenceOptions())


def test_the_training_estimate_is_within_15_percent_of_measured_fsdp2_steps_on_cpu():
    """benchmarks/fsdp_memory_cpu.json: peak RSS of real FSDP2 steps (gloo, 2 ranks, tiny
    Llama and a 170M one, checkpointing off and on; benchmarks/measure_fsdp_memory.py), held
    against today's estimate of the same runs."""
    from pathlib import Path

    from benchmarks.measure_fsdp_memory import compare

    saved = json.loads(
        (Path(__file__).parents[1] / "benchmarks" / "fsdp_memory_cpu.json").read_text()
    )
    assert {(r["model"], r["checkpointing"]) for r in saved} >= {
        ("tiny", False),
        ("tiny", True),
        ("llama-170m", False),
        ("llama-170m", True),
    }
    for old in saved:
        row = compare(old["model"], old["config"], old["spec"], [old["raw"]])[0]
        measured, estimated = row["measured_mib"], row["estimated_mib"]
        assert estimated["peak"] == pytest.approx(measured["peak"], rel=0.15), row["model"]
        if row["model"] != "tiny":  # the tiny model's states are smaller than RSS noise
            assert estimated["states"] == pytest.approx(measured["states"], rel=0.15)
