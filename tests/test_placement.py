"""Placement: which GPUs each engine gets, the mode, and the errors and warnings users see."""

import itertools

import pytest
from hypothesis import given, settings
from layouts import layouts

from launcher.planning.placement import Rules, parse_placement_keys, place, slots_needed
from launcher.spec.alloc import ModelAllocation as M
from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import PlacementError
from launcher.spec.gpuset import format_gpu_set

ONE_BY_EIGHT, TWO_BY_EIGHT = ClusterSpec(1, 8), ClusterSpec(2, 8)
ACTIVE = ("rollout", "actor", "critic", "ref", "teacher")


def ranges(placement):
    return {name: format_gpu_set(gpus) for name, gpus in placement.gpus.items()}


# ----------------------------------------------------------------------------- keys
def test_comma_key_gives_every_named_engine_the_same_set():
    keys = parse_placement_keys({"actor,rollout": "all", "ref": 3, "critic": None}, ACTIVE)
    assert keys == {"actor": "all", "rollout": "all", "ref": "3"}


def test_unknown_engine_in_a_key_is_an_error_listing_the_engines():
    with pytest.raises(
        PlacementError, match=r"unknown component 'actr' \(components: rollout, actor"
    ):
        parse_placement_keys({"actr,rollout": "all"}, ACTIVE)


def test_engine_placed_twice_is_an_error_naming_both_keys():
    with pytest.raises(
        PlacementError, match=r"rollout is placed twice, by 'actor,rollout' and 'rollout'"
    ):
        parse_placement_keys({"actor,rollout": "0-7", "rollout": "8-15"}, ACTIVE)


def test_placement_for_an_engine_that_is_off_is_an_error():
    with pytest.raises(PlacementError, match=r"critic is not enabled \(set critic.backend"):
        parse_placement_keys({"critic": "0-3"}, ("rollout", "actor"))


def test_placement_value_that_is_a_list_asks_for_quotes():
    with pytest.raises(PlacementError, match=r"cluster.component_placement.actor='0-2,5,7'"):
        parse_placement_keys({"actor": [0, 1]}, ACTIVE)


# ----------------------------------------------------------------------------- defaults
def test_default_puts_rollout_first_then_actor():
    p = place({"rollout": M("sglang", dp=2, tp=2), "actor": M("fsdp", dp=4)}, ONE_BY_EIGHT, {})
    assert ranges(p) == {"rollout": "0-3", "actor": "4-7"}


def test_default_ref_shares_actor_gpus_when_world_sizes_match():
    p = place(
        {"rollout": M("vllm", dp=4), "actor": M("fsdp", dp=4), "ref": M("fsdp", dp=4)},
        ONE_BY_EIGHT,
        {},
    )
    assert p.gpus["ref"] == p.gpus["actor"] == (4, 5, 6, 7)


def test_default_critic_of_another_size_takes_the_next_free_gpus():
    p = place(
        {"rollout": M("vllm", dp=2), "actor": M("fsdp", dp=4), "critic": M("fsdp", dp=2)},
        ONE_BY_EIGHT,
        {},
    )
    assert ranges(p) == {"rollout": "0-1", "actor": "2-5", "critic": "6-7"}


def test_default_engines_skip_gpus_placed_explicitly():
    p = place(
        {"rollout": M("vllm", dp=2), "actor": M("fsdp", dp=4)}, ONE_BY_EIGHT, {"actor": "0-3"}
    )
    assert ranges(p) == {"rollout": "4-5", "actor": "0-3"}


# ----------------------------------------------------------------------------- modes (seeds)
def test_all_engines_on_all_gpus_is_collocated():
    p = place(
        {"rollout": M("sglang", dp=8, tp=2), "actor": M("fsdp", dp=16)},
        TWO_BY_EIGHT,
        {"actor,rollout": "all"},
        {"rollout": True, "actor": True},
    )
    assert p.mode == "collocated" and ranges(p) == {"rollout": "0-15", "actor": "0-15"}
    assert p.warnings == ()


def test_pairwise_disjoint_sets_are_disaggregated():
    p = place(
        {"rollout": M("sglang", dp=5, tp=2), "actor": M("fsdp", dp=4), "ref": M("fsdp", dp=2)},
        TWO_BY_EIGHT,
        {"rollout": "0-9", "ref": "10-11", "actor": "12-15"},
    )
    assert p.mode == "disaggregated"
    assert ranges(p) == {"rollout": "0-9", "actor": "12-15", "ref": "10-11"}


def test_partly_overlapping_sets_are_hybrid():
    p = place(
        {"rollout": M("sglang", dp=2, tp=2), "actor": M("fsdp", dp=8), "ref": M("fsdp", dp=4)},
        ONE_BY_EIGHT,
        {"actor": "0-7", "rollout": "4-7", "ref": "0-3"},
    )
    assert p.mode == "hybrid"


def test_engines_placed_together_count_as_one_set_for_the_mode():
    p = place(
        {"rollout": M("vllm", dp=4), "actor": M("fsdp", dp=4), "ref": M("fsdp", dp=4)},
        ONE_BY_EIGHT,
        {},
    )
    assert p.mode == "disaggregated"  # rollout 0-3 | actor+ref 4-7


def test_a_single_engine_is_disaggregated():
    assert place({"actor": M("fsdp", dp=8)}, ONE_BY_EIGHT, {}).mode == "disaggregated"


# ----------------------------------------------------------------------------- errors
def test_too_few_gpus_names_each_need_and_the_supply():
    with pytest.raises(PlacementError) as err:
        place({"rollout": M("sglang", dp=4, tp=2), "actor": M("fsdp", dp=8)}, ONE_BY_EIGHT, {})
    assert str(err.value) == (
        "rollout sglang:d4t2 needs 8 GPUs and actor fsdp:d8 needs 8: 16 in all, but the "
        "cluster has 8 (1 node x 8) (set cluster.num_nodes=2, or use smaller backends)"
    )


def test_too_few_gpus_counts_explicit_placements_and_not_shared_ones():
    with pytest.raises(PlacementError) as err:
        place(
            {"rollout": M("vllm", dp=6), "actor": M("fsdp", dp=4), "ref": M("fsdp", dp=4)},
            ONE_BY_EIGHT,
            {"actor": "0-3"},
        )
    assert str(err.value).startswith(
        "rollout vllm:d6 needs 6 GPUs and cluster.component_placement takes 4 (0-3): 10 in all"
    )


def test_placed_set_of_the_wrong_size_names_engine_spec_world_and_set():
    with pytest.raises(PlacementError) as err:
        place(
            {"rollout": M("vllm", dp=4), "actor": M("fsdp", dp=8)}, TWO_BY_EIGHT, {"actor": "8-11"}
        )
    assert str(err.value) == (
        "cluster.component_placement.actor='8-11' gives actor fsdp:d8 4 GPUs (8-11), but its "
        "world size is 8 (place it on 8 GPUs or change actor.backend)"
    )


def test_placed_gpu_outside_the_cluster_is_an_error():
    with pytest.raises(PlacementError, match=r"actor='8-15': GPU 15 is outside the cluster"):
        place({"actor": M("fsdp", dp=8)}, ONE_BY_EIGHT, {"actor": "8-15"})


def test_instance_across_a_node_boundary_is_an_error_showing_the_nodes():
    with pytest.raises(PlacementError) as err:
        place(
            {"rollout": M("sglang", dp=2, tp=4), "actor": M("fsdp", dp=2)},
            TWO_BY_EIGHT,
            {"rollout": "2-9"},
        )
    assert "rollout sglang:d2t4 instance 0 gets GPUs 2-5" in str(
        err.value
    ) or "instance 1 gets GPUs 6-9, across node 0 = GPUs 0-7, node 1 = GPUs 8-15" in str(err.value)


def test_instance_filling_whole_nodes_from_a_node_boundary_is_fine():
    p = place({"rollout": M("sglang", tp=16), "actor": M("fsdp", dp=8)}, ClusterSpec(3, 8), {})
    assert ranges(p) == {"rollout": "0-15", "actor": "16-23"}


def test_instance_spanning_nodes_from_mid_node_is_an_error():
    with pytest.raises(
        PlacementError, match=r"instance 0 gets GPUs 4-19.*starts at a node boundary"
    ):
        place(
            {"rollout": M("sglang", tp=16), "actor": M("fsdp", dp=4)},
            ClusterSpec(3, 8),
            {"rollout": "4-19"},
        )


def test_tp_group_across_a_node_is_an_error():
    with pytest.raises(
        PlacementError, match=r"actor megatron:d2t4 tp group 1 \(ranks 4-7\) gets GPUs 6-9"
    ):
        place({"actor": M("megatron", dp=2, tp=4)}, TWO_BY_EIGHT, {"actor": "2-9"})


# ----------------------------------------------------------------------------- warnings
def test_sharing_without_offload_warns_with_the_options_to_set():
    p = place(
        {"rollout": M("sglang", dp=8, tp=2), "actor": M("fsdp", dp=16)},
        TWO_BY_EIGHT,
        {"actor,rollout": "all"},
        {"actor": True},
    )
    assert p.warnings == (
        "rollout and actor share GPUs 0-15: without offload they compete for "
        "GPU memory (set rollout.offload=true)",
    )


def test_sharing_warning_names_every_overlap_of_a_group():
    p = place(
        {"rollout": M("sglang", dp=2, tp=2), "actor": M("fsdp", dp=8), "ref": M("fsdp", dp=4)},
        ONE_BY_EIGHT,
        {"actor": "0-7", "rollout": "4-7", "ref": "0-3"},
    )
    assert p.warnings == (
        "rollout and actor share GPUs 4-7; actor and ref share GPUs 0-3: without offload they "
        "compete for GPU memory (set rollout.offload=true actor.offload.weight=true "
        "ref.offload.weight=true)",
    )


def test_engines_of_one_trainer_job_do_not_warn_about_sharing():
    """ref on the actor's GPUs with the actor's backend runs in the actor's torchrun job (AReaL's
    usual layout): they hold memory together, which the memory check counts; a ref of another
    backend is a job of its own there, and competes."""
    one = place({"actor": M("fsdp", dp=8), "ref": M("fsdp", dp=8)}, ONE_BY_EIGHT, {})
    assert one.warnings == ()
    two = place({"actor": M("fsdp", dp=8), "ref": M("megatron", dp=8)}, ONE_BY_EIGHT, {})
    assert two.warnings == (
        "actor and ref share GPUs 0-7: without offload they compete for GPU "
        "memory (set actor.offload.weight=true ref.offload.weight=true)",
    )


def test_idle_gpus_are_a_warning_that_lists_them():
    p = place({"rollout": M("vllm", dp=2), "actor": M("fsdp", dp=4)}, TWO_BY_EIGHT, {})
    assert p.warnings == (
        "10 of 16 GPUs are idle (6-15): no engine is placed on them (lower "
        "cluster.num_nodes, use larger backends or place an engine there)",
    )


def test_idle_gpus_on_one_node_do_not_ask_for_fewer_nodes():
    one_node = ClusterSpec(1, 8, "cuda")
    p = place({"rollout": M("vllm", dp=2), "actor": M("fsdp", dp=4)}, one_node, {})
    assert p.warnings == (
        "2 of 8 GPUs are idle (6-7): no engine is placed on them (use larger "
        "backends or place an engine there)",
    )


# ----------------------------------------------------------------------------- cpu slots
def test_slots_needed_is_the_default_need():
    allocs = {
        "rollout": M("vllm", dp=2),
        "actor": M("fsdp", dp=2),
        "ref": M("fsdp", dp=2),
        "critic": M("fsdp", dp=1),
    }
    assert slots_needed(allocs, {}) == 5


def test_slots_needed_reaches_the_highest_placed_gpu():
    allocs = {"rollout": M("vllm", dp=1), "actor": M("fsdp", dp=2)}
    assert slots_needed(allocs, {"actor": "6-7"}) == 8
    assert slots_needed(allocs, {"rollout": "3"}) == 4  # actor takes 0-1


def test_slots_needed_counts_all_as_the_world_size_placed_there():
    allocs = {"rollout": M("vllm", dp=4), "actor": M("fsdp", dp=4)}
    assert slots_needed(allocs, {"actor,rollout": "all"}) == 4


@settings(max_examples=150, deadline=None)
@given(layouts(max_nodes=1))
def test_slots_needed_is_the_smallest_cpu_cluster_that_fits(layout):
    if not layout.fits:
        return
    slots = slots_needed(layout.allocs, layout.placement)
    place(layout.allocs, ClusterSpec(1, slots, "cpu"), layout.placement)
    if slots > 1:
        with pytest.raises(PlacementError):
            place(layout.allocs, ClusterSpec(1, slots - 1, "cpu"), layout.placement)


# ----------------------------------------------------------------------------- properties
@settings(max_examples=300, deadline=None)
@given(layouts())
def test_placement_gives_each_engine_its_world_size_inside_the_cluster_or_says_why_not(layout):
    if not layout.fits:
        with pytest.raises(PlacementError, match="in all, but the cluster has"):
            place(layout.allocs, layout.cluster, layout.placement)
        return
    p = place(layout.allocs, layout.cluster, layout.placement)
    assert list(p.gpus) == list(layout.allocs)
    for name, gpus in p.gpus.items():
        assert len(gpus) == len(set(gpus)) == layout.allocs[name].world_size
        assert list(gpus) == sorted(gpus)
        assert all(0 <= g < layout.cluster.total_gpus for g in gpus)
        if name in layout.explicit:
            assert gpus == layout.explicit[name]


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_no_gpu_goes_to_two_engines_unless_they_were_placed_together(layout):
    if not layout.fits:
        return
    p = place(layout.allocs, layout.cluster, layout.placement)
    for a, b in itertools.combinations(p.gpus, 2):
        if set(p.gpus[a]) & set(p.gpus[b]):
            # an engine placed with the actor by default is judged as the actor
            a, b = ("actor" if layout.shares_actor(n) else n for n in (a, b))
            assert a == b or (a in layout.explicit and b in layout.explicit), (a, b, p.gpus)
    for name in p.gpus:
        if layout.shares_actor(name):
            assert p.gpus[name] == p.gpus["actor"]


@settings(max_examples=200, deadline=None)
@given(layouts())
def test_mode_follows_the_distinct_gpu_sets(layout):
    if not layout.fits:
        return
    p = place(layout.allocs, layout.cluster, layout.placement)
    distinct = {frozenset(s) for s in p.gpus.values()}
    disjoint = all(not (x & y) for x, y in itertools.combinations(distinct, 2))
    expected = "collocated" if len(distinct) == 1 else "disaggregated" if disjoint else "hybrid"
    assert p.mode == expected
    busy = set().union(*distinct)
    assert any("idle" in w for w in p.warnings) == (len(busy) < layout.cluster.total_gpus)


def test_oversubscribed_wraps_around_onto_every_gpu_and_never_gives_one_engine_a_gpu_twice():
    """cluster.oversubscribe (AReaL's local scheduler): the free GPUs first, then round again."""
    p = place(
        {"rollout": M("vllm", dp=1), "actor": M("fsdp", dp=2)},
        ClusterSpec(1, 2),
        {"rollout": "0"},
        rules=Rules(oversubscribe=True),
    )
    assert p.gpus == {"rollout": (0,), "actor": (1, 0)}
    with pytest.raises(PlacementError, match="3 in all, but the cluster has 2"):
        place(
            {"rollout": M("vllm", dp=1), "actor": M("fsdp", dp=2)},
            ClusterSpec(1, 2),
            {"rollout": "0"},
        )
