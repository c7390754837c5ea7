"""RLinf's example configs that the survey of issue 31 found refused, now planned as RLinf's
own code places them: each config's shape written inline (not RLinf's file), planned with the
entry RLinf runs it with, at the plan level (milliseconds each)."""

from __future__ import annotations

import pytest

from launcher.spec.errors import ConfigError
from tests.test_rlinf_entries import planned, where

GPUS8 = "cluster.gpus_per_node=8"


def wideseek(**over) -> dict:
    """WideSeek-R1's shape (examples/agent/wideseek_r1/config/base_*.yaml): actor and reward on
    every GPU, its rollout on all or part of them, its agent loop and tools without sections
    of ours."""
    cfg = {
        "cluster": {
            "num_nodes": 1,
            "component_placement": {"actor,reward": "all", "rollout": "all"},
        },
        "rollout": {
            "rollout_backend": "sglang",
            "tensor_parallel_size": 1,
            "use_fixed_worker": False,
        },
        "actor": {"training_backend": "megatron", "model": {"tensor_model_parallel_size": 2}},
        "agentloop": {"group_name": "AgentLoopGroup", "use_local_judge": False},
        "tools": {"online": False},
        "reward": {"reward_type": "wideseek"},
    }
    for key, value in over.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    return cfg


def test_wideseek_training_plans_its_agent_loops_and_tool_groups(tmp_path):
    plan, notes = planned(tmp_path, wideseek(), "wideseek_r1/train.py", GPUS8)
    got = where(plan)
    assert got["rollout"] == [(0, (g,)) for g in range(8)]
    assert len(got["actor"]) == 8 and plan.components["actor"].kind == "train"
    assert got["agentloop"] == [(0, ())] * 8  # one on the node of each rollout instance
    assert got["search"] == got["access"] == [(0, ())] * 32  # 32 a node, CPU-only
    assert "reward" not in got  # placed, but the entry starts none (reward=None)
    assert any(n.startswith("search: on, RLinf's wideseek_r1/train.py") for n in notes)
    assert [(s.src, s.dst) for s in plan.weight_sync] == [("actor", "rollout")]


def test_wideseek_local_judge_is_an_engine_of_the_rollouts_backend_on_its_gpus(tmp_path):
    cfg = wideseek(
        agentloop={"use_local_judge": True}, rollout_judge={"model": {"model_path": "/m/j"}}
    )
    cfg["cluster"]["component_placement"].update({"rollout": "0-3", "rollout_judge": "4-7"})
    plan, notes = planned(tmp_path, cfg, "wideseek_r1/train.py", GPUS8)
    judge = plan.components["rollout_judge"]
    assert (judge.kind, str(judge.alloc)) == ("serve", "sglang:d4")
    assert where(plan)["rollout_judge"] == [(0, (g,)) for g in range(4, 8)]
    assert where(plan)["agentloop"] == [(0, ())] * 4  # beside the rollout's, not the judge's
    assert [(s.src, s.dst) for s in plan.weight_sync] == [
        ("actor", "rollout")
    ]  # the judge is not trained
    assert any(n.startswith("rollout_judge: on") and "use_local_judge" in n for n in notes)
    del cfg["cluster"]["component_placement"]["rollout_judge"]
    with pytest.raises(ConfigError, match="component_placement.rollout_judge is not set"):
        planned(tmp_path, cfg, "wideseek_r1/train.py", GPUS8)


def test_wideseek_online_eval_starts_one_tool_worker_a_node_and_no_actor(tmp_path):
    cfg = wideseek(tools={"online": True})
    cfg["cluster"]["num_nodes"] = 2
    plan, notes = planned(tmp_path, cfg, "wideseek_r1/eval.py", GPUS8)
    got = where(plan)
    assert got["search"] == got["access"] == [(0, ()), (1, ())]
    assert set(got) == {"rollout", "agentloop", "search", "access"}
    assert len(got["rollout"]) == 16 and got["agentloop"] == [(0, ())] * 8 + [(1, ())] * 8
    assert any(n.startswith("actor: off, RLinf's wideseek_r1/eval.py") for n in notes)


def test_wideseek_eval_with_two_engines_is_one_line(tmp_path):
    cfg = wideseek(rollout={"use_fixed_worker": True})
    with pytest.raises(ConfigError, match=r"use_fixed_worker=true: RLinf's .* splits the rollout"):
        planned(tmp_path, cfg, "wideseek_r1/eval.py", GPUS8)


def test_an_actor_on_a_robots_device_is_one_line_naming_what_rlinf_does(tmp_path):
    """realworld_eval_dual_franka's shape: actor, rollout and env on the robot's device 0."""
    on_robot = {"node_group": "franka", "placement": 0}
    cfg = {
        "cluster": {
            "num_nodes": 2,
            "component_placement": {"actor": on_robot, "rollout": on_robot, "env": on_robot},
            "node_groups": [
                {
                    "label": "franka",
                    "node_ranks": "0-1",
                    "hardware": {"type": "DualFranka", "configs": [{"node_rank": 0}]},
                }
            ],
        },
        "env": {"group_name": "EnvGroup"},
        "rollout": {"group_name": "RolloutGroup"},
        "actor": {"training_backend": "fsdp"},
        "runner": {"only_eval": True},
    }
    with pytest.raises(ConfigError) as err:
        planned(tmp_path, cfg)
    assert str(err.value).startswith(
        "cluster.component_placement.actor={node_group: franka, ...}: RLinf runs the actor on "
        "the node of a DualFranka device, seeing that node's GPUs"
    )
    assert "\n" not in str(err.value)


def test_online_coding_rl_starts_its_router_and_server_rollout_on_gpu_0(tmp_path):
    """coding_online_rl's qwen2.5-1.5b-ppo shape: disaggregated, recompute_logprobs."""
    placement = {"rollout": "0-3", "inference": "4-5", "actor": "6-7", "reward": "0-3"}
    cfg = {
        "cluster": {"num_nodes": 1, "component_placement": placement},
        "rollout": {"rollout_backend": "sglang", "tensor_parallel_size": 1},
        "actor": {"training_backend": "megatron"},
        "algorithm": {"recompute_logprobs": True},
        "reward": {"reward_type": "coding"},
        "critic": {"use_critic_model": False},
    }
    entry = "coding_online_rl/main_coding_online_rl.py"
    plan, notes = planned(tmp_path, cfg, entry, GPUS8)
    got = where(plan)
    assert got["online_router"] == got["server_rollout"] == [(0, (0,))]
    assert got["rollout"] == [(0, (g,)) for g in range(4)]
    assert got["inference"] == [(0, (4,)), (0, (5,))] and got["actor"] == [(0, (6,)), (0, (7,))]
    assert "reward" not in got
    assert any(n.startswith("online_router: on, RLinf's " + entry) for n in notes)
    cfg["algorithm"]["recompute_logprobs"] = False
    assert "inference" not in where(planned(tmp_path, cfg, entry, GPUS8)[0])
