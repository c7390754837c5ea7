"""The keeper: the process that makes sure nothing of a run outlives it (docs/architecture.md §8).

Every node of a run has the same process tree, under every runner:

    holder (the CLI locally; a Slurm task; a Ray actor's child)
      └─ keeper   own session, child subreaper, the run's cgroup where the machine allows one
           └─ supervisor   starts the node's processes, health deadlines, first failure stops all
                └─ servers, torchrun, workers, whatever they fork

The keeper is a child subreaper (prctl PR_SET_CHILD_SUBREAPER): a process of the run that
double-forks, calls setsid and clears its environment is still reparented to the keeper, not
to init, so "every descendant of the keeper" is exactly the run. Where a cgroup v2 hierarchy is
writable, the supervisor also moves itself into a cgroup of the run's own, and the keeper kills
the whole cgroup at the end (`cgroup.kill`): a second net, independent of the tree.

When does the keeper sweep (TERM every descendant, a grace period, KILL what is left)? When the
supervisor exits, whatever its reason; when the holder is gone (a pipe only the holder writes to
reads EOF, even after SIGKILL); when told SIGTERM (after passing it to the supervisor). It
passes SIGINT/SIGTERM/SIGHUP from the holder to the supervisor and exits with the supervisor's
code (128+N when a signal killed it). The supervisor dies with the keeper (PR_SET_PDEATHSIG).

Stdlib only, and `fork` rather than exec: the holder already imported what the supervisor needs,
so the tree costs two forks, not two interpreter starts.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

from launcher.node.wakeup import Wakeup

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
ENV_CGROUP = "AREAL_LAUNCH_CGROUP"  # "0": no cgroup (the subreaper alone keeps the run)
POLL_S = 0.05


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def exit_code(status: int) -> int:
    """A wait status as a shell exit code: the code, or 128+N for signal N."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


# ----------------------------------------------------------------------------- the tree
@dataclass(frozen=True)
class ProcStat:
    """What /proc/<pid>/stat says of a process that the run's bookkeeping needs."""

    ppid: int
    state: str  # R, S, D, Z (zombie), ...
    cpu_ticks: int  # utime+stime+cutime+cstime: its CPU time and its waited-for children's


def proc_stat(pid: int) -> Optional[ProcStat]:
    """The process's ProcStat, None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return ProcStat(int(fields[1]), fields[0].decode(), sum(int(x) for x in fields[11:15]))
    except (OSError, IndexError, ValueError):
        return None


def proc_table() -> dict[int, ProcStat]:
    """Every process's ProcStat, from one pass over /proc (zombies included)."""
    table: dict[int, ProcStat] = {}
    for entry in os.listdir("/proc"):
        stat = proc_stat(int(entry)) if entry.isdigit() else None
        if stat is not None:
            table[int(entry)] = stat
    return table


def descendants(root: int, table: Optional[dict[int, ProcStat]] = None) -> list[int]:
    """Live processes below `root` (zombies left out): walked down from `root` through each
    process's children files, so the cost is the tree's size, not the machine's (a node's
    stop scans it every TICK_S; on one machine with 32 nodes a whole-/proc scan made each
    node's stop cost grow with every other node's processes); from a proc_table() when given
    one, or where the kernel has no children files."""
    if table is None and _children_files():
        return _walk(root)
    children: dict[int, list[int]] = {}
    for pid, stat in (proc_table() if table is None else table).items():
        if stat.state not in ("Z", "X"):
            children.setdefault(stat.ppid, []).append(pid)
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


@lru_cache(maxsize=1)
def _children_files() -> bool:
    """Whether /proc/<pid>/task/<tid>/children exists here (CONFIG_PROC_CHILDREN)."""
    return os.path.exists(f"/proc/self/task/{threading.get_native_id()}/children")


def children_of(pid: int) -> list[int]:
    """pid's children, every thread's (a child belongs to the thread that forked it)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            continue
    return out


def _walk(root: int) -> list[int]:
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children_of(todo.pop()):
            stat = proc_stat(child)
            if stat is not None and stat.state not in ("Z", "X"):
                out.append(child)
                todo.append(child)
    return out


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


# ----------------------------------------------------------------------------- cgroup
class RunCgroup:
    """A cgroup v2 of the run's own, below the keeper's, where the hierarchy is writable."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, name: str) -> Optional["RunCgroup"]:
        if os.environ.get(ENV_CGROUP, "1") == "0":
            return None
        root = _cgroup2_mount()
        own = _own_cgroup2()
        if root is None or own is None:
            return None
        path = root / own.lstrip("/") / name
        try:
            path.mkdir()
            return cls(path)
        except OSError:
            return None

    def join(self) -> bool:
        """Move the calling process (and so all it starts) into the cgroup."""
        try:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))
            return True
        except OSError:
            return False

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill(self) -> None:
        """Kill every process in the cgroup (cgroup.kill, else each one), then remove it."""
        for _ in range(100):
            try:
                (self.path / "cgroup.kill").write_text("1")
            except OSError:
                signal_all(self.pids(), signal.SIGKILL)
            if not self.pids():
                break
            time.sleep(POLL_S)
        try:
            self.path.rmdir()
        except OSError:
            pass


def _cgroup2_mount() -> Optional[Path]:
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0] == "cgroup2":
                return Path(left.split()[4])
    except OSError:
        pass
    return None


def _own_cgroup2() -> Optional[str]:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:].strip() or "/"
    except OSError:
        pass
    return None


# ----------------------------------------------------------------------------- sweeping
def sweep(root: int, cgroup: Optional[RunCgroup], grace_s: float) -> int:
    """Stop every descendant of `root`: TERM, up to grace_s, then KILL until none is left.

    Scans again each round, so a process forked while we were killing its parent is caught
    too; reaps what dies under us. Returns how many processes the first scan found."""
    pids = descendants(root)
    first = len(pids)
    signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        _reap()
        time.sleep(POLL_S)
        pids = descendants(root)
    for _ in range(100):  # KILL cannot be caught; a few rounds cover late forks
        if not pids:
            break
        signal_all(pids, signal.SIGKILL)
        _reap()
        time.sleep(POLL_S)
        pids = descendants(root)
    if cgroup is not None:
        cgroup.kill()
    _reap()
    return first


def _reap() -> list[tuple[int, int]]:
    """Collect every child that has ended (orphans of the run are ours to reap)."""
    done: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done.append((pid, status))


# ----------------------------------------------------------------------------- the tree
def run_tree(supervise: Callable[[Optional[RunCgroup]], int], name: str, grace_s: float) -> int:
    """Run `supervise` in a supervisor under a keeper (see module doc); return its exit code.

    Called in the holder. `supervise(cgroup)` runs in the supervisor process and returns its
    exit code; it should join the cgroup first. `name` names the run's cgroup.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    keeper = os.fork()
    if keeper == 0:
        os.close(write_end)
        code = 1
        try:
            code = _keeper(supervise, read_end, name, grace_s)
        finally:
            os._exit(code)
    os.close(read_end)
    forwarded = {s: signal.getsignal(s) for s in FORWARDED}

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(keeper, signum)
        except ProcessLookupError:
            pass

    for sig, handler in forwarded.items():
        if handler is not signal.SIG_IGN:  # respect nohup
            signal.signal(sig, forward)
    try:
        while True:
            try:
                _, status = os.waitpid(keeper, 0)
                return exit_code(status)
            except InterruptedError:
                continue
    finally:
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
        os.close(write_end)


def _keeper(
    supervise: Callable[[Optional[RunCgroup]], int], holder_fd: int, name: str, grace_s: float
) -> int:
    os.setsid()  # a terminal's Ctrl-C or a Ray actor's group kill does not reach us
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    cgroup = RunCgroup.create(name)
    me = os.getpid()
    supervisor = os.fork()
    if supervisor == 0:
        os.close(holder_fd)
        code = 1
        try:
            _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != me:  # the keeper died before the line above
                os._exit(1)
            code = supervise(cgroup)
        except KeyboardInterrupt:
            code = 130
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    told: list[int] = []

    def tell(signum: int, _frame: object) -> None:
        told.append(signum)
        try:
            os.kill(supervisor, signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, tell)
    holder = os.getppid()
    holder_gone = False
    ended: Optional[int] = None
    with Wakeup() as wake:  # the supervisor's exit, an orphan's, a signal: SIGCHLD wakes us
        while ended is None:
            for pid, status in _reap():
                if pid == supervisor:
                    ended = exit_code(status)
            if ended is not None:
                break
            ready = wake.wait(False, () if holder_gone else (holder_fd,))
            if holder_gone:
                continue
            if (ready and not os.read(holder_fd, 64)) or os.getppid() != holder:
                holder_gone = True  # the holder died (even by SIGKILL): stop the run
                tell(signal.SIGTERM, None)
    sweep(me, cgroup, grace_s)
    return ended
