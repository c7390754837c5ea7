"""The plan is the contract: trainers started by torchrun on a plan edited so its layout cannot
be trained as written stop at start, every rank, with ONE line naming the rank and the axis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.areal_launch import ROOT, run
from tests.test_recipe_e2e import free_port

pytestmark = pytest.mark.torch
MEGATRON_ENTRY = "recipes/grpo_megatron/train.py"


def plan_of(*overrides: str) -> dict:
    out = run("plan", "rollout=none", *overrides, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def torchrun(
    plan: dict, run_dir: Path, entry: str, nproc: int, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """The trainers as the launcher starts them (docs/architecture.md §7), on an edited plan."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "plan.json").write_text(json.dumps(plan))
    env = dict(
        os.environ,
        AREAL_LAUNCH_PLAN=str(run_dir / "plan.json"),
        AREAL_RUN_DIR=str(run_dir),
        AREAL_COMPONENT="actor",
        OMP_NUM_THREADS="1",
    )
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        entry,
        *args,
    ]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def grpo_lines(out: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in (out.stdout + out.stderr).splitlines() if ln.startswith("grpo: rank")]


def test_fsdp_plan_with_two_ranks_on_one_place_stops_every_rank_with_one_line(tmp_path):
    plan = plan_of("actor.backend=fsdp:d2")
    plan["components"]["actor"]["ranks"][1]["dp"] = 0  # rank 1 edited onto rank 0's place
    out = torchrun(plan, tmp_path / "run", "recipes/grpo/train.py", 2)
    assert out.returncode != 0
    assert grpo_lines(out) == [
        "grpo: rank 1: dp 0 cp 0 tp 0 is rank 0's place too in the actor plan"
    ], out.stdout + out.stderr
    assert not (tmp_path / "run" / "ranks").exists()  # nothing trained


def test_fsdp_trainers_started_with_another_world_than_the_plans_stop(tmp_path):
    out = torchrun(plan_of("actor.backend=fsdp:d2t2"), tmp_path / "run", "recipes/grpo/train.py", 2)
    assert out.returncode != 0
    assert grpo_lines(out) == [
        "grpo: rank 0: torchrun started 2 workers, the plan's actor has 4 ranks"
    ], out.stdout + out.stderr


def test_megatron_groups_other_than_the_plans_stop_every_rank_with_one_line(tmp_path):
    pytest.importorskip("megatron.core")
    plan = plan_of("actor.backend=megatron:d1t2p2")
    ranks = plan["components"]["actor"]["ranks"]
    # edited so pp varies fastest: Megatron (tp fastest) pairs ranks 0 and 1 in a tp group
    for entry, (tp, pp) in zip(ranks, [(0, 0), (0, 1), (1, 0), (1, 1)]):
        entry.update(tp=tp, pp=pp)
    out = torchrun(plan, tmp_path / "run", MEGATRON_ENTRY, 4)
    assert out.returncode != 0
    assert grpo_lines(out) == [
        "grpo: rank 0: tp group [0, 1] from Megatron's parallel state, the plan says [0, 2]"
    ], out.stdout + out.stderr


def test_megatron_flags_that_disagree_with_the_plan_stop_before_any_group(tmp_path):
    pytest.importorskip("megatron.core")
    out = torchrun(
        plan_of("actor.backend=megatron:d1t2p2"),
        tmp_path / "run",
        MEGATRON_ENTRY,
        4,
        ("--tensor-model-parallel-size", "4"),
    )
    assert out.returncode != 0
    assert (
        "grpo: --tensor-model-parallel-size 4 on the command line, the plan says tp 2"
        in out.stdout + out.stderr
    )


def test_fsdp_entry_refuses_a_megatron_layout_and_names_the_megatron_entry(tmp_path):
    out = torchrun(
        plan_of("actor.backend=megatron:d1t2p2"), tmp_path / "run", "recipes/grpo/train.py", 4
    )
    assert out.returncode != 0
    assert f"trainer.entry={MEGATRON_ENTRY}" in out.stderr
