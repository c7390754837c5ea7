"""launcher.trainer.runtime's layout answers: a trainer's mesh, Megatron's expert groups and the
engine
options, all read from the plan the launcher builds (no torch)."""

from __future__ import annotations

import copy

import pytest

from launcher.spec.errors import LaunchError
from launcher.trainer.runtime import plan_from_dict
from tests import plans


def plan_dict(**dotted) -> dict:
    """The real plan for `dotted` overrides, on cpu (virtual slots), as its JSON dict."""
    return plans.plan_dict(**{"cluster.device": "cpu", **dotted})


def test_mesh_layout_is_the_plans_grid_in_dp_cp_tp_order():
    rt = plan_from_dict(plan_dict(**{"actor.backend": "fsdp:d2t2c2"}), env={})
    layout = rt.mesh_layout()
    assert layout.names == ("dp", "cp", "tp") and layout.shape == (2, 2, 2)
    for entry in rt.ranks():
        assert layout.ranks[entry["dp"]][entry["cp"]][entry["tp"]] == entry["rank"]


def test_mesh_layout_rows_are_the_plans_groups():
    rt = plan_from_dict(plan_dict(**{"actor.backend": "fsdp:d2t2"}), env={})
    layout = rt.mesh_layout()
    for rank in range(4):
        coords = rt.coords(rank)
        assert layout.ranks[coords["dp"]][0] == rt.group("tp", rank)
        assert [row[0][coords["tp"]] for row in layout.ranks] == rt.group("dp", rank)


def test_mesh_layout_refuses_an_axis_it_leaves_out():
    rt = plan_from_dict(plan_dict(**{"actor.backend": "megatron:d1t2p2"}), env={})
    with pytest.raises(LaunchError, match="2 pp ranks but a mesh of dp, cp, tp has no pp"):
        rt.mesh_layout()
    assert rt.mesh_layout(("pp", "dp", "cp", "tp")).shape == (2, 1, 1, 2)


def test_mesh_layout_names_the_rank_placed_twice():
    data = plan_dict(**{"actor.backend": "fsdp:d2"})
    data = copy.deepcopy(data)
    data["components"]["actor"]["ranks"][1]["dp"] = 0
    with pytest.raises(LaunchError, match=r"^rank 1: dp 0 cp 0 tp 0 is rank 0's place too"):
        plan_from_dict(data, env={}).mesh_layout()


def test_expert_groups_follow_megatrons_expert_grid():
    # attn d2t2, ffn t2e2 (edp 1): etp fastest, then ep
    rt = plan_from_dict(plan_dict(**{"actor.backend": "megatron:(attn:d2t2|ffn:t2e2)"}), env={})
    assert rt.parallel() == {"dp": 2, "tp": 2, "pp": 1, "cp": 1, "ep": 2, "etp": 2, "edp": 1}
    assert rt.expert_group("etp", 2) == [2, 3]
    assert rt.expert_group("ep", 1) == [1, 3]
    assert rt.expert_group("edp", 3) == [3]


def test_expert_groups_stay_inside_a_pipeline_stage():
    rt = plan_from_dict(plan_dict(**{"actor.backend": "megatron:(attn:p2t2|ffn:p2e2)"}), env={})
    assert rt.expert_group("ep", 2) == [2, 3]
    assert all(rt.coords(r)["pp"] == 1 for r in rt.expert_group("ep", 2))


def test_parallel_of_a_plan_without_the_dict_comes_from_its_ranks():
    data = copy.deepcopy(plan_dict(**{"actor.backend": "fsdp:d1t2"}))
    del data["components"]["actor"]["parallel"]
    assert plan_from_dict(data, env={}).parallel() == {
        "dp": 1,
        "tp": 2,
        "pp": 1,
        "cp": 1,
        "ep": 1,
        "etp": 1,
        "edp": 2,
    }


def test_engine_options_and_offload_are_the_users_settings():
    rt = plan_from_dict(
        plan_dict(
            **{
                "actor.fsdp.mixed_precision": "bf16",
                "actor.offload.optimizer": True,
                "rollout.offload": True,
            }
        ),
        env={},
    )
    assert rt.engine_options("actor")["mixed_precision"] == "bf16"
    assert rt.offload("actor") == {"weight": False, "optimizer": True, "grad": False}
    assert rt.offload("rollout") is True


def test_shares_gpus_when_the_gpu_sets_overlap():
    apart = plan_from_dict(plan_dict(), env={})
    together = plan_from_dict(
        plan_dict(
            **{
                "cluster.component_placement": {"actor,rollout": "0-1"},
                "rollout.backend": "vllm:d2",
                "rollout.offload": True,
                "actor.offload.weight": True,
            }
        ),
        env={},
    )
    assert not apart.shares_gpus() and together.shares_gpus()
