"""Slurm's requeue, for the batch shell: `python -m launcher.node.requeue started|warned ...`
(docs/architecture.md §11).

With launcher.requeue the batch script (runners/sbatch.py) runs the job's one step in the
background and calls this twice. `started`, as the job starts: a start after a requeue
(Slurm's restart count above 0: preemption, node failure, by hand, or our own requeue) is
recorded, once per restart count. `warned`, when Slurm signals the batch shell
launcher.requeue_signal_s before the time limit: it asks the trainers for a checkpoint with the
stop's bound (launcher.trainer.checkpoints, which owns the request's format), waits for it at
most `--wait` seconds, records the requeue and requeues the job (`scontrol requeue`). The job
starts again in the same run folder and the trainers resume from their newest checkpoint. A run
that ends meanwhile, or whose trainers say that checkpoint was their last step, is not
requeued: it finishes.

Records go through launcher.node.restarts, the one module that writes their format. Stdlib and
the launcher's own stdlib modules only: the batch shell runs it on the job's first node,
outside any container, with the launcher's own interpreter.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from launcher.node import restarts
from launcher.trainer import checkpoints

STARTED_AGAIN = "Slurm started the job again (a requeue: preemption, node failure or by hand)"
REQUEUED = "the time limit was near: checkpointed and requeued"
Say = Callable[[str], None]


@dataclass(frozen=True)
class Job:
    """The Slurm job the batch shell runs: its id and how many times Slurm restarted it."""

    job_id: str
    restarts: int

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "Job":
        count = environ.get("SLURM_RESTART_COUNT", "0")
        return cls(environ.get("SLURM_JOB_ID", "?"), int(count) if count.isdigit() else 0)

    @property
    def name(self) -> str:
        return f"job {self.job_id}"


def record_start(run_dir: Path, job: Job, uptime_s: float) -> Optional[restarts.RestartRecord]:
    """A start after a requeue, recorded unless that requeue is (None: nothing to record)."""
    if job.restarts == 0:
        return None
    return restarts.record_requeue(run_dir, job.restarts, job.name, STARTED_AGAIN, uptime_s)


@dataclass(frozen=True)
class Warned:
    """What `warned` is told: the stop's bound, how long to wait for the checkpoint, the step."""

    lead_s: int  # launcher.requeue_signal_s: the trainers hold at most this long after it
    wait_s: int  # how long the checkpoint may take (the lead less a margin for the requeue)
    step_pid: int  # the job's step (srun), a child of the batch shell
    uptime_s: float = 0.0  # how long the job had run when Slurm warned it


def on_warning(
    run_dir: Path,
    job: Job,
    warning: Warned,
    say: Say,
    requeue: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Checkpoint, then requeue the job, unless the run ends first or that checkpoint was the
    trainers' last step; whether it was requeued."""
    begun = time.monotonic()
    say(
        "the time limit is near: asking the trainers for a checkpoint, then requeueing "
        f"job {job.job_id}"
    )
    asked = checkpoints.request_checkpoint(run_dir, stop_within_s=warning.lead_s)
    for _ in range(warning.wait_s):
        if checkpoints.checkpoint_done(run_dir, asked):
            if checkpoints.checkpoint_final(run_dir, asked):
                say(
                    "the trainers saved their checkpoint at their last step: the job ends, "
                    "no requeue"
                )
                return False
            say("the trainers saved their checkpoint")
            break
        if not alive(warning.step_pid):
            say("the run ended before the time limit: no requeue")
            return False
        sleep(1)
    uptime_s = warning.uptime_s + time.monotonic() - begun
    restarts.record_requeue(run_dir, job.restarts + 1, job.name, REQUEUED, uptime_s)
    requeue(job.job_id)
    return True


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not reaped yet, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def scontrol_requeue(job_id: str) -> None:
    """Ask Slurm to requeue the job: it stops the step and starts the job again."""
    out = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True)
    if out.returncode != 0:
        say(f"scontrol requeue {job_id} failed: {out.stderr.strip() or out.returncode}")


def say(text: str) -> None:
    print(f"areal-launch: {text}", flush=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m launcher.node.requeue")
    ap.add_argument("event", choices=("started", "warned"))
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--uptime", type=float, default=0.0, help="seconds since the job started")
    ap.add_argument("--lead", type=int, default=0, help="warned: launcher.requeue_signal_s")
    ap.add_argument("--wait", type=int, default=0, help="warned: seconds for the checkpoint")
    ap.add_argument("--step", type=int, default=0, help="warned: the pid of the job's step")
    args = ap.parse_args(argv)
    job, run_dir = Job.from_env(os.environ), Path(args.run_dir)
    try:
        if args.event == "started":
            record_start(run_dir, job, args.uptime)
        else:
            warned = Warned(args.lead, args.wait, args.step, args.uptime)
            on_warning(run_dir, job, warned, say, scontrol_requeue)
    except OSError as exc:  # the run folder: the job goes on, without a requeue
        say(f"requeue: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
