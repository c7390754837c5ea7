"""Runs that survive, end to end (docs/architecture.md §11): the default run (a real vLLM CPU
server, two
FSDP2 ranks on gloo) through the real CLI, with launcher.max_restarts=2, in one run (one vLLM
start-up less):

- A trainer rank SIGKILLed after its step-3 checkpoint: the trainers restart and resume from
  that checkpoint, the server is not restarted (same pid).
- Then the vLLM server SIGKILLed: a new server on the same slot, the trainers (not restarted)
  give it their current weights (reload confirmed) before they sample from it; all 8 steps done.
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

from launcher.trainer import checkpoints, progress
from tests.areal_launch import EXE, ROOT

pytestmark = [pytest.mark.vllm, pytest.mark.torch]
START_S = 600  # the server's start on two busy cores, then the steps


def launch(run_dir: Path, *overrides: str) -> subprocess.Popen:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.Popen(
        [EXE, f"hydra.run.dir={run_dir}", *overrides],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_until(check: Callable[[], object], proc: subprocess.Popen, within_s: float) -> object:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        if proc.poll() is not None:
            raise AssertionError(
                f"the run ended ({proc.returncode}) first:\n"
                + (proc.stdout.read() if proc.stdout else "")[-4000:]
            )
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
    return [json.loads(p.read_text()) for p in sorted((run_dir / "restarts").glob("[0-9]*.json"))]


def saved(run_dir: Path, step: int) -> bool:
    latest = checkpoints.latest(checkpoints.root(run_dir))
    return latest is not None and latest.step >= step


@pytest.mark.timeout(1200)
def test_a_killed_trainer_restarts_the_trainers_and_a_killed_server_restarts_alone(tmp_path):
    """One run of 8 steps with launcher.max_restarts=2: a trainer rank SIGKILLed after the
    step-3 checkpoint, then (the trainers resumed) the server SIGKILLed after the step-5 one."""
    run_dir = tmp_path / "run"
    proc = launch(run_dir, "recipe.steps=8", "launcher.max_restarts=2")
    wait_until(lambda: saved(run_dir, 3), proc, START_S)
    server_pid = processes(run_dir)["rollout-0"]["pid"]
    resumed_from = checkpoints.latest(checkpoints.root(run_dir)).step
    os.kill(progress.read_all(run_dir)[1].pid, signal.SIGKILL)
    # the trainers restart and resume; the server keeps serving (same pid)
    wait_until(
        lambda: (
            processes(run_dir)["actor-node0"]["restart"] == 1 and saved(run_dir, resumed_from + 2)
        ),
        proc,
        START_S,
    )
    assert processes(run_dir)["rollout-0"]["pid"] == server_pid
    trainer_pid = processes(run_dir)["actor-node0"]["pid"]
    os.kill(server_pid, signal.SIGKILL)
    out = finish(proc)
    assert "restart 1 of 2: actor-node0" in out, out[-4000:]
    after = out.split("trainers started again (restart 1)")[1]
    assert (
        f"grpo: resumed from step {resumed_from} (checkpoints/step_{resumed_from}), "
        "restart 1" in after
    )
    assert f"step {resumed_from + 1}/8" in after and "step 8/8" in after
    assert f"step {resumed_from}/8 " not in after
    assert f"grpo done: steps 8 ({resumed_from + 1}-8 after resuming)" in after
    assert "reload confirmed 1/1" in after
    # the server restarts alone; the trainers give the fresh server their current weights
    assert "restart 2 of 2: rollout-0 killed by SIGKILL" in out, out[-4000:]
    assert "rollout-0 started again (pid" in out
    refreshed = [
        ln
        for ln in out.splitlines()
        if "serves weight version 'default', not v" in ln and "pushing" in ln
    ]
    assert refreshed, out[-4000:]  # re-pushed to the fresh server (then confirmed, or it fails)
    final = processes(run_dir)
    assert final["actor-node0"]["pid"] == trainer_pid and final["actor-node0"]["restart"] == 1
    assert final["actor-node0"]["exit"] == 0
    assert final["rollout-0"]["restart"] == 1 and final["rollout-0"]["pid"] != server_pid
    assert [(r["kind"], r["name"]) for r in restart_records(run_dir)] == [
        ("trainers", "actor-node0"),
        ("rollout-0", "rollout-0"),
    ]
