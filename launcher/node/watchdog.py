"""The hang watchdog (docs/architecture.md §11): no trainer progress for launcher.hang_timeout_s -> every
trainer rank's Python stacks in its log, the rank(s) that stopped named, then the run fails or
its trainers restart (launcher.max_restarts).

Progress is what trainers write through the runtime API (launcher.worker.progress: one record per
rank, replaced at each step and phase). The watchdog arms only once a rank of the current
trainer start has written one (an entry point that never reports is never called hung), and
phases that wait on something the launcher already watches ("wait_server": a server's health
deadline; "done") never count as hung.

Stacks: `py-spy dump` where it is installed (any Python process), else the signal the rank
said it handles (launcher.worker.progress.STACK_SIGNAL: faulthandler writes every thread's stack to
its stderr, the log). Ranks are asked one at a time and the log's growth read after each, so
each stack is known to be that rank's. A rank whose main thread sits in torch.distributed
waits for its peers; the one that does not is the one that stopped.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from launcher.worker import progress
from launcher.worker.progress import Progress

NOT_HUNG = ("wait_server", "done")  # phases the watchdog leaves to others
CHECK_EVERY_S = 1.0
DUMP_WAIT_S = 0.5  # for faulthandler to write a rank's stacks
COLLECTIVE = "torch/distributed/"
_FAULTHANDLER_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+) in (\S+)')
_PYSPY_FRAME = re.compile(r"^\s+(\S+) \(([^:()]+):(\d+)\)")


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    func: str

    def short(self) -> str:
        return f"{self.func} ({'/'.join(Path(self.path).parts[-2:])}:{self.line})"


@dataclass
class RankStacks:
    """One rank's dump: its text and its main thread's frames, innermost first."""

    rank: int
    pid: int
    text: str
    main: list[Frame] = field(default_factory=list)

    @property
    def collective(self) -> Optional[Frame]:
        """The torch.distributed frame the main thread waits in, if it does."""
        return next((f for f in self.main if COLLECTIVE in f.path), None)

    def where(self) -> str:
        waiting = self.collective
        if waiting is not None:
            return f"rank {self.rank} waits in {waiting.func} (a collective)"
        if not self.main:
            return f"rank {self.rank}: no Python stack came back"
        return f"rank {self.rank} stopped in {self.main[0].short()}"


def main_thread_frames(text: str) -> list[Frame]:
    """The main thread's frames, innermost first, from faulthandler's or py-spy's dump."""
    frames: list[Frame] = []
    inside = False
    for line in text.splitlines():
        if line.startswith(("Current thread", "Thread ")):
            if inside and frames:
                break
            # faulthandler: the signal's handler runs in the main thread ("Current thread");
            # py-spy names it "MainThread"
            inside = line.startswith("Current thread") or '"MainThread"' in line
            continue
        if not inside:
            continue
        m = _FAULTHANDLER_FRAME.match(line)
        if m:
            frames.append(Frame(m.group(1), int(m.group(2)), m.group(3)))
            continue
        m = _PYSPY_FRAME.match(line)
        if m:
            frames.append(Frame(m.group(2), int(m.group(3)), m.group(1)))
    return frames


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
        return (f"hung: no trainer progress for {self.age_s:.0f} s (launcher.hang_timeout_s="
                f"{timeout_s:g}; last: step {self.last.step} {self.last.phase}): {said}")

    def tail(self) -> list[str]:
        out = []
        for s in self.stacks:
            out.append(f"--- rank {s.rank} (pid {s.pid}) ---")
            out += s.text.rstrip().splitlines()[:40]
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
        return [r for r in progress.read_all(self.run_dir).values()
                if r.restart == self.epoch and r.pid in pids]

    def check(self) -> Optional[list[Progress]]:
        """The records of a hang (no record newer than timeout_s), else None."""
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + CHECK_EVERY_S
        records = self.mine()
        if not records or any(r.phase in NOT_HUNG for r in records):
            return None
        newest = max(r.time for r in records)
        if time.time() - newest < self.timeout_s:
            return None
        return records

    def dump(self, records: Sequence[Progress], log_of: Callable[[int], Optional[Path]]
             ) -> Hang:
        """Every rank's stacks (py-spy, else its stack signal), one rank at a time."""
        newest = max(records, key=lambda r: r.time)
        spy = shutil.which("py-spy")
        stacks = []
        for r in sorted(records, key=lambda r: r.rank):
            text = _py_spy(spy, r.pid) if spy else None
            if text is None and r.stack_signal is not None:
                text = _by_signal(r, log_of(r.pid))
            if text is None:
                continue
            if spy:  # faulthandler wrote into the log already; py-spy's goes there too
                _append(log_of(r.pid), f"areal-launch: stacks of rank {r.rank} (py-spy)\n"
                        + text)
            stacks.append(RankStacks(r.rank, r.pid, text, main_thread_frames(text)))
        return Hang(time.time() - newest.time, newest, stacks)


def _py_spy(spy: str, pid: int) -> Optional[str]:
    try:
        out = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 and out.stdout.strip() else None


def _by_signal(record: Progress, log: Optional[Path]) -> Optional[str]:
    """Send the rank its stack signal and read what its log gained."""
    start = log.stat().st_size if log is not None and log.exists() else 0
    try:
        os.kill(record.pid, record.stack_signal or 0)
    except (ProcessLookupError, PermissionError):
        return None
    time.sleep(DUMP_WAIT_S)
    if log is None:
        return None
    try:
        with open(log, "rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def _append(log: Optional[Path], text: str) -> None:
    if log is None:
        return
    try:
        with open(log, "a") as f:
            f.write(text if text.endswith("\n") else text + "\n")
    except OSError:
        pass
