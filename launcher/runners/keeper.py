"""The keeper: the process that makes sure nothing of a run outlives the launcher.

Which processes belong to a run (`run_pids`), any one of:
- its /proc/<pid>/environ holds `AREAL_LAUNCH_RUN=<run id>`: the launcher puts it in every
  started process's environment and all descendants inherit it, whatever session they move to
  (torchrun's workers do move);
- it is in the session of a process the launcher started (each starts a session of its own).
  Needed because a process may overwrite its environ: vLLM's engine core calls setproctitle,
  which clobbers that memory, so /proc shows it empty. Sessions are told to the keeper as
  (pid, start time): Linux never reuses a pid while it names a live session, and a leader whose
  start time differs is someone else, so a recycled pid never matches;
- its parent belongs to the run (at the moment of the scan).
Nothing else is ever signalled.

The launcher starts one keeper per run, in a session of its own (so Ctrl-C at the terminal does
not reach it), holding the read end of a pipe that only the launcher writes to: one
"<pid> <start>" line per started process. When the launcher is gone, by exit or by any signal
including SIGKILL, the kernel closes the write end and the keeper reads EOF; it then stops
every process of the run (TERM, a grace period, KILL) and exits. It also polls getppid() in case
something the launcher forked keeps the pipe open.

Why not PR_SET_PDEATHSIG on the children: it fires when the *thread* that forked them exits, it
does not reach grandchildren (torchrun's workers survive a SIGKILLed torchrun), and it needs a
preexec_fn (slow, fork-unsafe). Stdlib only, run as `python -I -S keeper.py` (~15 ms to start);
the launcher uses `run_pids`/`signal_all` from here for its own stop.
"""
from __future__ import annotations

import os
import select
import signal
import sys
import time

MARKER_VAR = "AREAL_LAUNCH_RUN"
Sessions = dict[int, int]  # session leader pid -> its start time (clock ticks after boot)


def _stat(pid: int) -> tuple[str, int, int, int]:
    """(state, ppid, session id, start time) from /proc/<pid>/stat; OSError if gone."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return fields[0].decode(), int(fields[1]), int(fields[3]), int(fields[19])


def start_time(pid: int) -> int:
    """When pid started (ticks after boot): with the pid, names one process for good."""
    return _stat(pid)[3]


def run_pids(run_id: str, sessions: Sessions) -> list[int]:
    """Live processes of the run: marked, in one of its sessions, or children of those."""
    needle = f"\0{MARKER_VAR}={run_id}\0".encode()
    me = os.getpid()
    table: dict[int, tuple[str, int, int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                table[int(entry)] = _stat(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    ours_sessions = {sid for sid, start in sessions.items()
                     if sid not in table or table[sid][3] == start}
    ours: set[int] = set()
    children: dict[int, list[int]] = {}
    for pid, (state, ppid, sid, _) in table.items():
        if pid == me or state in ("Z", "X"):
            continue
        children.setdefault(ppid, []).append(pid)
        if sid in ours_sessions:
            ours.add(pid)
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in b"\0" + f.read() + b"\0":
                    ours.add(pid)
        except OSError:  # gone, or another user's process
            continue
    todo = list(ours)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in ours:
                ours.add(child)
                todo.append(child)
    return sorted(ours)


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def sweep(run_id: str, sessions: Sessions, grace_s: float, poll_s: float = 0.05) -> int:
    """Stop every process of the run: TERM, wait up to grace_s, then KILL until none is left.

    Scans again after each round, so a process forked while we were killing its parent is
    caught too. Returns how many processes were found at the first scan.
    """
    pids = run_pids(run_id, sessions)
    first = len(pids)
    if pids:
        signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        time.sleep(poll_s)
        pids = run_pids(run_id, sessions)
    for _ in range(100):  # KILL cannot be caught; a few rounds cover late forks
        if not pids:
            break
        signal_all(pids, signal.SIGKILL)
        time.sleep(poll_s)
        pids = run_pids(run_id, sessions)
    return first


def read_sessions(launcher_pid: int, sessions: Sessions, check_s: float = 1.0) -> None:
    """Collect "<pid> <start>" lines from stdin until EOF (the launcher's end closed) or
    until our parent changes (the launcher died but a fork of it holds the pipe)."""
    pending = b""
    while True:
        ready, _, _ = select.select([0], [], [], check_s)
        if ready:
            data = os.read(0, 4096)
            if not data:
                return
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                try:
                    pid, start = map(int, line.split())
                    sessions[pid] = start
                except ValueError:
                    continue
        if os.getppid() != launcher_pid:
            return


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write("usage: keeper.py RUN_ID GRACE_S  (stdin: the launcher's pipe)\n")
        return 2
    run_id, grace_s = argv[1], float(argv[2])
    launcher_pid = os.getppid()
    sessions: Sessions = {}
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    # Being told to stop means the run stops with us: sweep first, then go.
    signal.signal(signal.SIGTERM, lambda *_: (sweep(run_id, sessions, grace_s), os._exit(0)))
    read_sessions(launcher_pid, sessions)
    sweep(run_id, sessions, grace_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
