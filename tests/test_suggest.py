"""plan --suggest: layouts that fit, ranked by the stated proxy, fast, as real overrides."""

from __future__ import annotations

import dataclasses
import math

import pytest

from launcher.backends.memory_inputs import plan_memory
from launcher.cli.launch import prepare
from launcher.memory.estimate import InferenceOptions, TrainOptions, estimate
from launcher.memory.suggest import (
    COLLOCATED_SHARE,
    KV_USEFUL_TOKENS,
    SuggestOptions,
    suggest,
    suggest_within,
)
from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import LaunchError
from tests.model_configs import shape

H100 = 79.11
MB_KEY, GC_KEY = "actor.mb_spec.max_tokens_per_mb", "actor.gradient_checkpointing"


def planned(suggestion, model, nodes: int, per_node: int = 8, given: tuple[str, ...] = ()):
    """The plan the suggestion's overrides describe (after the user's own, `given`), composed
    and built as a launch does (the model is a published config, not on this machine), and its
    memory checked the same way."""
    overrides = [
        *given,
        *suggestion.overrides,
        f"cluster.num_nodes={nodes}",
        f"cluster.gpus_per_node={per_node}",
        "cluster.device=cuda",
        "launcher.check_memory=off",
    ]
    prep = prepare(overrides, to_run=False)
    return plan_memory(prep.plan, prep.planned.engines, model, H100), prep.plan


@pytest.mark.parametrize("name,nodes", [("Qwen3-8B", 1), ("Qwen2.5-72B", 2), ("Qwen3-30B-A3B", 2)])
def test_every_suggestion_fits_when_planned_from_its_overrides(name, nodes):
    model = shape(name)
    found = suggest(model, ClusterSpec(nodes, 8), H100)
    assert found
    for s in found:
        report, plan = planned(s, model, nodes)
        assert report.fits is True, (s.command(), report.error())
        assert plan.mode == s.mode
        assert str(plan.components["rollout"].alloc) == str(s.server)


def test_suggestions_are_ranked_by_the_stated_throughput_proxy():
    model = shape("Qwen3-8B")
    found = suggest(model, ClusterSpec(2, 8), H100, SuggestOptions(top=8))
    scores = [s.score for s in found]
    assert scores == sorted(scores, reverse=True)
    options = SuggestOptions()
    for s in found:
        infer = dataclasses.replace(options.infer, release=s.mode == "collocated")
        per_instance = estimate(model, s.server, infer, H100, "cuda").kv_tokens
        generation = s.server.dp * min(per_instance, KV_USEFUL_TOKENS)
        share = COLLOCATED_SHARE if s.mode == "collocated" else 1.0
        assert s.score == pytest.approx(
            math.sqrt(generation * s.max_tokens_per_mb * s.trainer.dp) * share
        )


def test_a_layout_that_may_not_fit_ranks_below_every_one_that_surely_does():
    """Qwen3-8B on 4 GPUs, every micro-batch at least a 32768-token context: some layouts fit
    only at the estimate's low end; they score higher, and rank below all that surely fit."""
    model = shape("Qwen3-8B")
    options = SuggestOptions(
        top=50,
        infer=InferenceOptions(context_length=32768),
        train=TrainOptions(max_tokens_per_mb=32768),
    )
    found = suggest_within(model, ClusterSpec(1, 4), H100, options).found
    sure = [s.sure for s in found]
    assert True in sure and False in sure
    assert sure == sorted(sure, reverse=True)  # every sure one first
    best_sure = max(s.score for s in found if s.sure)
    assert max(s.score for s in found if not s.sure) > best_sure
    given = ("actor.mb_spec.max_tokens_per_mb=32768",)  # what the user asked, kept
    for s in (found[0], next(s for s in found if not s.sure)):
        report, _ = planned(s, model, 1, 4, given)
        assert report.fits is True and report.sure is s.sure, s.command()
    assert found[-1].to_dict()["sure"] is False


def test_collocated_suggestions_turn_offload_on_both_sides():
    found = suggest(shape("Qwen3-8B"), ClusterSpec(1, 8), H100)
    together = [s for s in found if s.mode == "collocated"]
    assert together
    for s in together:
        assert {
            "rollout.offload=true",
            "actor.offload.weight=true",
            "actor.offload.optimizer=true",
            "actor.offload.grad=true",
        } <= set(s.overrides)


def test_the_micro_batch_shrinks_only_when_the_requested_one_does_not_fit():
    small = suggest(shape("Qwen3-8B"), ClusterSpec(1, 8), H100)[0]
    assert small.max_tokens_per_mb == 10240 and not any(
        o.startswith(MB_KEY) for o in small.overrides
    )
    big = SuggestOptions(train=TrainOptions(gradient_checkpointing=True, max_tokens_per_mb=131072))
    for s in suggest(shape("Qwen2.5-72B"), ClusterSpec(1, 8), H100, big):
        assert s.max_tokens_per_mb < 131072 and f"{MB_KEY}={s.max_tokens_per_mb}" in s.overrides


def test_checkpointing_is_turned_on_in_the_overrides_when_that_is_what_fits():
    first = suggest(shape("Qwen3-8B"), ClusterSpec(1, 8), H100)[0]
    assert first.checkpointing and f"{GC_KEY}=true" in first.overrides
    asked = SuggestOptions(train=TrainOptions(gradient_checkpointing=True))
    assert not any(
        o.startswith(GC_KEY)
        for s in suggest(shape("Qwen3-8B"), ClusterSpec(1, 8), H100, asked)
        for o in s.overrides
    )


def test_suggestions_keep_to_the_backends_asked_for():
    options = SuggestOptions(server_backends=("sglang",), trainer_backends=("megatron",))
    found = suggest(shape("Qwen3-32B"), ClusterSpec(2, 8), H100, options)
    assert found and all(
        s.server.backend == "sglang" and s.trainer.backend == "megatron" for s in found
    )


def test_a_model_too_large_for_the_cluster_gets_no_suggestion():
    assert suggest(shape("DeepSeek-V3"), ClusterSpec(8, 8), H100) == []


def test_suggest_without_gpu_memory_says_which_key_to_set():
    with pytest.raises(LaunchError, match="cluster.gpu_memory_gib"):
        suggest(shape("Qwen3-8B"), ClusterSpec(1, 8), None)


@pytest.mark.timeout(120)  # every split tried took minutes at 16384 nodes
@pytest.mark.parametrize("nodes", [1024, 4096, 16384])
def test_many_nodes_are_searched_within_the_split_limit(nodes):
    """Every node split was tried: 3 s at 1024 nodes, minutes at 16384; now at most
    MAX_SPLITS of them, spread evenly (the seconds are bench_memory.py's)."""
    search = suggest_within(shape("Qwen3-8B"), ClusterSpec(nodes, 8), H100)
    assert search.found and not search.cut


def test_a_search_its_budget_cuts_says_so_and_keeps_what_it_found():
    search = suggest_within(
        shape("Qwen3-8B"), ClusterSpec(64, 8), H100, SuggestOptions(budget_s=0.0)
    )
    assert search.cut and search.found == []


def test_a_cut_search_is_a_note_on_the_command_line(tmp_path, monkeypatch, capsys):
    import json

    from launcher.cli.main import run_plan
    from launcher.memory import suggest as search
    from tests.model_configs import MODELS

    (tmp_path / "config.json").write_text(json.dumps(MODELS["Qwen3-8B"]["config"]))
    whole = search.suggest_within
    monkeypatch.setattr(
        search,
        "suggest_within",
        lambda shape, cluster, gib, options: whole(
            shape, cluster, gib, dataclasses.replace(options, budget_s=0.0)
        ),
    )
    assert (
        run_plan(
            [
                "--suggest",
                "cluster=gpu8",
                "cluster.num_nodes=4",
                "cluster.gpu_type=h100",
                f"model_path={tmp_path}",
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    assert "note: --suggest searched for its 0 s budget and stopped" in out.err
    assert "none fits" in out.out


def test_a_given_layout_too_big_for_the_cluster_is_a_note_and_the_search_still_runs(
    tmp_path, capsys
):
    """--suggest replaces the layout, so the one given need not fit (AReaL's examples give
    sglang:d1+fsdp:d1 on one GPU): one note, then the layouts that fit."""
    import json

    from launcher.cli.main import run_plan
    from tests.model_configs import MODELS

    (tmp_path / "config.json").write_text(json.dumps(MODELS["Qwen3-8B"]["config"]))
    assert (
        run_plan(
            [
                "--suggest",
                "rollout.backend=vllm:d2",
                "actor.backend=fsdp:d2",
                "cluster.device=cuda",
                "cluster.gpus_per_node=2",
                "cluster.gpu_type=h100",
                f"model_path={tmp_path}",
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    assert "note: --suggest: the layout given does not fit (rollout vllm:d2 needs 2 GPUs" in out.err
    assert "layout(s) that fit 1 node(s) x 2 GPUs" in out.out
    assert "cluster.component_placement.rollout=all" in out.out  # a collocated one fits
