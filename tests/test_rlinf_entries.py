"""RLinf as RLinf runs it (issue 31), at the plan level: a worker is on when the RLinf entry
named by `trainer.entry` starts it (launcher.config.peers.rlinf_entries), a section of RLinf's
settings only starts nothing, runs of workers only plan, and RLinf's cluster keys are read or
named in one note each. The configs are RLinf-shaped files (no defaults list of ours) written
to a user folder beside empty entry scripts at RLinf's paths; each case costs milliseconds."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from launcher.config.compose import Composer, ConfigSource
from launcher.config.run import run_spec
from launcher.planning.build import build_plan
from launcher.spec.errors import ConfigError
from tests.areal_launch import run

EMBODIED = "embodiment/train_embodied_agent.py"
BASE = {
    "cluster": {"num_nodes": 1, "component_placement": {"actor,env,rollout": "all"}},
    "env": {"group_name": "EnvGroup", "simulator_type": "maniskill"},
    "rollout": {"group_name": "RolloutGroup", "model": {"precision": "bf16"}},
    "actor": {"group_name": "ActorGroup", "training_backend": "fsdp"},
    "reward": {"use_reward_model": False, "reward_type": "dense"},
}


def planned(tmp_path: Path, cfg: dict, entry: str = EMBODIED, *extra: str):
    """(plan, notes) of an RLinf-shaped config run by RLinf's `entry` on 1 node x 4 GPUs."""
    script = tmp_path / entry
    script.parent.mkdir(parents=True, exist_ok=True)
    script.touch()
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    composer = Composer(ConfigSource(config_dir=str(tmp_path), config_name="cfg"))
    over = [f"trainer.entry={script}", "cluster.device=cuda", "cluster.gpus_per_node=4", *extra]
    run = run_spec(composer, composer.compose(over, with_hydra=True))
    built = build_plan(run.config, local_gpus=0)
    return built.plan, [*run.notes, *built.notes]


def where(plan) -> dict:
    """Each component's processes as (node, GPUs)."""
    out = {}
    for name, c in plan.components.items():
        if c.kind == "train":
            out[name] = [(r.node, (r.gpu,)) for r in c.ranks]
        else:
            out[name] = [(i.nodes[0], tuple(i.gpus)) for i in c.instances]
    return out


def with_(base: dict, **sections) -> dict:
    out = {k: dict(v) for k, v in base.items()}
    for key, value in sections.items():
        out[key] = value if value is None else {**out.get(key, {}), **value}
    return {k: v for k, v in out.items() if v is not None}


def test_an_embodied_entry_starts_no_reward_worker_for_a_settings_only_reward(tmp_path):
    plan, notes = planned(tmp_path, BASE)
    assert set(plan.components) == {"actor", "env", "rollout"}
    assert where(plan)["rollout"] == [(0, (g,)) for g in range(4)]  # a policy worker per GPU
    assert any(
        n.startswith("reward: off, RLinf's embodiment/train_embodied_agent.py") for n in notes
    )
    assert any(n.startswith("env: on") and "always starts it" in n for n in notes)


def test_use_reward_model_starts_the_reward_worker_and_says_why(tmp_path):
    cfg = with_(BASE, reward={"use_reward_model": True})
    cfg["cluster"]["component_placement"]["reward"] = "0-1"
    plan, notes = planned(tmp_path, cfg)
    assert where(plan)["reward"] == [(0, (0,)), (0, (1,))]
    assert any(n.startswith("reward: on") and "use_reward_model: true" in n for n in notes)


def test_a_standalone_realworld_reward_is_started_by_the_env_not_the_entry(tmp_path):
    cfg = with_(BASE, reward={"use_reward_model": True, "standalone_realworld": True})
    plan, _ = planned(tmp_path, cfg)
    assert "reward" not in plan.components


def test_our_recipe_reads_a_settings_only_section_as_no_worker(tmp_path):
    from launcher.config.compose import Composer as C

    composer = C(ConfigSource())
    over = ["reward.reward_type=math", "cluster.device=cpu"]
    run = run_spec(composer, composer.compose(over, with_hydra=True))
    plan = build_plan(run.config, local_gpus=0).plan
    assert "reward" not in plan.components
    assert any(n.startswith("reward: RLinf's settings only (reward_type)") for n in run.notes)


def test_a_run_of_workers_only_plans_the_env_on_the_robots_cpu_only_node(tmp_path):
    cfg = {
        "cluster": {
            "num_nodes": 1,
            "component_placement": {"env": {"node_group": "franka", "placement": 0}},
            "node_groups": [
                {
                    "label": "franka",
                    "node_ranks": 0,
                    "hardware": {"type": "Franka", "configs": [{"node_rank": 0}]},
                }
            ],
        },
        "env": {"group_name": "EnvGroup"},
        "rollout": {"model": {"precision": "bf16"}},
        "actor": {"training_backend": "fsdp"},
    }
    plan, notes = planned(tmp_path, cfg, "embodiment/collect_real_data.py")
    assert where(plan) == {"env": [(0, ())]}
    assert any(n.startswith("env: on, RLinf's embodiment/collect_real_data.py") for n in notes)


def test_node_ranks_all_is_every_node_of_the_cluster(tmp_path):
    cfg = with_(BASE)
    cfg["cluster"] = {
        "num_nodes": 2,
        "component_placement": {"actor,env,rollout": "all"},
        "node_groups": [
            {
                "label": "rollout",
                "node_ranks": "all",
                "env_configs": [{"node_ranks": "all", "env_vars": [{"OMP_NUM_THREADS": 32}]}],
            }
        ],
    }
    plan, _ = planned(tmp_path, cfg)
    assert len(plan.components["actor"].ranks) == 8
    assert [g.nodes for g in plan.cluster.groups if g.label == "rollout"] == [(0, 1)]


def test_env_configs_for_part_of_a_group_is_one_line(tmp_path):
    cfg = with_(BASE)
    cfg["cluster"] = {
        "num_nodes": 2,
        "component_placement": {"actor,env,rollout": "all"},
        "node_groups": [
            {
                "label": "g",
                "node_ranks": "0-1",
                "env_configs": [{"node_ranks": 1, "env_vars": [{"B": 2}]}],
            }
        ],
    }
    with pytest.raises(ConfigError) as err:
        planned(tmp_path, cfg)
    assert "env_configs[0].node_ranks=1: RLinf sets this env for part of the group" in str(
        err.value
    )
    cfg["cluster"]["node_groups"][0]["env_configs"] = [{"env_vars": [{"A": 1}]}]
    cfg["cluster"]["node_groups"][0]["env_configs"] += [
        {"node_ranks": 1, "python_interpreter_path": None}  # sets nothing: RLinf's placeholder
    ]
    plan, _ = planned(tmp_path, cfg)
    assert plan.cluster.groups[0].env == {"A": "1"}


def test_rlinf_cluster_keys_not_honoured_are_one_note_each(tmp_path):
    cfg = with_(BASE)
    cfg["cluster"] = {
        **cfg["cluster"],
        "net_emulation": {"enabled": True},
        "tracer": {"enabled": True},
        "profiling": {"enabled": True, "backend": "nsight", "worker_groups": ["ActorGroup"]},
    }
    _, notes = planned(tmp_path, cfg)
    for key in ("net_emulation", "tracer"):  # profiling is ours now: tests/test_profiling.py
        assert sum(n.startswith(f"cluster.{key}") and "not honoured" in n for n in notes) == 1


def test_an_unknown_profiling_key_is_one_line(tmp_path):
    cfg = with_(BASE)
    cfg["cluster"] = {**cfg["cluster"], "profiling": {"backend": "nsight", "stepz": [1]}}
    with pytest.raises(ConfigError, match=r"cluster.profiling.stepz: not one of RLinf's keys"):
        planned(tmp_path, cfg)


@pytest.mark.parametrize(
    "entry, needle",
    [
        ("calc_x/main.py", "Agent Lightning's own trainer"),
    ],
)
def test_an_entry_whose_workers_we_do_not_plan_is_one_line(tmp_path, entry, needle):
    with pytest.raises(ConfigError, match=f"starts {needle}.*areal-launch does not plan"):
        planned(tmp_path, BASE, entry)


def test_an_api_reward_without_api_base_starts_rlinfs_sglang_reward_server(tmp_path):
    reward = {"use_reward_model": True, "worker_type": "api", "model": {"model_path": "/m/vlm"}}
    cfg = with_(BASE, reward=reward)
    cfg["cluster"]["component_placement"].update({"reward": "0", "reward_server": "0-1:0"})
    plan, notes = planned(tmp_path, cfg)
    server = plan.components["reward_server"]
    assert (server.kind, str(server.alloc), server.instances[0].gpus) == (
        "serve",
        "sglang:t2",
        (0, 1),
    )
    assert any(n.startswith("reward_server: on") for n in notes)
    del cfg["cluster"]["component_placement"]["reward_server"]
    with pytest.raises(ConfigError, match="place it .*reward_server. or give reward.api.api_base"):
        planned(tmp_path, cfg)


def test_an_agent_entry_starts_an_agent_loop_beside_each_engine_and_a_tool_worker(tmp_path):
    cfg = {
        "cluster": {"num_nodes": 1, "component_placement": {"actor,rollout,reward": "all"}},
        "rollout": {"rollout_backend": "sglang", "tensor_parallel_size": 2},
        "actor": {"training_backend": "fsdp"},
        "reward": {"reward_type": "searchr1"},
        "algorithm": {"recompute_logprobs": False},
    }
    plan, notes = planned(tmp_path, cfg, "searchr1/train.py")
    got = where(plan)
    assert got["rollout"] == [(0, (0, 1)), (0, (2, 3))]
    assert got["agentloop"] == [(0, ()), (0, ())]
    assert got["tool"] == [(0, ())]
    assert "reward" not in got  # searchr1 scores inside its agent loop
    assert any(n.startswith("reward: off, RLinf's searchr1/train.py") for n in notes)


# ------------------------------------------------------------------ one real run, on CPU
COLLECTOR = """import json, os, sys
out = os.environ["COLLECTED"]
with open(os.path.join(out, "env-" + os.environ["AREAL_WORKER_INDEX"] + ".json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "pid": os.getpid()}, f)
print("collected 3 episodes", flush=True)
"""


@pytest.fixture(scope="module")
def workers_only(tmp_path_factory):
    """RLinf's collect_real_data.py shape, for real: the env on a robot's CPU-only node, no
    engine, a settings-only reward section; the env worker collects and exits 0."""
    folder = tmp_path_factory.mktemp("collect")
    (folder / "embodiment").mkdir()
    (folder / "embodiment/collect_real_data.py").touch()
    (folder / "collector.py").write_text(COLLECTOR)
    cfg = {
        "cluster": {
            "num_nodes": 1,
            "component_placement": {"env": {"node_group": "franka", "placement": 0}},
            "node_groups": [
                {
                    "label": "franka",
                    "node_ranks": 0,
                    "hardware": {"type": "Franka", "configs": [{"node_rank": 0}]},
                    "env_configs": [{"env_vars": [{"COLLECTED": str(folder)}]}],
                }
            ],
        },
        "env": {"entry": str(folder / "collector.py"), "health_path": None, "seed": 3},
        "reward": {"use_reward_model": False, "reward_type": "dense"},
        "actor": {"training_backend": "fsdp"},
    }
    (folder / "collect.yaml").write_text(yaml.safe_dump(cfg))
    run_dir = folder / "run"
    done = run(
        "-cd",
        str(folder),
        "-cn",
        "collect",
        f"trainer.entry={folder / 'embodiment/collect_real_data.py'}",
        "cluster.device=cpu",
        f"hydra.run.dir={run_dir}",
        timeout=300,
    )
    return folder, run_dir, done


def test_a_run_of_workers_only_runs_and_stops_cleanly(workers_only):
    folder, run_dir, done = workers_only
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-4000:]
    assert "every worker exited 0" in text
    collected = json.loads((folder / "env-0.json").read_text())
    assert "collected 3 episodes" in (run_dir / "logs" / "env-0.log").read_text()
    with pytest.raises(ProcessLookupError):
        os.kill(collected["pid"], 0)  # gone, not left running


def test_a_settings_only_reward_section_starts_no_reward_worker_for_real(workers_only):
    folder, run_dir, done = workers_only
    assert sorted(p.name for p in (run_dir / "logs").glob("*.log") if "reward" in p.name) == []
    assert "reward: off, RLinf's embodiment/collect_real_data.py" in done.stdout + done.stderr


# ------------------------------------------------------------------ rollout rank order
def collocated_plan(actor: str, rollout: str, gpus: int = 4, nodes: int = 1):
    composer = Composer(ConfigSource())
    over = [
        "cluster.device=cuda",
        f"cluster.num_nodes={nodes}",
        f"cluster.gpus_per_node={gpus}",
        f"actor.backend={actor}",
        f"rollout.backend={rollout}",
        "cluster.component_placement.actor=all",
        "cluster.component_placement.rollout=all",
    ]
    return build_plan(run_spec(composer, composer.compose(over, with_hydra=True)).config, 0).plan


@pytest.mark.parametrize(
    "actor, rollout, gpus, instances",
    [  # every stride ModelParallelComponentPlacement gives (actor tp / rollout tp), and none
        ("megatron:t4", "vllm:d2t2", 4, [(0, 2), (1, 3)]),
        ("megatron:d2t4", "vllm:d4t2", 8, [(0, 2), (1, 3), (4, 6), (5, 7)]),
        ("megatron:t8", "vllm:d4t2", 8, [(0, 4), (1, 5), (2, 6), (3, 7)]),
        ("megatron:t8", "vllm:d2t4", 8, [(0, 2, 4, 6), (1, 3, 5, 7)]),
        ("megatron:t4", "vllm:d4", 4, [(0,), (1,), (2,), (3,)]),
        ("megatron:d2t2", "vllm:d2t2", 4, [(0, 1), (2, 3)]),  # same tp: packed
        ("megatron:d4", "vllm:d2t2", 4, [(0, 1), (2, 3)]),  # smaller actor tp: packed
    ],
)
def test_collocated_rollout_instances_follow_the_actors_tp_groups(actor, rollout, gpus, instances):
    plan = collocated_plan(actor, rollout, gpus)
    assert [i.gpus for i in plan.components["rollout"].instances] == instances
    actor_on = {r.gpu: r.rank for r in plan.components["actor"].ranks}
    (sync,) = plan.weight_sync
    by_shard = {(p.instance, p.tp): p.rank for p in sync.pairs}
    for inst in plan.components["rollout"].instances:  # every shard from its own GPU's rank
        for k, gpu in enumerate(inst.gpus):
            assert by_shard[(inst.index, k)] == actor_on[gpu]


def test_a_disaggregated_rollout_stays_packed():
    composer = Composer(ConfigSource())
    over = [
        "cluster.device=cuda",
        "cluster.gpus_per_node=8",
        "actor.backend=megatron:t4",
        "rollout.backend=vllm:d2t2",
        "cluster.component_placement.actor=0-3",
        "cluster.component_placement.rollout=4-7",
    ]
    plan = build_plan(run_spec(composer, composer.compose(over, with_hydra=True)).config, 0).plan
    assert [i.gpus for i in plan.components["rollout"].instances] == [(4, 5), (6, 7)]


def test_the_gpu_map_shows_the_strided_instances():
    out = run(
        "plan",
        "cluster.device=cuda",
        "cluster.gpus_per_node=4",
        "actor.backend=megatron:t4",
        "rollout.backend=vllm:d2t2",
        "cluster.component_placement.actor=all",
        "cluster.component_placement.rollout=all",
    )
    assert out.returncode == 0, out.stderr
    assert re.search(r"rollout +\[R0\] \[R1\] \[R0\] \[R1\]", out.stdout), out.stdout


@pytest.mark.torch
def test_the_default_recipes_weight_push_follows_the_strided_map():
    from launcher.trainer.runtime import RuntimePlan
    from recipes.grpo.loop import reload_owners

    rt = RuntimePlan(collocated_plan("megatron:t4", "vllm:d2t2").to_dict())
    assert reload_owners(rt, 2) == {0: 0, 1: 1}  # instance 1's tp rank 0 is on GPU 1: rank 1
