"""The legacy `allocation_mode` means what AReaL means: the strings of AReaL's own allocation-mode
tests (inclusionAI/AReaL areal/tests/test_allocation_mode.py, TEST_CASES and
VALIDATION_ERROR_CASES), planned end to end. The string names the engines of the run:
`sglang:d4p2t2` is an inference-only run, `fsdp:d4` a training-only one."""

from __future__ import annotations

import pytest

from launcher.cli.launch import prepare
from launcher.spec.errors import LaunchError

HYBRID = "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)"
# AReaL's input -> the engines it runs (every other engine is off)
PLANNED = {
    "sglang:d4p2t2": {"rollout": "sglang:d4p2t2"},
    "sglang:d2+fsdp:d4": {"rollout": "sglang:d2", "actor": "fsdp:d4"},
    "sglang:d4p2t2+megatron:(attn:d2p2t2c2|ffn:d2p2t2e2)": {
        "rollout": "sglang:d4p2t2",
        "actor": "megatron:(attn:d2p2t2c2|ffn:d2p2t2e2)",
    },
    "fsdp:d4": {"actor": "fsdp:d4"},
    "megatron:d2p2t1": {"actor": "megatron:d2p2"},
    "vllm:d2t4+megatron:d2p2t1": {"rollout": "vllm:d2t4", "actor": "megatron:d2p2"},
    "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)": {"actor": HYBRID},
    "sglang:d4p1t2+megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)": {
        "rollout": "sglang:d4t2",
        "actor": HYBRID,
    },
    "sglang[rollout]:d2+fsdp[actor]:d4": {"rollout": "sglang:d2", "actor": "fsdp:d4"},
    "sglang[rollout]:d2+fsdp[actor]:d4+fsdp[critic]:d4": {
        "rollout": "sglang:d2",
        "actor": "fsdp:d4",
        "critic": "fsdp:d4",
    },
    "sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4": {
        "rollout": "sglang:d2",
        "actor": "fsdp:d4",
        "critic": "fsdp:d4",
    },
    "sglang:d4p1t1+eval": {"rollout": "sglang:d4"},
    # a reward model beside the actor (its own name: a component of its kind), and AReaL's
    # several policies (multi_agent_allocation's string)
    "sglang[rollout]:d4+fsdp[actor]:d4|megatron[critic]:d4|fsdp[ref]:t2d2|fsdp[rew]:c4": {
        "rollout": "sglang:d4",
        "actor": "fsdp:d4",
        "critic": "megatron:d4",
        "ref": "fsdp:d2t2",
        "rew": "fsdp:c4",
    },
    "vllm[rollout1]:d2t2 + fsdp[actor1]:d4 + vllm[rollout2]:d4 + fsdp[actor2]:d4": {
        "rollout1": "vllm:d2t2",
        "actor1": "fsdp:d4",
        "rollout2": "vllm:d4",
        "actor2": "fsdp:d4",
    },
}
# AReaL's own error cases, and its cases whose names are no engines of ours (a reward model
# `rew`, several actors): each is one clear error here
REFUSED = {
    "fsdp:d4p2": "fsdp does not take 'p'",
    "fsdp:d2e2": "fsdp does not take 'e'",
    "sglang:d2+fsdp[actor]:d4+fsdp:d4": "every part needs a name",
    "sglang[actor]:d2+fsdp[actor]:d4": "actor needs a training backend",
    "fsdp:d4|fsdp:d4": "a second training part needs a name",
    "d4+d4": "a second training part needs a name",
    "sglang:d4+d4+d4": "every part needs a name",
    "sglang:d4+[actor]:d4+d4": "every part needs a name",
    "sglang[rollout]:d4+fsdp[actor]:d4|megatron[critic]:d4|fsdp[env]:t2d2": (
        "'env' cannot name an engine"
    ),
}
# AReaL's strings without a backend (it implies fsdp, or megatron for p, e, attn/ffn): the
# rule is that every allocation string names its backend, so each is refused with the string
# to write instead (issue 19)
BARE = {
    "d2p2t1": "megatron:d2p2t1",
    "d2p2t4e2c4": "megatron:d2p2t4e2c4",
    "attn:d4p2t2c2|ffn:d2p2t4e2": "megatron:attn:d4p2t2c2|ffn:d2p2t4e2",
    "(attn:d4p2t2c2|ffn:d2p2t4e2)": "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)",
    "d4": "fsdp:d4",
    "sglang:d4+d4": "sglang:d4+fsdp:d4",
    "vllm:d4+[actor]:d4": "vllm:d4+fsdp[actor]:d4",
    "sglang[rollout]:d4+[actor]:d4+[critic]:d4": (
        "sglang[rollout]:d4+fsdp[actor]:d4+fsdp[critic]:d4"
    ),
    "[actor]:d4": "fsdp[actor]:d4",
}
REFUSED.update(
    {
        "megatron:(attn:d2p2t1c4|ffn:d2p4t1e2)": "ffn p4 differs from attn p2",
        "megatron:(attn:d4p2t1c1|ffn:d2p2t2e2)": "differs from attn world size",
        "fsdp[actor]:d4+fsdp[critic]:d4+d4": "every part needs a name",
    }
)
BIG = ["cluster=gpu8", "cluster.num_nodes=16"]  # room for AReaL's largest case (64 GPUs)
POLICIES = "vllm[rollout1]:d2t2 + fsdp[actor1]:d4 + vllm[rollout2]:d4 + fsdp[actor2]:d4"


def planned(mode: str):
    return prepare([f"allocation_mode='{mode}'", *BIG], to_run=False).plan


@pytest.mark.parametrize("mode", sorted(PLANNED))
def test_areals_allocation_modes_plan_the_engines_they_name(mode):
    plan = planned(mode)
    assert {n: str(c.alloc) for n, c in plan.components.items()} == PLANNED[mode]
    deprecation = next(w for w in plan.warnings if w.startswith("allocation_mode is deprecated"))
    for name in ("rollout", "actor"):  # the hint gives the full equivalent, `=none` included
        spec = PLANNED[mode].get(name)
        assert (f"{name}.backend={spec}" if spec else f"{name}=none") in deprecation


def test_bar_shares_the_gpus_of_the_part_before_it():
    plan = planned("sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4")
    comps = plan.components
    assert comps["critic"].gpus == comps["actor"].gpus
    assert not set(comps["rollout"].gpus) & set(comps["actor"].gpus)


def test_rollout_colocated_with_a_trainer_shares_its_gpus():
    plan = planned("sglang:d4|fsdp:d4")
    assert plan.mode == "collocated"


def test_an_evaluation_part_takes_no_gpus_and_is_explained():
    plan = planned("sglang:d4p1t1+eval")
    assert any("'+eval' is an evaluation client without GPUs" in w for w in plan.warnings)


def test_a_field_set_on_the_command_line_wins_over_allocation_mode():
    prep = prepare(
        ["allocation_mode=sglang:d2+fsdp:d4", "actor.backend=fsdp:d2", *BIG], to_run=False
    )
    assert str(prep.plan.components["actor"].alloc) == "fsdp:d2"


@pytest.mark.parametrize("mode", sorted(REFUSED))
def test_areals_invalid_modes_are_one_clear_error(mode):
    with pytest.raises(LaunchError) as info:
        planned(mode)
    assert REFUSED[mode] in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("key", ["allocation_mode", "multi_agent_allocation"])
def test_several_policies_each_push_to_their_own_servers(key):
    plan = prepare([f"{key}='{POLICIES}'", *BIG], to_run=False).plan
    syncs = {(w.src, w.dst): w for w in plan.weight_sync}
    assert set(syncs) == {("actor1", "rollout1"), ("actor2", "rollout2")}
    gpus = {n: c.gpus for n, c in plan.components.items()}
    assert gpus == {
        "rollout1": (0, 1, 2, 3),
        "actor1": (4, 5, 6, 7),
        "rollout2": (8, 9, 10, 11),
        "actor2": (12, 13, 14, 15),
    }
    assert {p.rank for p in syncs[("actor2", "rollout2")].pairs} == {0, 1, 2, 3}
    deprecation = next(w for w in plan.warnings if "is deprecated" in w)
    assert "+components.actor2.feeds=rollout2" in deprecation


@pytest.mark.parametrize("mode", sorted(BARE))
def test_bare_dims_are_refused_with_the_string_to_write(mode):
    with pytest.raises(LaunchError) as info:
        planned(mode)
    assert "a backend prefix is required" in str(info.value)
    assert f"write allocation_mode={BARE[mode]}" in str(info.value)
    assert {n: str(c.alloc) for n, c in planned(BARE[mode]).components.items()}  # it plans


def test_every_bare_form_written_out_plans_as_areal_meant_it():
    """The fixes plan the engines AReaL's implied backends gave."""
    assert {n: str(c.alloc) for n, c in planned(BARE["d2p2t1"]).components.items()} == {
        "actor": "megatron:d2p2"
    }
    assert {n: str(c.alloc) for n, c in planned(BARE["sglang:d4+d4"]).components.items()} == {
        "rollout": "sglang:d4",
        "actor": "fsdp:d4",
    }
