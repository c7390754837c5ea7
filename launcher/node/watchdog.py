"""The hang watchdog (docs/architecture.md §11): no trainer progress for launcher.hang_timeout_s ->
every
trainer rank's Python stacks in its log, the rank(s) that stopped named, then the run fails or
its trainers restart (launcher.max_restarts).

Progress is what trainers write through the runtime API (launcher.trainer.progress: one record per
rank, replaced at each step and phase). The watchdog arms only once a rank of the current
trainer start has written one (an entry point that never reports is silence.py's), and
phases that wait on something the launcher already watches ("wait_server": a server's health
deadline; "done") never count as hung.

Stacks: `py-spy dump` where it is installed (any Python process), else the signal the rank
said it handles (launcher.trainer.progress.STACK_SIGNAL: faulthandler writes every thread's stack to
its stderr, the log). Ranks are asked one at a time and the log's growth read after each, so
each stack is known to be that rank's. A rank whose main thread sits in torch.distributed
waits for its peers; the one that does not is the one that stopped.

Ranks of an entry that writes no heartbeats (silence.py finds them hung) have no stack signal:
foreign_stacks asks py-spy, else ends each rank with SIGABRT, on which faulthandler (enabled by
PYTHONFAULTHANDLER in their environment) writes their stacks to the log.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from launcher.node import keeper
from launcher.node.frames import Frame
from launcher.trainer import progress
from launcher.trainer.progress import Progress

NOT_HUNG = ("wait_server", "done")  # phases the watchdog leaves to others
CHECK_EVERY_S = 1.0
DUMP_WAIT_S = 0.5  # for faulthandler to write a rank's stacks
FATAL_SIGNAL = signal.SIGABRT  # for ranks without our handler: faulthandler dumps, it ends
FATAL_WAIT_S = 3.0  # for such a rank to end (its dump is written by then)
COLLECTIVE = "torch/distributed/"
_FAULTHANDLER_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+) in (\S+)')
_PYSPY_FRAME = re.compile(r"^\s+(\S+) \(([^:()]+):(\d+)\)")


@dataclass
class RankStacks:
    """One rank's dump: its text and its main thread's frames, innermost first."""

    rank: int
    pid: int
    text: str
    main: list[Frame] = field(default_factory=list)
    missing: str = ""  # why no stack came back, where that is known

    @property
    def collective(self) -> Optional[Frame]:
        """The torch.distributed frame the main thread waits in, if it does."""
        return next((f for f in self.main if COLLECTIVE in f.path), None)

    def where(self) -> str:
        waiting = self.collective
        if waiting is not None:
            return f"rank {self.rank} waits in {waiting.func} (a collective)"
        if not self.main:
            return f"rank {self.rank}: no Python stack came back" + (
                f" ({self.missing})" if self.missing else ""
            )
        return f"rank {self.rank} stopped in {self.main[0].short()}"


def main_thread_frames(text: str) -> list[Frame]:
    """The main thread's frames, innermost first, from faulthandler's or py-spy's dump: py-spy
    names it "MainThread"; faulthandler lists the threads newest first, so the main thread
    last, whichever thread took the signal ("Current thread": not always the main one when
    the signal is fatal and came while the process was stopped)."""
    threads: list[tuple[str, list[Frame]]] = []
    for line in text.splitlines():
        if line.startswith(("Current thread", "Thread ")):
            threads.append((line, []))
            continue
        if not threads:
            continue
        m = _FAULTHANDLER_FRAME.match(line)
        if m:
            threads[-1][1].append(Frame(m.group(1), int(m.group(2)), m.group(3)))
            continue
        m = _PYSPY_FRAME.match(line)
        if m:
            threads[-1][1].append(Frame(m.group(2), int(m.group(3)), m.group(1)))
    named = [frames for head, frames in threads if '"MainThread"' in head]
    return named[0] if named else threads[-1][1] if threads else []


@dataclass
class Hang:
    """A hang the watchdog found: why, what each rank was doing, and their stacks."""

    age_s: float
    last: Progress
    stacks: list[RankStacks]

    def stopped(self) -> list[int]:
        return [s.rank for s in self.stacks if s.collective is None]

    def reason(self, timeout_s: float) -> str:
        ordered = sorted(self.stacks, key=lambda s: (s.collective is not None, s.rank))
        said = "; ".join(s.where() for s in ordered) or "no stacks came back"
        if ordered and not self.stopped():
            said += " (every rank here waits: the one that stopped is on another node)"
        job = f" from trainer job {self.last.job}" if self.last.job else ""
        return (
            f"hung: no trainer progress for {self.age_s:.0f} s{job} (launcher.hang_timeout_s="
            f"{timeout_s:g}; last: step {self.last.step} {self.last.phase}): {said}"
        )

    def tail(self) -> list[str]:
        return stacks_tail(self.stacks)


def stacks_tail(stacks: Sequence[RankStacks]) -> list[str]:
    """The stacks as the failure's tail: each rank's first lines."""
    out = []
    for s in stacks:
        out.append(f"--- rank {s.rank} (pid {s.pid}) ---")
        out += s.text.rstrip().splitlines()[:40] or [f"(none: {s.missing or 'no dump'})"]
    return out


@dataclass
class Watchdog:
    """Checks the run folder's progress records of this node's trainer ranks."""

    run_dir: Path
    timeout_s: float
    local_pids: Callable[[], set[int]]  # the pids this supervisor started, and theirs
    epoch: int = 0  # the trainers' restart count now: older records are a past start's
    armed_at: float = field(default_factory=time.monotonic)
    _next: float = 0.0

    def rearm(self, epoch: int) -> None:
        self.epoch, self.armed_at = epoch, time.monotonic()

    def mine(self) -> list[Progress]:
        pids = self.local_pids()
        return [
            r
            for ranks in progress.read_jobs(self.run_dir).values()
            for r in ranks.values()
            if r.restart == self.epoch and r.pid in pids
        ]

    def check(self) -> Optional[list[Progress]]:
        """The records of a hung trainer job (none of its records newer than timeout_s), else
        None. Each job on its own: one job's heartbeats never hide another's hang."""
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + CHECK_EVERY_S
        jobs: dict[str, list[Progress]] = {}
        for r in self.mine():
            jobs.setdefault(r.job, []).append(r)
        for records in jobs.values():
            if any(r.phase in NOT_HUNG for r in records):
                continue
            if time.time() - max(r.time for r in records) >= self.timeout_s:
                return records
        return None

    def dump(self, records: Sequence[Progress], log_of: Callable[[int], Optional[Path]]) -> Hang:
        """Every rank's stacks (py-spy, else its stack signal), one rank at a time."""
        newest = max(records, key=lambda r: r.time)
        spy = shutil.which("py-spy")
        stacks = []
        for r in sorted(records, key=lambda r: r.rank):
            text = _py_spy(spy, r.pid) if spy else None
            if text is None and r.stack_signal is not None:
                text = _by_signal(r.pid, r.stack_signal, log_of(r.pid), _waited(DUMP_WAIT_S))
            if text is None:
                continue
            if spy:  # faulthandler wrote into the log already; py-spy's goes there too
                _append(log_of(r.pid), f"areal-launch: stacks of rank {r.rank} (py-spy)\n" + text)
            stacks.append(RankStacks(r.rank, r.pid, text, main_thread_frames(text)))
        return Hang(time.time() - newest.time, newest, stacks)


def _py_spy(spy: str, pid: int) -> Optional[str]:
    try:
        out = subprocess.run(
            [spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 and out.stdout.strip() else None


def _by_signal(
    pid: int, sig: int, log: Optional[Path], wait: Callable[[int], None]
) -> Optional[str]:
    """Send the process `sig` and read what its log gained once `wait` returns."""
    start = log.stat().st_size if log is not None and log.exists() else 0
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return None
    wait(pid)
    if log is None:
        return None
    try:
        with open(log, "rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def _waited(seconds: float) -> Callable[[int], None]:
    return lambda _pid: time.sleep(seconds)


def _until_ended(pid: int) -> None:
    """Until `pid` is a zombie or gone (its dump is written then), at most FATAL_WAIT_S."""
    deadline = time.monotonic() + FATAL_WAIT_S
    while time.monotonic() < deadline:
        stat = keeper.proc_stat(pid)
        if stat is None or stat.state in ("Z", "X"):
            return
        time.sleep(0.02)


def foreign_stacks(
    ranks: Mapping[int, int], log_of: Callable[[int], Optional[Path]]
) -> list[RankStacks]:
    """Stacks of ranks that offered no stack signal (rank -> pid), one rank at a time.

    py-spy where it is installed and can read the process; else FATAL_SIGNAL to a Python rank
    whose environment enables faulthandler (PYTHONFAULTHANDLER, which the supervisor sets for
    trainers while the watchdog is on): faulthandler writes every thread's stack to stderr (the
    log) and the rank ends, as the failing run would end it anyway. The ranks and their parents
    (torchrun) are stopped meanwhile (SIGSTOP), or torchrun would end the other ranks as soon
    as the first one ended, and a rank waiting in a collective would leave it (its peer gone)
    before its turn. A rank gets the dump's signal while stopped, then continues (its threads
    take the signal before any of them runs again, so the dump shows the wait, not how the rank
    left it: whichever thread takes it, faulthandler writes the main thread's stack too); the
    others continue (SIGCONT) afterwards."""
    spy = shutil.which("py-spy")
    table = keeper.proc_table()
    parents = sorted(
        {table[p].ppid for p in ranks.values() if p in table} - set(ranks.values()) - {os.getpid()}
    )  # never this process
    stopped = [*parents, *(p for p in ranks.values() if p != os.getpid())]
    keeper.signal_all(stopped, signal.SIGSTOP)
    stacks = []
    try:
        for rank, pid in sorted(ranks.items()):
            log = log_of(rank)
            text = _py_spy(spy, pid) if spy else None
            if text is not None:
                _append(log, f"areal-launch: stacks of rank {rank} (py-spy)\n" + text)
                stacks.append(RankStacks(rank, pid, text, main_thread_frames(text)))
                continue
            why = _no_fault_dump(pid)
            if why is None:
                _append(
                    log,
                    f"areal-launch: stacks of rank {rank} (pid {pid}): faulthandler "
                    f"on {FATAL_SIGNAL.name}, which ends it",
                )
                _no_core(pid)
                text = _by_signal(pid, FATAL_SIGNAL, log, _continued_until_ended) or ""
                why = "" if text.strip() else f"{FATAL_SIGNAL.name} wrote none"
            if why:
                why = ("py-spy could not read it; " if spy else "py-spy is not installed; ") + why
            stacks.append(RankStacks(rank, pid, text or "", main_thread_frames(text or ""), why))
    finally:
        keeper.signal_all(stopped, signal.SIGCONT)
    return stacks


def _continued_until_ended(pid: int) -> None:
    """A stopped rank given the dump's signal: it continues into it, and ends."""
    keeper.signal_all([pid], signal.SIGCONT)
    _until_ended(pid)


def _no_fault_dump(pid: int) -> Optional[str]:
    """Why FATAL_SIGNAL would bring no stack from `pid` (None: it would)."""
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError as e:
        return f"cannot read the process: {e.strerror}"
    if "python" not in exe:
        return f"{exe} is not a Python interpreter"
    if not any(v.startswith(b"PYTHONFAULTHANDLER=") and v != b"PYTHONFAULTHANDLER=" for v in env):
        return "faulthandler is off in its environment (PYTHONFAULTHANDLER)"
    return None


def _no_core(pid: int) -> None:
    """No core file from the dump's signal."""
    try:
        resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError):
        pass


def _append(log: Optional[Path], text: str) -> None:
    if log is None:
        return
    try:
        with open(log, "a") as f:
            f.write(text if text.endswith("\n") else text + "\n")
    except OSError:
        pass
