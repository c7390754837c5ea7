"""The node supervisor: start one node's processes, watch them, stop them all (DESIGN §8).

The same code runs on every node under every runner: in the launcher's own tree locally,
inside each Slurm task, inside each Ray node actor (see keeper.py for the tree). All processes
start at once, each in a session of its own, with its GPUs as the node names them
(request.materialize); trainers wait for the servers' /health themselves while this polls it
against a deadline. The first failure stops everything: SIGTERM to every process and every
descendant, SIGKILL after the grace period.

Exit codes: 0 when every trainer exited 0 (or, on a node without trainers, when the run's
trainers finished elsewhere); 1 when the run failed (a process exited or was killed, or a
server missed its health deadline; the root cause is named, with the failing rank's own error
when torchrun recorded one, else its log's last lines); 128+N when the supervisor got signal N
(SIGINT 130, SIGTERM 143, SIGHUP 129). A node with servers only and no one to wait for runs
until interrupted.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence

from launcher.request import LaunchRequest, Materialized, materialize
from launcher.runners import keeper
from launcher.runners.console import RunConsole, tail
from launcher.runners.failures import torchrun_root_cause

TICK_S = 0.05  # how often exits are checked: bounds the delay from a failure to the stop
PROBE_EVERY_S = 0.5
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DONE_DIR = "done"  # run_dir/done/node<k>: that node's trainers all exited 0


@dataclass
class RunResult:
    """How a node's run ended. root_cause: the process that failed first (None: none did)."""

    exit_code: int
    root_cause: Optional[str]
    reason: str
    tail: list[str] = field(default_factory=list)


@dataclass
class Started:
    proc: Materialized
    popen: subprocess.Popen
    log: Path
    started_at: float
    healthy_at: Optional[float] = None  # seconds after start; set by the health prober
    announced: bool = False

    @property
    def name(self) -> str:
        return self.proc.name

    @property
    def is_server(self) -> bool:
        return self.proc.spec.is_server


class StopRequest:
    """Signals, recorded for the main loop (handlers must stay tiny)."""

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
def stop_signals_recorded(stop: StopRequest) -> Iterator[None]:
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


def materialize_node(request: LaunchRequest, node: Optional[int], hosts: Sequence[str],
                     visible: Optional[Sequence[str]]) -> list[Materialized]:
    """Every process of `node` as it will be exec'd here (LaunchError if one cannot be)."""
    return [materialize(p, hosts, visible, request.device, request.run_id)
            for p in request.on_node(node)]


def _start(proc: Materialized, logs: Path) -> Started:
    log = logs / f"{proc.name}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1"),
           **proc.env}
    with open(log, "ab") as out:
        popen = subprocess.Popen(list(proc.argv), env=env, stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return Started(proc, popen, log, time.monotonic())


def _probe(server: Started, begun: float, done: threading.Event) -> None:
    """Poll the server's health URL until it answers 200 (proxies bypassed: it is ours)."""
    import urllib.request  # here: the node's start does not wait for it

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    assert server.proc.health_url is not None
    while not done.is_set():
        try:
            with opener.open(server.proc.health_url, timeout=2) as reply:
                if reply.status == 200:
                    server.healthy_at = time.monotonic() - begun
                    return
        except Exception:
            pass
        done.wait(PROBE_EVERY_S)


def exit_reason(name: str, code: int) -> str:
    if code < 0:
        try:
            return f"{name} killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"{name} killed by signal {-code}"
    return f"{name} exited with code {code}"


@dataclass
class Peers:
    """Other nodes' supervisors, through the run folder: a node with servers only stops when
    every node with trainers has written done/node<k> (Slurm tasks have no other channel)."""

    done_dir: Path
    trainer_nodes: tuple[int, ...]

    def all_done(self) -> bool:
        return all((self.done_dir / f"node{k}").exists() for k in self.trainer_nodes)

    def mark_done(self, node: int) -> None:
        self.done_dir.mkdir(parents=True, exist_ok=True)
        (self.done_dir / f"node{node}").write_text("ok\n")


def _watch(started: list[Started], out: RunConsole, stop: StopRequest,
           health_timeout_s: float, begun: float, peers: Optional[Peers]) -> RunResult:
    """Wait for the end of the run: all trainers done, the first failure, or a signal."""
    servers = [s for s in started if s.is_server]
    trainers = [s for s in started if not s.is_server]
    finished: set[str] = set()
    while True:
        out.pump()
        if stop.signum is not None:
            name = signal.Signals(stop.signum).name
            return RunResult(128 + stop.signum, None, f"got {name}; run stopped")
        for s in servers + trainers:  # servers first: a dying server makes trainers fail too
            code = s.popen.poll()
            if code is None or s.name in finished:
                continue
            if s.is_server or code != 0:
                reason = exit_reason(s.name, code)
                if s.is_server and (trainers or peers):
                    reason += " before the trainers finished"
                return RunResult(1, s.name, reason)
            finished.add(s.name)
        if trainers and len(finished) == len(trainers):
            return RunResult(0, None, "every trainer exited 0")
        if not trainers and peers is not None and peers.all_done():
            return RunResult(0, None, "the trainers finished on their nodes")
        waiting = {}
        for s in servers:
            if s.healthy_at is not None and not s.announced:
                s.announced = True
                out.say(f"{s.name} healthy after {s.healthy_at:.1f} s", "green")
            if s.healthy_at is None and time.monotonic() - begun > health_timeout_s:
                return RunResult(1, s.name, f"{s.name} not healthy after {health_timeout_s:g} s")
            waiting[s.name] = s.healthy_at
        if any(at is None for at in waiting.values()):
            out.show_servers(begun, waiting, health_timeout_s)
        else:
            out.end_status()
        time.sleep(TICK_S)


def _stop_all(started: list[Started], grace_s: float, stop: StopRequest) -> None:
    """TERM every process of the node and everything below it; KILL what is left after the
    grace period. Returns when none is left (the keeper sweeps once more after us)."""
    me = os.getpid()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        signalled: set[int] = set()
        while True:
            pids = keeper.descendants(me)
            alive = [s for s in started if s.popen.poll() is None]  # reaps those that ended
            if not pids and not alive:
                return
            new = [p for p in pids if sig == signal.SIGKILL or p not in signalled]
            keeper.signal_all(new, sig)  # each once; late forks get it too
            signalled.update(new)
            if time.monotonic() > deadline or (sig == signal.SIGTERM and stop.hurry):
                break
            time.sleep(TICK_S)


def supervise(request: LaunchRequest, procs: Sequence[Materialized], *, node: Optional[int],
              out: RunConsole, peers: Optional[Peers] = None) -> RunResult:
    """Start `procs` (the node's, materialized) at once, supervise them, stop them all."""
    if not procs:
        return RunResult(0, None, f"no process to run on node {node}")
    run_dir = Path(request.run_dir)
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stop = StopRequest()
    started: list[Started] = []
    done = threading.Event()
    begun = time.monotonic()
    status = NodeStatus(run_dir, node)
    with stop_signals_recorded(stop):
        result = None
        try:
            for proc in procs:
                try:
                    started.append(_start(proc, logs))
                except OSError as e:
                    result = RunResult(1, proc.name, f"{proc.name} could not start: {e}")
                    break
                out.follow(proc.name, started[-1].log)
            for s in started:
                if s.is_server and s.proc.health_url:
                    threading.Thread(target=_probe, args=(s, begun, done), daemon=True).start()
                elif s.is_server:
                    s.healthy_at, s.announced = 0.0, True
            where = "this machine" if node is None else f"node {node}"
            out.say(f"started {len(started)} process(es) on {where}: "
                    + ", ".join(f"{s.name} (pid {s.popen.pid})" for s in started)
                    + f"; logs in {logs}", "dim")
            status.write(started, "running")
            if result is None:
                result = _watch(started, out, stop, request.health_timeout_s, begun, peers)
        finally:
            done.set()
            out.end_status()
            _stop_all(started, request.grace_period_s, stop)
            for s in started:
                s.popen.wait()
            out.pump(final=True)
    if result.exit_code == 0 and peers is not None and node is not None and started and \
            any(not s.is_server for s in started):
        peers.mark_done(node)
    if result.root_cause is not None:
        failed = next(s for s in started if s.name == result.root_cause) if any(
            s.name == result.root_cause for s in started) else None
        log = logs / f"{result.root_cause}.log"
        rank_error = torchrun_root_cause(request, failed.proc.spec) if failed else None
        if rank_error is not None:
            result.reason += f": {rank_error.summary}"
            result.tail = rank_error.traceback
            out.root_cause(result.reason, None, result.tail)
        else:
            result.tail = tail(log)
            out.root_cause(result.reason, log, result.tail)
    else:
        out.say(f"{result.reason} after {time.monotonic() - begun:.0f} s; run folder {run_dir}",
                "bold green" if result.exit_code == 0 else "bold yellow")
    status.write(started, "finished" if result.exit_code == 0 else "failed", result)
    return result


class NodeStatus:
    """run_dir/status/<node>.json: what `areal-launch status` shows about a node."""

    def __init__(self, run_dir: Path, node: Optional[int]):
        self.path = run_dir / "status" / f"{'all' if node is None else f'node{node}'}.json"

    def write(self, started: list[Started], state: str,
              result: Optional[RunResult] = None) -> None:
        data = {"state": state, "pid": os.getpid(), "updated": time.time(),
                "processes": [{"name": s.name, "role": s.proc.spec.role, "pid": s.popen.pid,
                               "exit": s.popen.returncode, "log": str(s.log)}
                              for s in started]}
        if result is not None:
            data.update(exit_code=result.exit_code, reason=result.reason,
                        root_cause=result.root_cause, tail=result.tail[-20:])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            part = self.path.with_suffix(".part")
            part.write_text(json.dumps(data, indent=1))
            os.replace(part, self.path)
        except OSError:
            pass  # status is for people; a full disk must not stop the run
