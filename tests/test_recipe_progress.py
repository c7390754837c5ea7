"""The default recipe reports progress and honours the launcher's checkpoint request, in a real
`areal-launch rollout=none` run (two FSDP2 ranks on gloo): each rank's progress record moves
through the recipe's phases with increasing steps, and a request written mid-run is honoured by
every rank at the next step boundary (the checkpoint folder, then the .done file), after which
every rank holds for the stop the request announced, and goes on when none comes."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from launcher.trainer import checkpoints, progress
from tests.areal_launch import EXE, ROOT

pytestmark = pytest.mark.torch

STEPS = 10
HOLD_S = 2  # the request says the launcher stops the job within 2 s of the checkpoint


@pytest.fixture(scope="module")
def watched_run(tmp_path_factory, tiny_model):
    """The run, its progress records as sampled while it ran, and a checkpoint request made
    once rank 0 was at step 3: (run folder, samples, request id, output)."""
    run_dir = tmp_path_factory.mktemp("progress") / "run"
    argv = [
        EXE,
        "rollout=none",
        "actor.backend=fsdp:d2",
        f"recipe.steps={STEPS}",
        "recipe.save_every=0",
        "recipe.prompts_per_step=2",
        "recipe.samples_per_prompt=4",
        "recipe.max_new_tokens=8",
        f"hydra.run.dir={run_dir}",
    ]
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    samples: list[progress.Progress] = []
    request = None
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        now = progress.read_all(run_dir)
        samples += [p for p in now.values() if not samples or p not in samples[-4:]]
        if request is None and 0 in now and now[0].step >= 3:
            request = (checkpoints.request_checkpoint(run_dir, stop_within_s=HOLD_S), now[0].step)
        time.sleep(0.02)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, out[-4000:]
    samples += list(progress.read_all(run_dir).values())
    assert request is not None, out[-4000:]
    return run_dir, samples, request, out


def test_every_rank_heartbeats_each_phase_with_increasing_steps(watched_run):
    run_dir, samples, _, _ = watched_run
    for rank in (0, 1):
        mine = [p for p in samples if p.rank == rank]
        steps = [p.step for p in mine]
        assert steps == sorted(steps) and len(set(steps)) >= 4, steps  # seen moving, never back
        assert {p.phase for p in mine} >= {"rollout", "train", "push"}
        assert mine[-1].step == STEPS and mine[-1].phase == "done"
        assert {p.stacks for p in mine} == {"SIGUSR2"} and {p.restart for p in mine} == {0}
        assert len({p.pid for p in mine}) == 1


def test_a_checkpoint_request_mid_run_is_honoured_by_all_ranks_at_the_next_step_boundary(
    watched_run,
):
    run_dir, samples, (request_id, asked_at), out = watched_run
    assert checkpoints.checkpoint_done(run_dir, request_id)
    saved = [
        c
        for c in checkpoints.complete(run_dir / "checkpoints")
        if checkpoints.read_meta(c.path).get("reason") == "asked by the launcher"
    ]
    assert len(saved) == 1, out[-4000:]
    step, folder = saved[0]
    assert asked_at <= step <= asked_at + 1  # the step it was in when asked, or the next
    assert f"grpo: checkpoint checkpoints/step_{step} saved (asked by the launcher, " in out
    # every rank wrote its shards and RNG states into it: none skipped the save
    assert {p.name for p in folder.iterdir()} >= {
        "__0_0.distcp",
        "__1_0.distcp",
        "rng_0.pt",
        "rng_1.pt",
        ".metadata",
        "meta.json",
    }
    assert [c.step for c in checkpoints.complete(run_dir / "checkpoints")] == [step, STEPS]
    assert any(p.phase == "checkpoint" and p.step == step for p in samples if p.rank == 1)
    # the request announced a stop: every rank held after the checkpoint, then went on
    for rank in (0, 1):
        assert any(
            p.phase == "held for the stop" and p.step == step for p in samples if p.rank == rank
        ), rank
    assert out.count(f"step {step}: the launcher stops this job within {HOLD_S} s") == 1
    assert out.count(f"step {step}: no stop came within {HOLD_S} s: going on") == 1  # rank 0
