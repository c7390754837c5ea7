"""Trainer progress (heartbeats) and stack dumps on request (docs/architecture.md §11).

Each trainer rank keeps `<run folder>/progress/<job>.<rank>.json` current (`<rank>.json` for a
process started without AREAL_COMPONENT): {"rank", "pid", "step", "phase", "time", "restart",
"stacks", "host", "job"}, replaced atomically (temporary file, then os.replace), so a reader
never sees half a record. The job is the trainer job's engines (AREAL_COMPONENT: "actor",
"actor2", "inference", "actor,ref"): a run of several trainer jobs has a rank 0 in each. The
launcher's hang watchdog and `status` read them with `read_jobs` (every job) or `read_all`
(one job's, by rank). "stacks" names the signal the process answers with a dump of
all its threads' Python stacks on its stderr (its log file), or null: the launcher sends
STACK_SIGNAL only to processes that said they handle it (an unhandled SIGUSR2 kills).

Stdlib only: the launcher imports it, and so does every trainer (through launcher.trainer.runtime).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Union

FOLDER = "progress"  # under the run folder
STACK_SIGNAL = signal.SIGUSR2  # a trainer that registered it dumps every thread's stack

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Progress:
    """What one trainer rank last said it was doing."""

    rank: int
    pid: int
    step: int
    phase: str  # the recipe's: setup, resume, rollout, train, push, checkpoint, done ...
    time: float  # time.time() of the record
    restart: int  # the job's restart count (AREAL_RESTART)
    stacks: Optional[str] = None  # "SIGUSR2" when the process dumps its stacks on it
    host: str = ""  # where `pid` lives
    job: str = ""  # the trainer job (AREAL_COMPONENT); "" when not told

    @property
    def stack_signal(self) -> Optional[signal.Signals]:
        """The signal to send for a stack dump, or None when the process did not offer one."""
        try:
            return signal.Signals[self.stacks] if self.stacks else None
        except KeyError:
            return None

    def age_s(self, now: Optional[float] = None) -> float:
        return (time.time() if now is None else now) - self.time

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Progress":
        return cls(
            rank=int(data["rank"]),
            pid=int(data["pid"]),
            step=int(data["step"]),
            phase=str(data["phase"]),
            time=float(data["time"]),
            restart=int(data.get("restart", 0)),
            stacks=data.get("stacks") or None,
            host=str(data.get("host", "")),
            job=str(data.get("job", "")),
        )


def folder(run_dir: PathLike) -> Path:
    return Path(run_dir) / FOLDER


def path(run_dir: PathLike, rank: int, job: str = "") -> Path:
    """`<run folder>/progress/<job>.<rank>.json` (`<rank>.json` without a job)."""
    return folder(run_dir) / (f"{job}.{int(rank)}.json" if job else f"{int(rank)}.json")


def write(run_dir: PathLike, record: Progress) -> Path:
    """Replace the rank's record atomically."""
    target = path(run_dir, record.rank, record.job)
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    part.write_text(json.dumps(asdict(record)) + "\n")
    os.replace(part, target)
    return target


def read_jobs(run_dir: PathLike) -> dict[str, dict[int, Progress]]:
    """Every rank's last record, by trainer job, then rank; a missing folder or an unreadable
    file reads as nothing (a rank that never reported has no entry)."""
    out: dict[str, dict[int, Progress]] = {}
    base = folder(run_dir)
    if not base.is_dir():
        return out
    for entry in base.glob("*.json"):
        try:
            record = Progress.from_dict(json.loads(entry.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.setdefault(record.job, {})[record.rank] = record
    return {job: dict(sorted(ranks.items())) for job, ranks in sorted(out.items())}


def read_all(run_dir: PathLike, job: Optional[str] = None) -> dict[int, Progress]:
    """One trainer job's records, by rank; job None: the first job by name (a run of one
    trainer job, the actor's, has only that one)."""
    jobs = read_jobs(run_dir)
    if job is None:
        return next(iter(jobs.values()), {})
    return jobs.get(job, {})


def enable_stack_dumps() -> str:
    """Make STACK_SIGNAL dump every thread's Python stack to stderr and carry on (it would
    kill the process otherwise); the signal's name, for the progress record."""
    faulthandler.register(STACK_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
    return STACK_SIGNAL.name


def record(
    rank: int, step: int, phase: str, restart: int, stacks: Optional[str], job: str = ""
) -> Progress:
    """This process's record now."""
    return Progress(
        rank=int(rank),
        pid=os.getpid(),
        step=int(step),
        phase=str(phase),
        time=time.time(),
        restart=int(restart),
        stacks=stacks,
        host=socket.gethostname(),
        job=job,
    )
