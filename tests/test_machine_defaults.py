"""What a user meets first on their machine: a default sized for it, the GPUs their mask shows,
advice that works there, and a dry run that is exactly the launch."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from launcher.runners import local, slurm
from launcher.spec.request import LaunchRequest
from tests.areal_launch import one_error_line, run

ROOT = Path(__file__).resolve().parent.parent


def plan_on(gpus: str, *args: str) -> dict:
    """The plan on a machine showing `gpus` (80 GB each: this one has no NVML to ask)."""
    memory = ("cluster.gpu_memory_gib=79",) if gpus else ()
    out = run("plan", "--json", *memory, *args, env={"CUDA_VISIBLE_DEVICES": gpus})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def layout(plan: dict) -> dict:
    return {n: (c["spec"], c["gpus"]) for n, c in plan["components"].items()}


# ----------------------------------------------------------------------------- sizing
def test_no_gpu_gets_the_cpu_demo():
    plan = plan_on("")
    assert plan["cluster"]["device"] == "cpu"
    assert layout(plan) == {"rollout": ("vllm:d1", [0]), "actor": ("fsdp:d2", [1, 2])}


def test_one_gpu_collocates_rollout_and_actor_each_releasing_memory_between_phases():
    plan = plan_on("0")
    assert plan["cluster"] == {"num_nodes": 1, "gpus_per_node": 1, "device": "cuda"}
    assert plan["mode"] == "collocated"
    assert layout(plan) == {"rollout": ("vllm:d1", [0]), "actor": ("fsdp:d1", [0])}
    options = plan["engine_options"]
    assert options["rollout"]["offload"] is True
    assert options["actor"]["offload"] == {"optimizer": True, "weight": True, "grad": False}
    assert plan["warnings"] == []  # released between phases: nothing competes


@pytest.mark.parametrize(
    "gpus, rollout, actor",
    [
        ("0,1", ("vllm:d1", [0]), ("fsdp:d1", [1])),
        ("0,1,2", ("vllm:d1", [0]), ("fsdp:d2", [1, 2])),
        ("0,1,2,3", ("vllm:d2", [0, 1]), ("fsdp:d2", [2, 3])),
        ("0,1,2,3,4,5,6,7", ("vllm:d4", [0, 1, 2, 3]), ("fsdp:d4", [4, 5, 6, 7])),
    ],
)
def test_more_gpus_are_split_between_rollout_and_actor(gpus, rollout, actor):
    plan = plan_on(gpus)
    assert plan["mode"] == "disaggregated" and plan["warnings"] == []
    assert layout(plan) == {"rollout": rollout, "actor": actor}


def test_a_bare_backend_takes_what_the_other_engines_leave():
    plan = plan_on("0,1,2,3,4,5,6,7", "actor.backend=fsdp:d6", "rollout.backend=sglang")
    assert layout(plan) == {
        "rollout": ("sglang:d2", [0, 1]),
        "actor": ("fsdp:d6", [2, 3, 4, 5, 6, 7]),
    }


def test_a_bare_backend_with_no_gpu_left_shares_the_others_and_releases_memory():
    plan = plan_on("0,1,2,3", "actor.backend=fsdp:d4")
    assert plan["mode"] == "collocated"
    assert layout(plan) == {
        "rollout": ("vllm:d4", [0, 1, 2, 3]),
        "actor": ("fsdp:d4", [0, 1, 2, 3]),
    }
    assert plan["engine_options"]["rollout"]["offload"] is True


@pytest.mark.parametrize(
    "placement, rollout, actor",
    [
        (("rollout=all", "actor=all"), ("vllm:d8", list(range(8))), ("fsdp:d8", list(range(8)))),
        (("rollout=0-3", "actor=4-7"), ("vllm:d4", [0, 1, 2, 3]), ("fsdp:d4", [4, 5, 6, 7])),
    ],
)
def test_placed_bare_backends_take_their_world_from_the_gpus_they_are_placed_on(
    placement, rollout, actor
):
    """RLinf's way: the placement says where, the world size follows (it was an IndexError)."""
    plan = plan_on("", "cluster=gpu8", *(f"cluster.component_placement.{p}" for p in placement))
    assert layout(plan) == {"rollout": rollout, "actor": actor}


def test_the_plan_says_what_it_sized():
    out = run("plan", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert "note: sized for 2 GPU(s): rollout.backend=vllm:d1 actor.backend=fsdp:d1" in out.stderr


# ----------------------------------------------------------------------------- advice
def test_on_a_one_gpu_machine_the_advice_is_smaller_backends_not_more_nodes():
    line = one_error_line(
        run(
            "plan",
            "actor.backend=fsdp:d2",
            "rollout.backend=vllm:d1",
            env={"CUDA_VISIBLE_DEVICES": "0"},
        )
    )
    assert "on 1 GPU(s) with the local runner" in line and "actor.backend=fsdp:d1" in line
    assert "num_nodes" not in line


def test_on_a_small_machine_the_advice_offers_sharing_the_gpus():
    line = one_error_line(
        run(
            "plan",
            "actor.backend=fsdp:d2",
            "rollout.backend=vllm:d2",
            env={"CUDA_VISIBLE_DEVICES": "0,1"},
        )
    )
    assert "cluster.component_placement.rollout=all cluster.component_placement.actor=all" in line
    assert "rollout.offload=true actor.offload.weight=true" in line
    assert "num_nodes" not in line


def test_where_the_runner_has_nodes_the_advice_is_more_nodes():
    line = one_error_line(
        run(
            "plan",
            "launcher=slurm",
            "cluster=gpu8",
            "actor.backend=fsdp:d16",
            "rollout.backend=vllm:d1",
        )
    )
    assert "set cluster.num_nodes=3" in line


# ----------------------------------------------------------------------------- the mask
@pytest.mark.vllm  # a dry run checks what the processes need is installed
@pytest.mark.torch
@pytest.mark.parametrize(
    "mask, first, second, actor",
    [
        ("4,5,6,7", "4", "5", "6,7"),
        ("GPU-a1,GPU-b2,MIG-c3,GPU-d4", "GPU-a1", "GPU-b2", "MIG-c3,GPU-d4"),
    ],
)
def test_children_get_the_gpus_the_users_mask_shows(tiny_model, mask, first, second, actor):
    out = run("launcher.dry_run=true", "cluster.device=cuda", env={"CUDA_VISIBLE_DEVICES": mask})
    assert out.returncode == 0, out.stderr
    seen = {
        block.split(":")[0][2:]: re.search(r"CUDA_VISIBLE_DEVICES=(\S+)", block).group(1)
        for block in out.stdout.split("\n\n")
    }
    assert seen == {"rollout-0": first, "rollout-1": second, "actor-node0": actor}


# ----------------------------------------------------------------------------- dry run
@pytest.mark.torch
def test_a_dry_run_writes_nothing(tmp_path):
    out = run("launcher.dry_run=true", "rollout=none", f"hydra.run.dir={tmp_path}/run")
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "run").exists()


def test_a_dry_run_refuses_what_the_launch_refuses(tmp_path):
    args = ("cluster=gpu8", "cluster.num_nodes=2", "rollout=none", "actor.backend=fsdp:d16")
    assert one_error_line(run("launcher.dry_run=true", *args)) == one_error_line(run(*args))


TRAINER = "import os\nprint('rank', os.environ['RANK'], flush=True)\n"


def without_run_id(text: str, run_id: str) -> str:
    """What differs between two launches by design left out: the run's id and its rendezvous
    port (another launch on a busy machine may take the first one free between the two)."""
    return re.sub(r"--master-port \d+", "--master-port PORT", text.replace(run_id, "RUN"))


@pytest.mark.torch
def test_what_a_local_dry_run_prints_is_what_the_launch_runs(tmp_path):
    entry = tmp_path / "train.py"
    entry.write_text(TRAINER)
    from launcher.node.ports import PortReserver

    with PortReserver() as r:
        base = r.take() + 100
    args = (
        "rollout=none",
        "actor.backend=fsdp:d2",
        f"trainer.entry={entry}",
        f"launcher.base_port={base}",
        f"hydra.run.dir={tmp_path}/run",
    )
    printed = run("launcher.dry_run=true", *args)
    assert printed.returncode == 0, printed.stderr
    launched = run(*args, timeout=180)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    request = LaunchRequest.from_dict(json.loads((tmp_path / "run" / "request.json").read_text()))
    executed = local.Runner(local.Config()).dryrun(request)
    shown_id = re.search(r"AREAL_LAUNCH_RUN=(\w+)", printed.stdout).group(1)
    assert without_run_id(printed.stdout, shown_id) == without_run_id(executed, request.run_id)


@pytest.mark.slurm
def test_what_a_slurm_dry_run_prints_is_what_the_job_runs(tmp_path, monkeypatch, slurm_cluster):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    entry = tmp_path / "train.py"
    entry.write_text(TRAINER)
    args = (
        "launcher=slurm",
        "cluster=gpu8",
        "rollout=none",
        "actor.backend=fsdp:d2",
        f"trainer.entry={entry}",
        "cluster.device=cpu",
        f"hydra.run.dir={tmp_path}/run",
        "+launcher.env.HF_TOKEN=hf_secret",
    )
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    printed = run("launcher.dry_run=true", *args, env=env)
    assert printed.returncode == 0, printed.stderr
    submitted = run(*args, env=env)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().splitlines()[-1]
    assert os.system(f"scancel {job} >/dev/null 2>&1") == 0
    run_dir = tmp_path / "run"
    request = LaunchRequest.from_dict(json.loads((run_dir / "request.json").read_text()))
    assert "hf_secret" not in printed.stdout  # printed masked, submitted whole
    assert request.processes[0].env["HF_TOKEN"] == "hf_secret"
    executed = slurm.Runner(slurm.Config()).dryrun(request)
    shown_id = re.search(r'"run_id": "(\w+)"', printed.stdout).group(1)
    assert without_run_id(printed.stdout, shown_id) == without_run_id(executed, request.run_id)
    script = printed.stdout.split(f"\n# {run_dir}/request.json")[0]
    assert (run_dir / "job.sbatch").read_text() == script
