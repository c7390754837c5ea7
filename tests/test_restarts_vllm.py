"""Runs that survive, end to end (DESIGN §11): the default run (a real vLLM CPU server, two
FSDP2 ranks on gloo) through the real CLI, with launcher.max_restarts=1.

- A trainer rank SIGKILLed after its step-3 checkpoint: the trainers restart and resume from
  that checkpoint, the server is never restarted (same pid), all 6 steps get done.
- The vLLM server SIGKILLed mid-run: a new server on the same slot, the trainers give it their
  current weights (reload confirmed) before they sample from it, the run finishes.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest

from launcher import checkpoints, progress
from tests.areal_launch import EXE, ROOT

pytestmark = [pytest.mark.vllm, pytest.mark.torch]
START_S = 600  # the server's start on two busy cores, then the steps


def launch(run_dir: Path, *overrides: str) -> subprocess.Popen:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.Popen([EXE, "recipe.steps=6", "launcher.max_restarts=1",
                             f"hydra.run.dir={run_dir}", *overrides], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_until(check: Callable[[], object], proc: subprocess.Popen, within_s: float) -> object:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        if proc.poll() is not None:
            raise AssertionError(f"the run ended ({proc.returncode}) first:\n"
                                 + (proc.stdout.read() if proc.stdout else "")[-4000:])
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("timed out:\n" + (proc.stdout.read() if proc.stdout else "")[-4000:])


def processes(run_dir: Path) -> dict[str, dict]:
    data = json.loads((run_dir / "status" / "all.json").read_text())
    return {p["name"]: p for p in data["processes"]}


def finish(proc: subprocess.Popen) -> str:
    try:
        out, _ = proc.communicate(timeout=START_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError("the run did not end:\n" + out[-4000:])
    assert proc.returncode == 0, out[-6000:]
    return out


def restart_records(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text())
            for p in sorted((run_dir / "restarts").glob("[0-9]*.json"))]


@pytest.mark.timeout(900)
def test_a_killed_trainer_rank_restarts_the_trainers_while_the_server_keeps_serving(tmp_path):
    run_dir = tmp_path / "run"
    proc = launch(run_dir)
    wait_until(lambda: checkpoints.latest(checkpoints.root(run_dir)) and
               checkpoints.latest(checkpoints.root(run_dir)).step >= 3, proc, START_S)
    server_pid = processes(run_dir)["rollout-0"]["pid"]
    resumed_from = checkpoints.latest(checkpoints.root(run_dir)).step
    victim = progress.read_all(run_dir)[1].pid
    os.kill(victim, signal.SIGKILL)
    out = finish(proc)
    assert "restart 1 of 1: actor-node0" in out, out[-4000:]
    after = out.split("trainers started again (restart 1)")[1]
    assert f"grpo: resumed from step {resumed_from} (checkpoints/step_{resumed_from}), " \
        "restart 1" in after
    assert f"step {resumed_from + 1}/6" in after and "step 6/6" in after
    assert f"step {resumed_from}/6 " not in after
    assert f"grpo done: steps 6 ({resumed_from + 1}-6 after resuming)" in after
    assert "reload confirmed 1/1" in after
    final = processes(run_dir)
    assert final["rollout-0"]["pid"] == server_pid and final["rollout-0"]["restart"] == 0
    assert final["actor-node0"]["restart"] == 1 and final["actor-node0"]["exit"] == 0
    assert [(r["kind"], r["name"]) for r in restart_records(run_dir)] == \
        [("trainers", "actor-node0")]


@pytest.mark.timeout(1200)
def test_a_killed_server_restarts_alone_and_serves_the_trainers_weights(tmp_path):
    run_dir = tmp_path / "run"
    proc = launch(run_dir)
    wait_until(lambda: checkpoints.latest(checkpoints.root(run_dir)) and
               checkpoints.latest(checkpoints.root(run_dir)).step >= 2, proc, START_S)
    before = processes(run_dir)
    trainer_pid = before["actor-node0"]["pid"]
    os.kill(before["rollout-0"]["pid"], signal.SIGKILL)
    out = finish(proc)
    assert "restart 1 of 1: rollout-0 killed by SIGKILL" in out, out[-4000:]
    assert "rollout-0 started again (pid" in out
    refreshed = [ln for ln in out.splitlines() if "serves weight version 'default', not v" in ln
                 and "pushing" in ln]
    assert refreshed, out[-4000:]  # re-pushed to the fresh server (then confirmed, or it fails)
    assert "grpo done: steps 6" in out
    final = processes(run_dir)
    assert final["actor-node0"]["pid"] == trainer_pid and final["actor-node0"]["restart"] == 0
    assert final["rollout-0"]["restart"] == 1
    assert final["rollout-0"]["pid"] != before["rollout-0"]["pid"]
    assert [(r["kind"], r["name"]) for r in restart_records(run_dir)] == \
        [("rollout-0", "rollout-0")]
