"""recipes/grpo/layout.py: the plan is the contract. A trainer's live groups are compared with
the plan's, one line per difference naming rank and axis (no torch here: the torchrun tests
feed it real meshes and Megatron's parallel state)."""

from __future__ import annotations

import json

from launcher.trainer.runtime import plan_from_dict
from recipes.grpo.layout import WeightShard, mismatches, world_mismatch, write_rank_record
from tests.test_runtime_layout import plan_dict


def test_a_tp_group_other_than_the_plans_is_one_line_naming_rank_and_axis():
    # the plan for fsdp:d2t2 (tp fastest) has rank 3's tp group [2, 3]; a trainer that paired
    # ranks dp-fastest would see [1, 3]
    rt = plan_from_dict(plan_dict(**{"actor.backend": "fsdp:d2t2"}), env={})
    lines = mismatches(rt, 3, {"tp": [1, 3], "dp": [2, 3]}, {"tp": 1, "dp": 1}, "the mesh")
    assert lines == [
        "rank 3: tp group [1, 3] from the mesh, the plan says [2, 3]",
        "rank 3: dp group [2, 3] from the mesh, the plan says [1, 3]",
    ]


def test_the_plans_own_groups_and_coordinates_pass():
    rt = plan_from_dict(plan_dict(**{"actor.backend": "megatron:(attn:d2t2|ffn:t2e2)"}), env={})
    for rank in range(4):
        groups = {axis: rt.group(axis, rank) for axis in ("tp", "pp", "dp", "cp")}
        groups.update({axis: rt.expert_group(axis, rank) for axis in ("ep", "etp", "edp")})
        coords = {k: v for k, v in rt.coords(rank).items() if k in ("tp", "pp", "dp", "cp")}
        assert mismatches(rt, rank, groups, coords, "Megatron's parallel state") == []


def test_an_expert_group_other_than_the_plans_is_named():
    rt = plan_from_dict(plan_dict(**{"actor.backend": "megatron:(attn:d2t2|ffn:t2e2)"}), env={})
    assert mismatches(rt, 1, {"ep": [0, 1]}, {}, "Megatron's parallel state") == [
        "rank 1: ep group [0, 1] from Megatron's parallel state, the plan says [1, 3]"
    ]


def test_a_coordinate_other_than_the_plans_is_named():
    rt = plan_from_dict(plan_dict(**{"actor.backend": "fsdp:d1t2"}), env={})
    assert mismatches(rt, 1, {}, {"tp": 0}, "the mesh") == [
        "rank 1: tp coordinate 0 from the mesh, the plan says 1"
    ]


def test_torchrun_starting_another_number_of_workers_is_named():
    rt = plan_from_dict(plan_dict(**{"actor.backend": "fsdp:d2t2"}), env={})
    assert (
        world_mismatch(rt, 0, 2) == "rank 0: torchrun started 2 workers, the plan's actor "
        "has 4 ranks"
    )
    assert world_mismatch(rt, 0, 4) is None


def test_rank_record_is_one_json_file_per_rank(tmp_path):
    shard = WeightShard("w", [64, 128], [128, 128], [64, 0], "ab")
    path = write_rank_record(
        str(tmp_path), 1, {"dp": 0, "tp": 1, "pp": 0, "cp": 0}, shard, {"backend": "fsdp"}
    )
    assert path == tmp_path / "ranks" / "1.json"
    assert json.loads(path.read_text()) == {
        "rank": 1,
        "dp": 0,
        "tp": 1,
        "pp": 0,
        "cp": 0,
        "backend": "fsdp",
        "weight": {
            "name": "w",
            "local_shape": [64, 128],
            "full_shape": [128, 128],
            "offset": [64, 0],
            "sha256": "ab",
        },
    }
    assert [p.name for p in (tmp_path / "ranks").iterdir()] == ["1.json"]
