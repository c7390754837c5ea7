"""The launch command's own promises, through `areal-launch` run as a real subprocess."""

from __future__ import annotations

import json

import pytest

from tests.areal_launch import one_error_line, run

RANK_SCRIPT = """
import os, torch.distributed as dist
dist.init_process_group("gloo")
t = __import__("torch").ones(1)
dist.all_reduce(t)
rank, world, group = dist.get_rank(), dist.get_world_size(), os.environ['GROUP_RANK']
print(f"rank {rank} of {world} group {group} sum {int(t.item())}", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.torch
def test_a_cpu_plan_over_two_nodes_runs_both_nodes_here(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    out = run(
        "rollout=none",
        "actor.backend=fsdp:d2",
        "cluster.device=cpu",
        "cluster.num_nodes=2",
        "cluster.gpus_per_node=1",
        f"trainer.entry={script}",
        f"hydra.run.dir={tmp_path}/run",
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    logs = {p.name: p.read_text() for p in (tmp_path / "run" / "logs").glob("*.log")}
    assert set(logs) == {"actor-node0.log", "actor-node1.log"}
    assert "rank 0 of 2 group 0 sum 2" in logs["actor-node0.log"]
    assert "rank 1 of 2 group 1 sum 2" in logs["actor-node1.log"]


def test_a_gpu_plan_over_two_nodes_is_refused_locally_and_points_to_slurm(tmp_path):
    line = one_error_line(
        run(
            "cluster=gpu8",
            "cluster.num_nodes=2",
            "rollout=none",
            "actor.backend=fsdp:d16",
            f"hydra.run.dir={tmp_path}/run",
        )
    )
    assert "launcher=slurm" in line
    assert not (tmp_path / "run").exists()


def test_a_missing_trainer_entry_is_refused_before_anything_starts(tmp_path):
    line = one_error_line(run("trainer.entry=no/such/train.py", f"hydra.run.dir={tmp_path}/run"))
    assert "trainer.entry='no/such/train.py'" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "args, needle",
    [
        (("plan", "launcher.base_port=70000"), "launcher.base_port=70000"),
        (("plan", "--svg", "/no/such/dir/map.svg"), "--svg /no/such/dir/map.svg"),
        (("plan", "hydra.run.dir=${nope}"), "hydra.run.dir"),
        (("plan", "cluster.num_nodes=0"), "cluster.num_nodes"),
    ],
)
def test_more_bad_input_is_one_error_line(args, needle):
    assert needle in one_error_line(run(*args))


def test_exported_engine_defaults_and_launcher_env_reach_processes_but_not_the_contract():
    out = run(
        "plan",
        "--json",
        "+launcher.env.HF_TOKEN=secret",
        "+launcher.env.AREAL_COMPONENT=x",
        "launcher.env.PLAIN=1",  # a free dict takes a new key with or without Hydra's +
        env={"OMP_NUM_THREADS": "2"},
    )
    assert out.returncode == 0, out.stderr
    trainer = next(p for p in json.loads(out.stdout)["processes"] if p["role"] == "trainer")
    assert trainer["env"]["OMP_NUM_THREADS"] == "2"  # the user's shell wins over the default 1
    assert trainer["env"]["HF_TOKEN"] == "***"  # added, and masked where the plan is printed
    assert trainer["env"]["AREAL_COMPONENT"] == "actor"  # the launcher's contract wins
    assert trainer["env"]["PLAIN"] == "1"


def test_an_option_a_preset_set_does_not_block_switching_its_backend():
    out = run("plan", "--json", "experiment=gpu2x8_megatron", "rollout.backend=vllm:d2t4")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["components"]["rollout"]["backend"] == "vllm"


def test_plan_for_slurm_shows_the_addresses_the_job_will_use():
    out = run("plan", "--json", "launcher=slurm", "cluster=gpu8", "actor.backend=fsdp:d2")
    assert out.returncode == 0, out.stderr
    trainer = next(p for p in json.loads(out.stdout)["processes"] if p["role"] == "trainer")
    assert "127.0.0.1" not in trainer["env"]["AREAL_LLM_SERVER_ADDRS"]
