"""Rank maps, inference instances and weight-sync pairs."""

import itertools
from collections import Counter

import pytest
from hypothesis import assume, given, settings
from layouts import build, layouts, plan_of

from launcher.planning.ranks import (
    AXES,
    component_plan,
    grid,
    groups,
    inference_instances,
    training_ranks,
)
from launcher.spec.alloc import ModelAllocation as M
from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import PlacementError

ONE_BY_EIGHT, TWO_BY_EIGHT = ClusterSpec(1, 8), ClusterSpec(2, 8)


def loads(sync, world):
    count = Counter(p.rank for p in sync.pairs)
    return [count[r] for r in range(world)]


def fed(sync):
    return sorted((p.instance, p.tp) for p in sync.pairs)


def shards(rollout):
    return sorted((i.index, k) for i in rollout.instances for k in range(len(i.gpus)))


# ----------------------------------------------------------------------------- training ranks
def test_grid_uses_megatron_order_tp_fastest_then_cp_dp_pp():
    coords = grid({"tp": 2, "cp": 1, "dp": 2, "pp": 2})
    assert coords["tp"] == [0, 1] * 4
    assert coords["dp"] == [0, 0, 1, 1] * 2
    assert coords["pp"] == [0] * 4 + [1] * 4


def test_groups_match_megatron_for_tp2_pp2_dp2():
    ranks = training_ranks("actor", M("megatron", dp=2, tp=2, pp=2), range(8), ONE_BY_EIGHT)
    assert groups(ranks, "tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert groups(ranks, "dp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert groups(ranks, "pp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert groups(ranks, "cp") == [[r] for r in range(8)]


def test_cp_sits_between_tp_and_dp():
    ranks = training_ranks("actor", M("megatron", dp=2, tp=2, cp=2), range(8), ONE_BY_EIGHT)
    assert groups(ranks, "cp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert groups(ranks, "dp") == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_groups_rejects_an_unknown_axis():
    ranks = training_ranks("actor", M("fsdp", dp=2), range(2), ONE_BY_EIGHT)
    with pytest.raises(ValueError, match="axis 'ep'"):
        groups(ranks, "ep")


def test_ranks_follow_the_gpu_list_with_node_and_local_gpu():
    ranks = training_ranks("actor", M("fsdp", dp=4), (6, 7, 8, 9), TWO_BY_EIGHT)
    assert [(r.rank, r.gpu, r.node, r.local_gpu, r.dp) for r in ranks] == [
        (0, 6, 0, 6, 0),
        (1, 7, 0, 7, 1),
        (2, 8, 1, 0, 2),
        (3, 9, 1, 1, 3),
    ]


def test_tp_group_across_nodes_is_an_error_with_the_nodes_and_a_fix():
    with pytest.raises(PlacementError) as err:
        training_ranks("actor", M("megatron", dp=1, tp=4), (6, 7, 8, 9), TWO_BY_EIGHT)
    assert str(err.value) == (
        "actor megatron:t4 tp group 0 (ranks 0-3) gets GPUs 6-9, across node 0 = GPUs 0-7, "
        "node 1 = GPUs 8-15: a tp group must stay on one node (place actor so each block of 4 "
        "GPUs lies within one node)"
    )


def test_tp_larger_than_a_node_says_to_lower_t():
    with pytest.raises(PlacementError, match=r"use t<=8 in actor.backend"):
        training_ranks("actor", M("megatron", tp=16), range(16), TWO_BY_EIGHT)


def test_wrong_number_of_gpus_is_an_error():
    with pytest.raises(PlacementError, match="world size 4 but was given 3 GPUs"):
        training_ranks("actor", M("fsdp", dp=4), (0, 1, 2), ONE_BY_EIGHT)


# ----------------------------------------------------------------------------- instances
def test_instance_i_is_the_ith_block_of_t_times_p_gpus():
    inst = inference_instances("rollout", M("sglang", dp=2, tp=2, pp=2), range(8, 16), TWO_BY_EIGHT)
    assert [(i.index, i.gpus, i.nodes) for i in inst] == [
        (0, (8, 9, 10, 11), (1,)),
        (1, (12, 13, 14, 15), (1,)),
    ]


def test_instance_filling_two_whole_nodes_is_allowed():
    inst = inference_instances("rollout", M("sglang", tp=16), range(16), TWO_BY_EIGHT)
    assert inst[0].nodes == (0, 1)


def test_instance_across_nodes_mid_node_is_an_error_naming_it():
    with pytest.raises(PlacementError, match=r"rollout vllm:d2t2 instance 1 gets GPUs 7-8, across"):
        inference_instances("rollout", M("vllm", dp=2, tp=2), (5, 6, 7, 8), TWO_BY_EIGHT)


def test_instance_bigger_than_a_node_but_not_whole_nodes_says_what_sizes_work():
    with pytest.raises(PlacementError, match=r"use t\*p<=8 or a multiple of 8 in rollout.backend"):
        inference_instances("rollout", M("sglang", tp=12), range(12), TWO_BY_EIGHT)


# ----------------------------------------------------------------------------- weight sync
def test_collocated_rank_feeds_the_rollout_shard_on_its_own_gpu_when_rollout_tp_is_larger():
    plan = build(
        {"rollout": M("sglang", dp=2, tp=4), "actor": M("megatron", dp=4, tp=2)},
        ONE_BY_EIGHT,
        {"actor,rollout": "all"},
    )
    rollout, actor = plan.components["rollout"], plan.components["actor"]
    gpu_of_shard = {(i.index, k): g for i in rollout.instances for k, g in enumerate(i.gpus)}
    pairs = plan.weight_sync[0].pairs
    assert len(pairs) == 8 and fed(plan.weight_sync[0]) == shards(rollout)
    for p in pairs:
        assert actor.ranks[p.rank].gpu == gpu_of_shard[(p.instance, p.tp)]


def test_collocated_with_actor_tp_larger_than_rollout_tp_still_pairs_by_gpu():
    plan = build(
        {"rollout": M("vllm", dp=8), "actor": M("megatron", tp=8)},
        ONE_BY_EIGHT,
        {"actor,rollout": "all"},
    )
    assert [(p.rank, p.instance, p.tp) for p in plan.weight_sync[0].pairs] == [
        (r, r, 0) for r in range(8)
    ]


def test_disaggregated_feeds_every_shard_when_rollout_world_is_not_a_multiple_of_actor_world():
    plan = build(
        {"rollout": M("sglang", dp=5, tp=2), "actor": M("fsdp", dp=4)},
        TWO_BY_EIGHT,
        {"rollout": "0-9", "actor": "12-15"},
    )
    sync = plan.weight_sync[0]
    assert fed(sync) == shards(plan.components["rollout"])
    assert sorted(loads(sync, 4)) == [2, 2, 3, 3]


def test_disaggregated_prefers_actor_ranks_on_the_shards_node():
    # instance 0 and actor rank 0 on node 0; instances 1-2 and ranks 1-2 on node 1
    plan = build(
        {"rollout": M("sglang", dp=3, tp=2), "actor": M("fsdp", dp=3)},
        TWO_BY_EIGHT,
        {"rollout": "0-1,8-11", "actor": "6,14-15"},
    )
    sync, actor = plan.weight_sync[0], plan.components["actor"]
    gpu_of = {
        (i.index, k): g for i in plan.components["rollout"].instances for k, g in enumerate(i.gpus)
    }
    for p in sync.pairs:
        assert actor.ranks[p.rank].node == gpu_of[(p.instance, p.tp)] // 8, p
    assert loads(sync, 3) == [2, 2, 2]


def test_hybrid_feeds_overlapping_shards_locally_and_the_rest_evenly():
    plan = build(
        {"rollout": M("sglang", dp=4, tp=2), "actor": M("fsdp", dp=4)},
        ONE_BY_EIGHT,
        {"rollout": "0-7", "actor": "2-5"},
    )
    sync = plan.weight_sync[0]
    local = {(p.instance, p.tp): p.rank for p in sync.pairs if p.instance in (1, 2)}
    assert local == {(1, 0): 0, (1, 1): 1, (2, 0): 2, (2, 1): 3}  # rank r sits on GPU 2 + r
    assert fed(sync) == shards(plan.components["rollout"]) and loads(sync, 4) == [2, 2, 2, 2]


def test_pipeline_parallel_instances_are_fed_shard_by_shard():
    plan = build(
        {"rollout": M("sglang", dp=1, tp=2, pp=2), "actor": M("fsdp", dp=2)}, ONE_BY_EIGHT, {}
    )
    assert fed(plan.weight_sync[0]) == [(0, 0), (0, 1), (0, 2), (0, 3)]


# ----------------------------------------------------------------------------- properties
@settings(max_examples=250, deadline=None)
@given(layouts())
def test_every_rank_has_its_own_gpu_and_the_grid_is_covered_once(layout):
    assume(layout.fits)
    plan = plan_of(layout)
    for comp in plan.components.values():
        if comp.is_inference:
            continue
        assert [r.gpu for r in comp.ranks] == list(comp.gpus)
        assert len({r.gpu for r in comp.ranks}) == comp.world_size
        cells = Counter((r.tp, r.cp, r.dp, r.pp) for r in comp.ranks)
        a = comp.alloc
        assert set(cells) == set(
            itertools.product(range(a.tp), range(a.cp), range(a.dp), range(a.pp))
        )
        assert set(cells.values()) == {1}
        for axis in AXES:
            assert sorted(r for g in groups(comp.ranks, axis) for r in g) == list(
                range(a.world_size)
            )


@settings(max_examples=250, deadline=None)
@given(layouts())
def test_no_instance_or_tp_group_crosses_a_node_unless_it_fills_whole_nodes(layout):
    assume(layout.fits)
    plan = plan_of(layout)
    g = layout.cluster.gpus_per_node
    for comp in plan.components.values():
        if comp.is_inference:
            assert [x for i in comp.instances for x in i.gpus] == list(comp.gpus)
            for inst in comp.instances:
                if len(inst.nodes) > 1:
                    assert inst.gpus[0] % g == 0 and len(inst.gpus) == len(inst.nodes) * g
        else:
            for members in groups(comp.ranks, "tp"):
                assert len({comp.ranks[r].node for r in members}) == 1


@settings(max_examples=250, deadline=None)
@given(layouts())
def test_every_rollout_shard_is_fed_once_and_actor_load_differs_by_at_most_one(layout):
    assume(layout.fits)
    plan = plan_of(layout)
    sync, rollout, actor = plan.weight_sync[0], plan.components["rollout"], plan.components["actor"]
    assert fed(sync) == shards(rollout)
    load = loads(sync, actor.world_size)
    assert max(load) - min(load) <= 1
    gpu_of_shard = {(i.index, k): gpu for i in rollout.instances for k, gpu in enumerate(i.gpus)}
    rank_on = {r.gpu: r.rank for r in actor.ranks}
    for p in sync.pairs:  # a shard that shares a GPU with an actor rank is fed by that rank
        gpu = gpu_of_shard[(p.instance, p.tp)]
        assert rank_on.get(gpu, p.rank) == p.rank


def test_component_plan_gives_instances_to_servers_and_ranks_to_trainers():
    server = component_plan("rollout", M("vllm", dp=2), (0, 1), ONE_BY_EIGHT)
    trainer = component_plan("ref", M("fsdp", dp=2), (2, 3), ONE_BY_EIGHT, inherited_from="actor")
    assert len(server.instances) == 2 and server.ranks == ()
    assert len(trainer.ranks) == 2 and trainer.instances == () and trainer.inherited_from == "actor"
