"""Restarts of a run, kept in its run folder (docs/architecture.md §11): one record per restart,
shared by
every node's supervisor.

`<run folder>/restarts/<n>.json` is restart n (1, 2, ...): what failed, why, and what was
started again: "trainers" (every trainer job of the run, on every node, together), a server by
name (that server alone), or "requeue" (Slurm started the whole job again; not counted against
launcher.max_restarts, it was asked for). Records are created with O_EXCL, so two supervisors
that see the same trainer failure (a rank dies on one node, its peers fail on the others)
agree on one restart: the first to claim `trainers-<epoch>` writes the record, the others
follow it. Stdlib only; `status` reads the records too.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

FOLDER = "restarts"
TRAINERS = "trainers"
REQUEUE = "requeue"
QUICK_S = 60.0  # a failure this soon after the start, with the cause of the one before: backing off
BACKOFF_S = (5.0, 15.0, 45.0)  # waits before the 2nd, 3rd, 4th quick identical failure's restart


@dataclass(frozen=True)
class Failure:
    """One failure the supervisor saw: the process, the reason, how long it had run."""

    name: str  # the process that failed first (a trainer job's or server's name)
    kind: str  # TRAINERS, or the server's name
    reason: str  # "actor exited with code 1: rank 1 raised ValueError: boom"
    uptime_s: float
    tail: list[str] = field(default_factory=list)

    def same_cause(self, other: "RestartRecord") -> bool:
        return other.kind == self.kind and other.reason == self.reason


@dataclass(frozen=True)
class RestartRecord:
    """Restart n: what failed and what was started again."""

    n: int
    kind: str  # TRAINERS, a server's name, or REQUEUE
    name: str
    reason: str
    uptime_s: float
    time: float
    epoch: int = 0  # for TRAINERS: the trainers' restart count after this one
    tail: list[str] = field(default_factory=list)
    requeue: int = 0  # for REQUEUE: the Slurm restart count it led to (node/requeue.py)

    @property
    def counted(self) -> bool:
        """Against launcher.max_restarts (a requeue was asked for)."""
        return self.kind != REQUEUE

    def line(self) -> str:
        what = {TRAINERS: "the trainers", REQUEUE: "the job (requeued)"}.get(self.kind, self.kind)
        return f"restart {self.n}: {self.reason}; restarted {what}"


def folder(run_dir: str | Path) -> Path:
    return Path(run_dir) / FOLDER


def read_all(run_dir: str | Path) -> list[RestartRecord]:
    """Every restart of the run, in order (unreadable records are skipped)."""
    out = []
    base = folder(run_dir)
    for entry in base.glob("[0-9]*.json") if base.is_dir() else ():
        try:
            data = json.loads(entry.read_text())
            out.append(
                RestartRecord(
                    **{k: data[k] for k in RestartRecord.__dataclass_fields__ if k in data}
                )
            )
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return sorted(out, key=lambda r: r.n)


def counted(records: Sequence[RestartRecord]) -> int:
    return sum(r.counted for r in records)


def trainer_epoch(records: Sequence[RestartRecord]) -> int:
    """How many times the trainers were restarted (a requeue restarts them too)."""
    return sum(r.kind in (TRAINERS, REQUEUE) for r in records)


def starts_of(kind: str, records: Sequence[RestartRecord]) -> int:
    """How many times a process of `kind` (TRAINERS or a server's name) was started again:
    AREAL_RESTART for its next start."""
    if kind == TRAINERS:
        return trainer_epoch(records)
    return sum(r.kind in (kind, REQUEUE) for r in records)


def _create(path: Path, data: dict) -> bool:
    """Write `path` only if it does not exist yet; False when another writer was first."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    return True


def record(
    run_dir: str | Path, failure: Failure, kind: Optional[str] = None, requeue: int = 0
) -> RestartRecord:
    """Add restart n+1 for `failure` (kind: REQUEUE to record a requeue, `requeue` the Slurm
    restart count it led to)."""
    base = folder(run_dir)
    base.mkdir(parents=True, exist_ok=True)
    kind = kind or failure.kind
    while True:
        records = read_all(run_dir)
        n = max((r.n for r in records), default=0) + 1
        epoch = trainer_epoch(records) + (kind in (TRAINERS, REQUEUE))
        made = RestartRecord(
            n,
            kind,
            failure.name,
            failure.reason,
            round(failure.uptime_s, 1),
            time.time(),
            epoch,
            failure.tail[-20:],
            requeue,
        )
        if _create(base / f"{n}.json", asdict(made)):
            return made


def record_requeue(
    run_dir: str | Path, count: int, name: str, reason: str, uptime_s: float
) -> Optional[RestartRecord]:
    """The requeue that led to Slurm's restart `count` of the job, recorded once (None: it is
    already, by the warning before the time limit that asked for it, or by an earlier start)."""
    if any(r.kind == REQUEUE and r.requeue == count for r in read_all(run_dir)):
        return None
    return record(run_dir, Failure(name, REQUEUE, reason, uptime_s), REQUEUE, requeue=count)


def claim_trainer_restart(
    run_dir: str | Path, epoch: int, failure: Failure
) -> tuple[RestartRecord, bool]:
    """The record of the trainers' restart to `epoch`: made here (True) when this supervisor
    is the first to claim it, else the one another supervisor made (False)."""
    base = folder(run_dir)
    base.mkdir(parents=True, exist_ok=True)
    if _create(base / f"{TRAINERS}-{epoch}", {"time": time.time()}):
        return record(run_dir, failure, TRAINERS), True
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:  # the claimant writes its record right after
        found = [r for r in read_all(run_dir) if r.kind == TRAINERS and r.epoch == epoch]
        if found:
            return found[0], False
        time.sleep(0.05)
    return record(run_dir, failure, TRAINERS), True


def backoff_s(failure: Failure, records: Sequence[RestartRecord]) -> Optional[float]:
    """Seconds to wait before restarting after `failure`: 0 normally; BACKOFF_S[k-1] when it
    is the k-th failure in a row with the same cause, each soon after its start (an import
    error, a bad path: restarting at once would only loop); None when the waits are used up
    (give up: it will not get better)."""
    repeats = 0
    for previous in reversed([r for r in records if r.counted]):
        if not (failure.same_cause(previous) and previous.uptime_s < QUICK_S):
            break
        repeats += 1
    if failure.uptime_s >= QUICK_S or repeats == 0:
        return 0.0
    return BACKOFF_S[repeats - 1] if repeats <= len(BACKOFF_S) else None
