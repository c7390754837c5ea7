"""What one trainer crash costs with launcher.max_restarts against a full relaunch, in one run
(docs/benchmarks.md). Goal: at most 0.5x.

The default run (a vLLM CPU server, two FSDP2 ranks on gloo, the tiny model) through the real
CLI with recipe.steps=6 and launcher.max_restarts=1. From that one run:
  - full relaunch: the launch to the first training step completed (what starting the run
    again costs before any step: the server's start, the trainers' start, the first step);
  - one crash: a trainer rank SIGKILLed once its step-3 checkpoint exists, to the next step
    completed (the trainers restart and resume; the server keeps serving).
Both end at a step's completion, read from the trainers' progress records
(launcher.trainer.progress);
the step's own duration is in both. --repeat N runs it N times and reports each.

Usage: python benchmarks/bench_restart.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from launcher.trainer import (
    checkpoints,
    progress,
)

EXE = str(Path(sys.executable).parent / "areal-launch")
LIMIT_S = 900


def step_done(run_dir: Path) -> int:
    """The lowest step every rank has completed, from the progress records (a record holds the
    step in progress, save in its checkpoint and done phases, which come after the step)."""
    records = progress.read_all(run_dir).values()
    done = [r.step if r.phase in ("checkpoint", "done") else r.step - 1 for r in records]
    return min(done) if len(done) >= 2 else 0


def wait(check, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + LIMIT_S
    while not check():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"bench_restart: the run ended or timed out waiting for {what}")
        time.sleep(0.05)


def once(work: Path) -> tuple[float, float]:
    run_dir = work / "run"
    begun = time.monotonic()
    proc = subprocess.Popen(
        [EXE, "recipe.steps=6", "launcher.max_restarts=1", f"hydra.run.dir={run_dir}"],
        cwd=ROOT,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait(lambda: step_done(run_dir) >= 1, proc, "the first step")
    full = time.monotonic() - begun

    def saved(k: int) -> bool:
        latest = checkpoints.latest(checkpoints.root(run_dir))
        return latest is not None and latest.step >= k

    wait(lambda: saved(3), proc, "the step-3 checkpoint")
    resumed = checkpoints.latest(checkpoints.root(run_dir))
    assert resumed is not None
    victim = progress.read_all(run_dir)[1].pid
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    # the restarted trainers start at step 0 in their records, then resume past the checkpoint
    wait(
        lambda: (
            step_done(run_dir) > resumed.step
            and all(r.restart >= 1 for r in progress.read_all(run_dir).values())
        ),
        proc,
        "the first step after the restart",
    )
    lost = time.monotonic() - killed
    if proc.wait(timeout=LIMIT_S) != 0:
        raise SystemExit(f"bench_restart: the run failed; see {run_dir}/logs")
    return full, lost


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    print(
        "| run | full relaunch (launch -> step 1) | one trainer crash (kill -> next step) | ratio |"
    )
    print("|---|---:|---:|---:|")
    for n in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="bench-restart-") as work:
            full, lost = once(Path(work))
        print(f"| {n + 1} | {full:.1f} s | {lost:.1f} s | {lost / full:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
