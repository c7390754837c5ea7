"""What the launcher's hang watchdog relies on, from a real trainer job: a rank that heartbeats
through the runtime dumps every thread's Python stack into its log on SIGUSR2 and goes on, and
tests/hang_trainer.py (the watchdog's test entry) hangs one rank inside a step while the others
block in that step's collective. Real `areal-launch` runs, torchrun on gloo, no servers."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from launcher.trainer import progress
from tests.areal_launch import EXE, ROOT

pytestmark = pytest.mark.torch


def start(run_dir: Path, *env: str) -> subprocess.Popen:
    argv = [
        EXE,
        "rollout=none",
        "actor.backend=fsdp:d2",
        "trainer.entry=tests/hang_trainer.py",
        *(f"+launcher.env.{e}" for e in env),
        f"hydra.run.dir={run_dir}",
    ]
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait_for(check, within_s: float, proc: subprocess.Popen):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        assert proc.poll() is None, proc.communicate()[0][-4000:]
        time.sleep(0.05)
    raise AssertionError(f"not within {within_s}s")


def finish(proc: subprocess.Popen, timeout: float = 120) -> str:
    try:
        return proc.communicate(timeout=timeout)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_sigusr2_writes_every_threads_stack_to_the_ranks_log_and_it_keeps_running(tmp_path):
    run_dir = tmp_path / "run"
    proc = start(run_dir, "TRAINER_STEPS=40", "STEP_SECONDS=0.15")
    seen = wait_for(
        lambda: (p := progress.read_all(run_dir).get(1)) and p.step >= 3 and p, 180, proc
    )
    assert seen.stacks == "SIGUSR2" and seen.stack_signal == progress.STACK_SIGNAL
    os.kill(seen.pid, seen.stack_signal)  # what the watchdog sends to a rank that offers it
    out = finish(proc)
    assert proc.returncode == 0, out[-4000:]
    log = (run_dir / "logs" / "actor-node0.log").read_text()
    assert log.count("Current thread") == 1, log[-4000:]  # rank 1 alone, once
    dump = log[log.index("Current thread") :]
    assert 'File "' in dump and "hang_trainer.py" in dump and "in main" in dump
    assert "rank 1 step 40" in log  # it went on to the end
    last = progress.read_all(run_dir)
    assert {r: (p.step, p.phase) for r, p in last.items()} == {0: (40, "done"), 1: (40, "done")}


def test_hang_trainer_hangs_one_rank_inside_the_step_and_the_others_in_the_collective(tmp_path):
    run_dir = tmp_path / "run"
    proc = start(run_dir, "HANG_AT_STEP=3", "STEP_SECONDS=0.1")
    try:
        ranks = wait_for(
            lambda: (
                (r := progress.read_all(run_dir))
                and len(r) == 2
                and all(p.step == 3 for p in r.values())
                and r
            ),
            180,
            proc,
        )
        time.sleep(2.0)
        still = progress.read_all(run_dir)
        assert {r: (p.step, p.phase) for r, p in still.items()} == {
            0: (3, "train"),
            1: (3, "train"),
        }
        for rank in (0, 1):
            os.kill(ranks[rank].pid, signal.SIGUSR2)
            time.sleep(0.5)
        log = (run_dir / "logs" / "actor-node0.log").read_text()
        assert "rank 1 hangs inside step 3" in log and "rank 1 step 3" not in log
        dumps = log.split("Current thread")[1:]
        assert len(dumps) == 2, log[-4000:]
        assert "hang_inside_step" not in dumps[0] and "hang_inside_step" in dumps[1]
        assert "all_reduce" in dumps[0]  # rank 0 waits for rank 1 in the step's collective
        assert proc.poll() is None  # hung, not failed
    finally:
        os.kill(proc.pid, signal.SIGTERM)  # the launcher takes its trainers with it
        finish(proc)
    assert all(not Path(f"/proc/{p.pid}").exists() for p in ranks.values())
