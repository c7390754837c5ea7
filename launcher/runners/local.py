"""The local runner: start a plan's processes on this machine and supervise them (DESIGN §8).

All processes start at once, each in a session of its own (so the terminal's Ctrl-C reaches only
the launcher, which then stops them in order); trainers wait for the servers' /health
themselves. The first failure stops everything: SIGTERM to every process group and every process
of the run, SIGKILL after the grace period. Nothing outlives the run, even if the launcher is
SIGKILLed: see keeper.py for how.

Exit codes: 0 when every trainer exited 0; 1 when the run failed (a process exited or was killed,
or a server missed its health deadline; the root cause is named, with its log's last lines);
128+N when the launcher itself got signal N (SIGINT 130, SIGTERM 143, SIGHUP 129). A plan with no
trainer (servers only) runs until interrupted.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence

from rich.console import Console

from launcher.plan import Plan, ProcessSpec, mask_env
from launcher.runners import keeper
from launcher.runners.console import RunConsole, tail
from launcher.runners.keeper import MARKER_VAR

TICK_S = 0.05  # how often exits are checked: bounds the delay from a failure to the stop
PROBE_EVERY_S = 0.5
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class RunResult:
    """How a run ended. root_cause: the process that failed first (None: success or stopped)."""

    exit_code: int
    root_cause: Optional[str]
    reason: str
    tail: list[str] = field(default_factory=list)


@dataclass
class Started:
    spec: ProcessSpec
    popen: subprocess.Popen
    log: Path
    healthy_at: Optional[float] = None  # seconds after start; set by the health prober
    announced: bool = False

    @property
    def is_server(self) -> bool:
        return self.spec.role == "server"


class StopRequest:
    """Signals to the launcher, recorded for the main loop (handlers must stay tiny)."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self.count = 0

    def handle(self, signum: int, _frame: object) -> None:
        self.signum = self.signum or signum
        self.count += 1

    @property
    def hurry(self) -> bool:  # a second Ctrl-C: skip the grace period
        return self.count >= 2


@contextmanager
def _stop_signals_recorded(stop: StopRequest) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s, handler in old.items():
        if handler is not signal.SIG_IGN:  # respect nohup
            signal.signal(s, stop.handle)
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _start_keeper(run_id: str, grace_s: float) -> tuple[subprocess.Popen, int]:
    """The keeper holds the read end of a pipe; our write end closes when we die."""
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", keeper.__file__, run_id, f"{grace_s:g}"],
            stdin=read_end, stdout=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(read_end)
    return proc, write_end


def _start(spec: ProcessSpec, run_id: str, logs: Path, sessions: keeper.Sessions,
           keeper_pipe: int) -> Started:
    log = logs / f"{spec.name}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1"),
           **spec.env, MARKER_VAR: run_id}
    with open(log, "wb") as out:
        popen = subprocess.Popen(list(spec.argv), env=env, stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    try:  # the session is the run's even if the process clears its environment
        sessions[popen.pid] = keeper.start_time(popen.pid)
        os.write(keeper_pipe, f"{popen.pid} {sessions[popen.pid]}\n".encode())
    except OSError:  # already gone (its session is then empty), or the keeper is
        pass
    return Started(spec, popen, log)


def _probe(server: Started, begun: float, done: threading.Event) -> None:
    """Poll the server's health URL until it answers 200 (proxies bypassed: it is local)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while not done.is_set():
        try:
            with opener.open(server.spec.health_url, timeout=2) as reply:
                if reply.status == 200:
                    server.healthy_at = time.monotonic() - begun
                    return
        except Exception:
            pass
        done.wait(PROBE_EVERY_S)


def _exit_reason(name: str, code: int) -> str:
    if code < 0:
        try:
            return f"{name} killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"{name} killed by signal {-code}"
    return f"{name} exited with code {code}"


def _watch(started: list[Started], out: RunConsole, stop: StopRequest,
           health_timeout_s: float, begun: float) -> RunResult:
    """Wait for the end of the run: all trainers done, the first failure, or a signal."""
    servers = [s for s in started if s.is_server]
    trainers = [s for s in started if not s.is_server]
    finished: set[str] = set()
    while True:
        out.pump()
        if stop.signum is not None:
            name = signal.Signals(stop.signum).name
            return RunResult(128 + stop.signum, None, f"launcher got {name}; run stopped")
        for s in servers + trainers:  # servers first: a dying server makes trainers fail too
            code = s.popen.poll()
            if code is None or s.spec.name in finished:
                continue
            if s.is_server or code != 0:
                reason = _exit_reason(s.spec.name, code)
                if s.is_server and trainers:
                    reason += " before the trainers finished"
                return RunResult(1, s.spec.name, reason)
            finished.add(s.spec.name)
        if trainers and len(finished) == len(trainers):
            return RunResult(0, None, "every trainer exited 0")
        waiting = {}
        for s in servers:
            if s.healthy_at is not None and not s.announced:
                s.announced = True
                out.say(f"{s.spec.name} healthy after {s.healthy_at:.1f} s", "green")
            if s.healthy_at is None and time.monotonic() - begun > health_timeout_s:
                return RunResult(1, s.spec.name,
                                 f"{s.spec.name} not healthy after {health_timeout_s:g} s")
            waiting[s.spec.name] = s.healthy_at
        if any(at is None for at in waiting.values()):
            out.show_servers(begun, waiting, health_timeout_s)
        else:
            out.end_status()
        time.sleep(TICK_S)


def _stop_all(started: list[Started], run_id: str, sessions: keeper.Sessions,
              grace_s: float, stop: StopRequest) -> None:
    """TERM every process of the run (all groups and sessions we started, every marked
    descendant); KILL what is left after the grace period. Returns when none is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        signalled: set[int] = set()
        while True:
            pids = keeper.run_pids(run_id, sessions)
            alive = [s for s in started if s.popen.poll() is None]  # reaps those that ended
            if not pids and not alive:
                return
            new = [p for p in pids if sig == signal.SIGKILL or p not in signalled]
            keeper.signal_all(new, sig)  # each once; late forks get it too
            signalled.update(new)
            if time.monotonic() > deadline or (sig == signal.SIGTERM and stop.hurry):
                break
            time.sleep(TICK_S)


def supervise(processes: Sequence[ProcessSpec], run_dir: Path, *,
              grace_period_s: float = 10.0, health_timeout_s: float = 600.0,
              console: Optional[Console] = None, node: Optional[int] = 0) -> RunResult:
    """Start every process of `node` at once, supervise them, stop them all; see module doc."""
    mine = [p for p in processes if node is None or p.node == node]  # None: every node is here
    if not mine:
        return RunResult(0, None, f"no process to run on node {node}")
    run_dir = Path(run_dir)
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    out = RunConsole(console or Console())
    run_id = uuid.uuid4().hex
    stop = StopRequest()
    started: list[Started] = []
    sessions: keeper.Sessions = {}
    done = threading.Event()
    with _stop_signals_recorded(stop):
        guard, guard_pipe = _start_keeper(run_id, grace_period_s)
        try:
            begun = time.monotonic()
            result = None
            for spec in mine:
                try:
                    started.append(_start(spec, run_id, logs, sessions, guard_pipe))
                except OSError as e:
                    result = RunResult(1, spec.name, f"{spec.name} could not start: {e}")
                    break
                out.follow(spec.name, started[-1].log)
            for s in started:
                if s.is_server and s.spec.health_url:
                    threading.Thread(target=_probe, args=(s, begun, done), daemon=True).start()
                elif s.is_server:
                    s.healthy_at, s.announced = 0.0, True
            where = "this machine" if node is None else f"node {node}"
            out.say(f"started {len(started)} process(es) on {where}: "
                    + ", ".join(f"{s.spec.name} (pid {s.popen.pid})" for s in started)
                    + f"; logs in {logs}", "dim")
            if result is None:
                result = _watch(started, out, stop, health_timeout_s, begun)
        finally:
            done.set()
            out.end_status()
            _stop_all(started, run_id, sessions, grace_period_s, stop)
            for s in started:
                s.popen.wait()
            out.pump(final=True)
            os.close(guard_pipe)  # the keeper sweeps once more (finds nothing) and exits
            try:
                guard.wait(timeout=grace_period_s + 6)
            except subprocess.TimeoutExpired:
                guard.kill()
    if result.root_cause is not None:
        log = logs / f"{result.root_cause}.log"
        result.tail = tail(log)
        out.root_cause(result.reason, log, result.tail)
    else:
        out.say(f"{result.reason} after {time.monotonic() - begun:.0f} s; run folder {run_dir}",
                "bold green" if result.exit_code == 0 else "bold yellow")
    return result


def write_plan(plan: Plan, run_dir: Path) -> Path:
    """run_dir/plan.json, unmasked (trainers read real values from it), readable by us only."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "plan.json"
    part = run_dir / ".plan.json.part"
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(plan.to_json(mask_secrets=False))
    os.replace(part, path)  # a process never reads a half-written plan
    return path


def dry_run_text(processes: Sequence[ProcessSpec]) -> str:
    """What `launcher.dry_run=true` prints: each process as a shell line, secrets masked."""
    blocks = []
    for p in processes:
        where = f"{p.role} on node {p.node}"
        if p.gpus:
            where += ", gpus " + ",".join(map(str, p.gpus))
        if p.health_url:
            where += f", health {p.health_url}"
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in mask_env(p.env).items())
        line = shlex.join(p.argv)
        blocks.append(f"# {p.name}: {where}\n" + (f"{env} \\\n  {line}" if env else line))
    return "\n\n".join(blocks)
