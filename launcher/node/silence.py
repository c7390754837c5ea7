"""The hang watchdog for trainer jobs that write no heartbeats (docs/architecture.md §11).

An entry point that is not ours (another project's trainer) writes no progress records, so
watchdog.py never arms for it. This one reads what any process shows from outside, once a
second, per trainer job (the job's torchrun on each node this supervisor runs):

- its ranks: the topmost processes below its torchrun(s) whose environment holds torchrun's
  RANK and LOCAL_RANK; a rank's CPU time is that of its whole tree (/proc/<pid>/stat, the
  children it waited for included);
- its output: the size of its log file(s), where the supervisor sends the ranks' stdout/stderr.

A job is hung when (a) neither its output grew nor any rank worked (used more than IDLE_SHARE
of one core since the job's last progress: a rank blocked in a collective still spends a little
on its background threads, about 0.5 % in the trainers measured) for hang_timeout_s, or
(b) a rank ended and others still run hang_timeout_s later. torchrun itself stops the other
ranks when one exits non-zero, and the supervisor sees a node's torchrun exit, so what (b)
catches is a rank that returned 0 (its error logged and swallowed) while its peers wait for it;
peers that are finishing legitimately (rank 0 writing the final model) get the same patience as
silence does, so the grace is hang_timeout_s itself. While one of the node's servers is not
healthy yet the silence clock waits: the server's health deadline is watched already;
so does it while a server of the run on another node does not answer yet, up to that
deadline (supervisor.RemoteServers: a trainer may wait for it silently).

A job whose ranks have written a heartbeat (this start's) is watchdog.py's, exactly as before.
Tracker is the decision, over samples only (no I/O), so it is tested on its own.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from launcher.node import keeper
from launcher.node.watchdog import CHECK_EVERY_S, RankStacks

SILENT = "silent"  # (a): no output, no CPU time
TICKS_PER_S = float(os.sysconf("SC_CLK_TCK"))
IDLE_SHARE = 0.05  # of one core: less is a rank waiting (its pollers), not working
ENDED = "ended"  # (b): a rank ended, others run on


@dataclass(frozen=True)
class RankSample:
    rank: int  # torchrun's RANK (global)
    pid: int
    cpu_ticks: int  # the rank's tree


@dataclass(frozen=True)
class Sample:
    """One look at a job: when (time.monotonic()), its log bytes, its live ranks."""

    at: float
    output: int
    ranks: tuple[RankSample, ...]
    waiting: bool = False  # a server of the run is not healthy yet
    expected: tuple[int, ...] = ()  # the ranks the job runs here: one never seen has ended too


@dataclass(frozen=True)
class Verdict:
    kind: str  # SILENT or ENDED
    for_s: float  # how long silent, or since the first rank ended
    running: tuple[int, ...]  # the ranks still running
    ended: tuple[int, ...] = ()


@dataclass
class Tracker:
    """One job's start, sample by sample: hung or not (module doc)."""

    timeout_s: float
    since: Optional[float] = None  # the last progress; None until a rank was seen
    output: int = -1
    cpu: dict[int, int] = field(default_factory=dict)
    pids: dict[int, int] = field(default_factory=dict)  # every rank seen, its last pid
    ended_at: dict[int, float] = field(default_factory=dict)
    base: dict[int, int] = field(default_factory=dict)  # each rank's CPU at the last progress
    ticks_per_s: float = 100.0  # /proc's clock ticks (SC_CLK_TCK)

    def observe(self, s: Sample) -> Optional[Verdict]:
        alive = {r.rank: r for r in s.ranks}
        if not alive and not self.pids:
            return None  # no rank yet (torchrun starting): nothing to call hung
        for rank in {*self.pids, *s.expected}:  # a rank may end before the first look
            if rank in alive:
                self.ended_at.pop(rank, None)  # back (a new worker of that rank)
            else:
                self.ended_at.setdefault(rank, s.at)
        cpu = {rank: r.cpu_ticks for rank, r in alive.items()}
        idle = IDLE_SHARE * self.ticks_per_s * (0.0 if self.since is None else s.at - self.since)
        worked = any(k not in self.base or v - self.base[k] > idle for k, v in cpu.items())
        moved = s.output != self.output or worked
        if moved or s.waiting or self.since is None:
            self.since, self.base = s.at, dict(cpu)
        self.output, self.cpu = s.output, cpu
        self.pids.update({rank: r.pid for rank, r in alive.items()})
        if not alive:
            return None  # all ended: torchrun exits, and the supervisor sees that
        running = tuple(sorted(alive))
        if self.ended_at:
            first = min(self.ended_at.values())
            if s.at - first >= self.timeout_s:
                return Verdict(ENDED, s.at - first, running, tuple(sorted(self.ended_at)))
        if s.at - self.since >= self.timeout_s:
            return Verdict(SILENT, s.at - self.since, running)
        return None


@dataclass(frozen=True)
class Job:
    """A trainer job as the supervisor runs it on this node: its torchruns and their logs."""

    name: str  # its component(s): "actor", "actor,ref"
    roots: tuple[int, ...]  # pids of its torchruns still running
    logs: tuple[Path, ...]
    ranks: tuple[int, ...] = ()  # the global ranks its torchruns here run


@dataclass
class Found:
    """A hung job: the verdict, each rank's pid and torchrun (root) pid."""

    job: Job
    verdict: Verdict
    pids: dict[int, int]
    roots: dict[int, int]


def environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode("utf-8", "replace").partition("=") for item in raw.split(b"\0"))
    return {k: v for k, _, v in pairs if k}


def _rank_of(pid: int) -> Optional[int]:
    env = environ(pid)
    if "LOCAL_RANK" not in env:
        return None
    try:
        return int(env.get("RANK", ""))
    except ValueError:
        return None


@dataclass
class SilentWatch:
    """Every trainer job of the node without heartbeats, sampled into its Tracker."""

    timeout_s: float
    trackers: dict[str, Tracker] = field(default_factory=dict)
    reporting: set[str] = field(default_factory=set)  # jobs that heartbeat: watchdog.py's
    ranks: dict[int, Optional[int]] = field(default_factory=dict)  # pid -> RANK (cache)
    _next: float = 0.0

    def rearm(self) -> None:
        """A new start of the trainers: nothing seen yet."""
        self.trackers.clear()
        self.reporting.clear()

    def check(
        self, jobs: Sequence[Job], heartbeat_pids: Callable[[], set[int]], waiting: bool
    ) -> Optional[Found]:
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + CHECK_EVERY_S
        table = keeper.proc_table()
        self.ranks = {p: r for p, r in self.ranks.items() if p in table}
        beating: Optional[set[int]] = None
        for job in jobs:
            if job.name in self.reporting:
                continue
            found = self._ranks(job, table)
            if beating is None:
                beating = heartbeat_pids()
            if set(found) & beating:
                self.reporting.add(job.name)
                self.trackers.pop(job.name, None)
                continue
            sample = Sample(
                now,
                sum(_size(p) for p in job.logs),
                tuple(
                    RankSample(
                        rank,
                        pid,
                        sum(
                            table[p].cpu_ticks
                            for p in [pid, *keeper.descendants(pid, table)]
                            if p in table
                        ),
                    )
                    for pid, (rank, _) in found.items()
                ),
                waiting,
                job.ranks,
            )
            tracker = self.trackers.setdefault(
                job.name, Tracker(self.timeout_s, ticks_per_s=TICKS_PER_S)
            )
            verdict = tracker.observe(sample)
            if verdict is not None:
                return Found(
                    job, verdict, dict(tracker.pids), {rank: root for rank, root in found.values()}
                )
        return None

    def _ranks(self, job: Job, table: dict[int, keeper.ProcStat]) -> dict[int, tuple[int, int]]:
        """pid -> (RANK, its torchrun's pid) of the job's live ranks: the topmost processes
        with a RANK (a rank's children inherit it)."""
        out: dict[int, tuple[int, int]] = {}
        for root in job.roots:
            below = keeper.descendants(root, table)
            for pid in below:
                if pid not in self.ranks:
                    self.ranks[pid] = _rank_of(pid)
            holders = {p for p in below if self.ranks[p] is not None}
            for pid in holders:
                rank = self.ranks[pid]
                if table[pid].ppid not in holders and rank is not None:
                    out[pid] = (rank, root)
        return out


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


@dataclass
class SilentHang:
    """A hung job without heartbeats and its ranks' stacks: the failure's line."""

    found: Found
    stacks: list[RankStacks]

    def reason(self, timeout_s: float) -> str:
        v, job, pids = self.found.verdict, self.found.job.name, self.found.pids
        if v.kind == ENDED:
            seen = [str(pids[r]) for r in v.ended if r in pids]
            what = (
                f"{_ranks(v.ended)} of trainer job {job} ended "
                f"({'pid ' + ', '.join(seen) if seen else 'before the first look'}) "
                f"{v.for_s:.0f} s ago and "
                f"{_ranks(v.running)} still {'runs' if len(v.running) == 1 else 'run'}"
            )
        else:
            what = (
                f"no output and no work (CPU) from trainer job {job} "
                f"({_ranks(v.running)}) for {v.for_s:.0f} s"
            )
        ordered = sorted(self.stacks, key=lambda s: (s.collective is not None, s.rank))
        said = "; ".join(s.where() for s in ordered) or "no stacks came back"
        return (
            f"hung: {what} (launcher.hang_timeout_s={timeout_s:g}; the entry writes no "
            f"heartbeats): {said}"
        )


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
