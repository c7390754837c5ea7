"""The node supervisor: start one node's processes, watch them, stop them all (docs/architecture.md
§8).

The same code runs on every node under every runner: in the launcher's own tree locally,
inside each Slurm task, inside each Ray node actor (see keeper.py for the tree). All processes
start at once, each in a session of its own, with its GPUs as the node names them
(request.materialize); trainers wait for the servers' /health themselves while this polls it
against a deadline. The first failure stops everything: SIGTERM to every process and every
descendant, SIGKILL after the grace period; unless launcher.max_restarts allows a restart
(docs/architecture.md §11, restarts.py): a failed trainer restarts with every trainer of the run
(on every
node: the restart is recorded in the run folder and the other nodes' supervisors follow), a
failed server restarts alone on its GPUs and port while the rest goes on. Each start gets its
restart count in AREAL_RESTART; trainers resume from their newest checkpoint. A trainer rank
that makes no progress for launcher.hang_timeout_s is a failure too (watchdog.py; for entry
points that write no heartbeats, silence.py: no output and no work, or a rank that ended
while the others run on).

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
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence

from launcher.node import keeper, restarts
from launcher.node.console import RunConsole, tail
from launcher.node.failures import TRACEBACK_LINES, node_ranks, torchrun_root_cause
from launcher.node.tracebacks import FirstErrors, Printed
from launcher.node.wakeup import Wakeup
from launcher.spec.process import ENV_PROCESS, ENV_RESTART, ENV_RUN_MARKER
from launcher.spec.request import LaunchRequest, Materialized, materialize
from launcher.spec.runfolder import LOGS, status_file

if TYPE_CHECKING:
    from launcher.node.silence import SilentWatch
    from launcher.node.watchdog import Watchdog

TICK_S = 0.05  # how often a stop and a pause look again (the watch: wakeup.py)
PROBE_EVERY_S = 0.5
SHOW_EVERY_S = 0.25
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class RunResult:
    """How a node's run ended. root_cause: the process that failed first (None: none did)."""

    exit_code: int
    root_cause: Optional[str]
    reason: str
    tail: list[str] = field(default_factory=list)
    failed: Optional["Started"] = None  # the process behind root_cause, when it is ours
    explained: bool = False  # reason and tail already say why (explain() has run)
    tail_kind: str = "log"  # what tail holds: "log" (its end), "traceback", "stacks"
    follow: Optional[restarts.RestartRecord] = None  # a peer restarted the trainers
    rank: Optional[int] = None  # the failing rank, where torchrun's error file named it
    first: Optional[Printed] = None  # an earlier traceback, named ahead of the failure
    blamed: bool = False  # the first traceback was looked for (blame_first has run)


@dataclass
class Started:
    proc: Materialized
    popen: subprocess.Popen
    log: Path
    started_at: float  # time.monotonic()
    start_wall: float  # time.time(): files the process wrote since are this start's
    restart: int = 0  # AREAL_RESTART it was given
    healthy_at: Optional[float] = None  # seconds after start; set by the health prober
    announced: bool = False
    ended_at: Optional[float] = None  # time.monotonic() when its exit was seen
    stopped: bool = False  # the launcher stopped it (the end of the run, or a restart)
    log_offset: int = 0  # the log's size when it started: what it wrote comes after

    def poll(self) -> Optional[int]:
        code = self.popen.poll()
        if code is not None and self.ended_at is None:
            self.ended_at = time.monotonic()
        return code

    def state(self, health_timeout_s: float) -> tuple[str, str]:
        """What the live table says of it, and in which style."""
        code = self.popen.returncode
        if code is not None:
            return (
                "stopped"
                if self.stopped
                else f"killed by {signal_name(code)}"
                if code < 0
                else f"exited {code}",
                "dim" if self.stopped or code == 0 else "bold red",
            )
        if self.is_service and self.healthy_at is None:
            return (
                f"starting: waiting for health ({time.monotonic() - self.started_at:.0f} s "
                f"of {health_timeout_s:.0f} s)",
                "yellow",
            )
        return ("healthy" if self.proc.health_url else "running", "green")

    def summary(self) -> tuple[str, str, str, str]:
        """Its row in the table that ends the run: name, exit, duration, log."""
        code = self.popen.returncode
        exit_text = (
            "stopped"
            if self.stopped
            else "-"
            if code is None
            else signal_name(code)
            if code < 0
            else str(code)
        )
        took = (self.ended_at or time.monotonic()) - self.started_at
        return self.name, exit_text, f"{took:.1f} s", str(self.log)

    @property
    def name(self) -> str:
        return self.proc.name

    @property
    def is_service(self) -> bool:
        """A server or a worker: it serves the run until the trainers finish (its exit is a
        failure) and restarts alone."""
        return not self.proc.spec.is_trainer


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


def materialize_node(
    request: LaunchRequest,
    node: Optional[int],
    hosts: Sequence[str],
    visible: Optional[Sequence[str]],
) -> list[Materialized]:
    """Every process of `node` as it will be exec'd here (LaunchError if one cannot be)."""
    return [
        materialize(p, hosts, visible, request.device, request.run_id)
        for p in request.on_node(node)
    ]


def _start(proc: Materialized, logs: Path, restart: int, fault_dumps: bool = False) -> Started:
    """fault_dumps: Python's faulthandler on (PYTHONFAULTHANDLER), for the stacks of ranks
    that write no heartbeats (watchdog.foreign_stacks)."""
    log = logs / f"{proc.name}.log"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1"),
        **(
            {"PYTHONFAULTHANDLER": os.environ.get("PYTHONFAULTHANDLER") or "1"}
            if fault_dumps
            else {}
        ),
        **proc.env,
        ENV_RESTART: str(restart),
        ENV_PROCESS: proc.name,
    }
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            list(proc.argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Started(proc, popen, log, time.monotonic(), time.time(), restart)


def _probe(server: Started, done: threading.Event) -> None:
    """Poll the server's health URL until it answers 200."""
    assert server.proc.health_url is not None
    if _healthy(server.proc.health_url, done, lambda: server.popen.poll() is None):
        server.healthy_at = time.monotonic() - server.started_at


def _healthy(url: str, done: threading.Event, alive: Callable[[], bool]) -> bool:
    """Whether `url` answered 200 before `done` was set or `alive` turned False (proxies
    bypassed: the servers are the run's)."""
    import urllib.request  # here: the node's start does not wait for it

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while not done.is_set() and alive():
        try:
            with opener.open(url, timeout=2) as reply:
                if reply.status == 200:
                    return True
        except Exception:
            pass
        done.wait(PROBE_EVERY_S)
    return False


@dataclass
class RemoteServers:
    """The health of the run's servers on other nodes, as a node with trainers sees it: a
    trainer that writes no heartbeats may wait silently for them (looking them up elsewhere),
    so its silence clock waits until they answer, or until their health deadline has passed
    (their own node's supervisor fails them then)."""

    urls: tuple[str, ...]
    deadline_s: float
    begun: float = field(default_factory=time.monotonic)
    up: set[str] = field(default_factory=set)

    def watch(self, done: threading.Event) -> None:
        for url in self.urls:
            threading.Thread(target=self._probe, args=(url, done), daemon=True).start()

    def _probe(self, url: str, done: threading.Event) -> None:
        if _healthy(url, done, lambda: not self.past_deadline()):
            self.up.add(url)

    def past_deadline(self) -> bool:
        return time.monotonic() - self.begun > self.deadline_s

    def waiting(self) -> bool:
        return len(self.up) < len(self.urls) and not self.past_deadline()


def signal_name(code: int) -> str:
    """A negative exit code (killed by a signal) as the signal's name."""
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def exit_reason(name: str, code: int) -> str:
    if code < 0:
        return f"{name} killed by {signal_name(code)}"
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


def _tree(pid: int) -> list[int]:
    return [pid, *keeper.descendants(pid)]


def _marked(names: set[str], run_id: str) -> list[int]:
    """Processes below our keeper that carry one of `names` in ENV_PROCESS: what a process
    started and that left its tree (double fork, setsid) but kept its environment."""
    wanted = {f"{ENV_PROCESS}={n}".encode() for n in names}
    marker = f"{ENV_RUN_MARKER}={run_id}".encode()
    found = []
    for pid in keeper.descendants(os.getppid()):
        try:
            env = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if marker in env and env & wanted:
            found.append(pid)
    return found


def _stop(
    group: Sequence[Started], grace_s: float, stop: StopRequest, run_id: str, everything: bool
) -> None:
    """TERM `group` and everything below it (everything: every process below us); KILL what
    is left after the grace period. Returns when none is left."""
    me = os.getpid()
    names = {s.name for s in group}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        signalled: set[int] = set()
        while True:
            alive = [s for s in group if s.popen.poll() is None]  # reaps those that ended
            if everything:
                pids = keeper.descendants(me)
            else:
                pids = [p for s in alive for p in _tree(s.popen.pid)] + _marked(names, run_id)
            if not pids and not alive:
                return
            new = [p for p in pids if sig == signal.SIGKILL or p not in signalled]
            keeper.signal_all(new, sig)  # each once; late forks get it too
            signalled.update(new)
            if time.monotonic() > deadline or (sig == signal.SIGTERM and stop.hurry):
                break
            time.sleep(TICK_S)


class NodeRun:
    """One node's processes under supervision, restarts included (see module doc)."""

    def __init__(
        self,
        request: LaunchRequest,
        procs: Sequence[Materialized],
        node: Optional[int],
        out: RunConsole,
        peers: Optional[Peers],
        remote: Optional[RemoteServers] = None,
    ):
        self.request, self.procs, self.node, self.out, self.peers = request, procs, node, out, peers
        self.remote = remote
        self.run_dir = Path(request.run_dir)
        self.logs = self.run_dir / LOGS
        self.stop = StopRequest()
        self.wakeup = Wakeup()
        self.done = threading.Event()
        self.begun = time.monotonic()
        self.started: list[Started] = []
        self.finished: set[str] = set()  # trainers that exited 0 in this start
        history = restarts.read_all(self.run_dir)
        self.epoch = restarts.trainer_epoch(history)  # trainer starts so far, requeues included
        self.watchdog: Optional[Watchdog] = None
        self.silent: Optional[SilentWatch] = None
        if request.hang_timeout_s:  # imported only where a run is watched (start-up of a node)
            from launcher.node.silence import SilentWatch
            from launcher.node.watchdog import Watchdog

            self.watchdog = Watchdog(
                self.run_dir, request.hang_timeout_s, self._local_pids, self.epoch
            )
            self.silent = SilentWatch(request.hang_timeout_s)
        self.errors = FirstErrors()  # each process's first traceback (tracebacks.py)
        self._next_peek = 0.0
        self._next_show = 0.0

    # ------------------------------------------------------------------ starting
    def start(self, proc: Materialized) -> Started:
        kind = restarts.TRAINERS if proc.spec.is_trainer else proc.name
        log = self.logs / f"{proc.name}.log"  # appended to by every start of the run
        offset = log.stat().st_size if log.exists() else 0
        s = _start(
            proc,
            self.logs,
            restarts.starts_of(kind, restarts.read_all(self.run_dir))
            if self.request.max_restarts or self.epoch
            else 0,
            fault_dumps=self.silent is not None and proc.spec.is_trainer,
        )
        s.log_offset = offset
        ranks = node_ranks(self.request, proc.spec) if proc.spec.is_trainer else ()
        self.errors.follow(s.name, s.log, offset, ranks)
        if s.is_service and s.proc.health_url:
            threading.Thread(target=_probe, args=(s, self.done), daemon=True).start()
        elif s.is_service:
            s.healthy_at, s.announced = 0.0, True
        return s

    def start_all(self) -> Optional[RunResult]:
        self.out.width = max(self.out.width, *(len(p.name) for p in self.procs))
        for proc in self.procs:
            try:
                self.started.append(self.start(proc))
            except OSError as e:
                return RunResult(1, proc.name, f"{proc.name} could not start: {e}")
            if self.request.console == "all" or not proc.spec.is_server:
                self.out.follow(proc.name, self.started[-1].log, self.started[-1].log_offset)
        return None

    def show(self) -> None:
        """The live table (terminals), at most every SHOW_EVERY_S."""
        now = time.monotonic()
        if not self.out.live or now < self._next_show:
            return
        self._next_show = now + SHOW_EVERY_S
        self.out.show([(s.name, *s.state(self.request.health_timeout_s)) for s in self.started])

    def _local_pids(self) -> set[int]:
        return set(keeper.descendants(os.getpid()))

    @property
    def servers(self) -> list[Started]:
        """Servers and workers: what serves the run."""
        return [s for s in self.started if s.is_service]

    @property
    def trainers(self) -> list[Started]:
        return [s for s in self.started if not s.is_service]

    def _only_workers(self) -> bool:
        """A run of workers only on one node (no trainer, no server, no peer): it ends when
        every worker has exited 0, its work done."""
        started = self.started
        return (
            self.peers is None
            and bool(started)
            and all(x.proc.spec.role == "worker" for x in started)
        )

    # ------------------------------------------------------------------ watching
    def watch(self) -> RunResult:
        """Until the end of the run, a failure, a signal, or a peer's trainer restart."""
        out, request = self.out, self.request
        while True:
            busy = out.pump() > 0
            if self.stop.signum is not None:
                name = signal.Signals(self.stop.signum).name
                return RunResult(128 + self.stop.signum, None, f"got {name}; run stopped")
            for s in self.servers + self.trainers:  # servers first: their death fails trainers
                code = s.poll()
                if code is None or s.name in self.finished:
                    continue
                busy = True
                if code == 0 and self._only_workers():
                    self.finished.add(s.name)  # a run of workers only: this one's work is done
                    continue
                if s.is_service or code != 0:
                    reason = exit_reason(s.name, code)
                    if s.is_service and (self.trainers or self.peers):
                        reason += " before the trainers finished"
                    return RunResult(1, s.name, reason, failed=s)
                self.finished.add(s.name)
            trainers = self.trainers
            if trainers and len(self.finished) == len(trainers):
                return RunResult(0, None, "every trainer exited 0")
            if self._only_workers() and self.finished >= {s.name for s in self.servers}:
                return RunResult(0, None, "every worker exited 0 (a run of workers only)")
            if not trainers and self.peers is not None and self.peers.all_done():
                return RunResult(0, None, "the trainers finished on their nodes")
            for s in self.servers:
                if s.healthy_at is not None and not s.announced:
                    s.announced = busy = True
                    out.say(f"{s.name} healthy after {s.healthy_at:.1f} s", "green")
                if (
                    s.healthy_at is None
                    and time.monotonic() - s.started_at > request.health_timeout_s
                ):
                    return RunResult(
                        1,
                        s.name,
                        f"{s.name} not healthy after {request.health_timeout_s:g} s",
                        failed=s,
                    )
            self.show()
            followed = self._peer_restart()
            if followed is not None:
                return followed
            self.errors.read()  # after the exits: what it finds was printed before them
            hung = self._hang()
            if hung is not None:
                return hung
            self.wakeup.wait(busy)

    def _peer_restart(self) -> Optional[RunResult]:
        """Another node's supervisor restarted the trainers: ours restart with them."""
        if not self.request.max_restarts or not self.trainers or time.monotonic() < self._next_peek:
            return None
        self._next_peek = time.monotonic() + PROBE_EVERY_S
        newer = [
            r
            for r in restarts.read_all(self.run_dir)
            if r.kind == restarts.TRAINERS and r.epoch > self.epoch
        ]
        if not newer:
            return None
        return RunResult(1, None, newer[-1].reason, follow=newer[-1])

    def _hang(self) -> Optional[RunResult]:
        if self.watchdog is None or not self.trainers:
            return None
        records = self.watchdog.check()
        if records is None:
            return self._silent_hang()
        owners = {p: s for s in self.trainers for p in _tree(s.popen.pid)}
        hang = self.watchdog.dump(records, lambda pid: owners[pid].log if pid in owners else None)
        timeout = float(self.request.hang_timeout_s or 0)
        failed = owners.get(hang.last.pid) or self.trainers[0]
        return RunResult(
            1,
            failed.name,
            hang.reason(timeout),
            hang.tail(),
            failed=failed,
            explained=True,
            tail_kind="stacks",
        )

    def _silent_hang(self) -> Optional[RunResult]:
        """A trainer job that writes no heartbeats, silent or with a rank ended (silence.py)."""
        from launcher.node.silence import Job, SilentHang
        from launcher.node.watchdog import foreign_stacks, stacks_tail

        if self.silent is None:
            return None
        jobs: dict[str, list[Started]] = {}
        for s in self.trainers:
            jobs.setdefault(s.proc.spec.component, []).append(s)
        found = self.silent.check(
            [
                Job(
                    name,
                    tuple(s.popen.pid for s in group if s.popen.returncode is None),
                    tuple(s.log for s in group),
                    tuple(r for s in group for r in node_ranks(self.request, s.proc.spec)),
                )
                for name, group in jobs.items()
            ],
            lambda: {r.pid for r in self.watchdog.mine()} if self.watchdog else set(),
            waiting=any(s.healthy_at is None for s in self.servers)
            or (self.remote is not None and self.remote.waiting()),
        )
        if found is None:
            return None
        by_pid = {s.popen.pid: s for s in self.trainers}
        running = {rank: found.pids[rank] for rank in found.verdict.running}
        hang = SilentHang(
            found, foreign_stacks(running, lambda rank: by_pid[found.roots[rank]].log)
        )
        failed = by_pid[found.roots[found.verdict.running[0]]]
        return RunResult(
            1,
            failed.name,
            hang.reason(float(self.request.hang_timeout_s or 0)),
            stacks_tail(hang.stacks),
            failed=failed,
            explained=True,
            tail_kind="stacks",
        )

    # ------------------------------------------------------------------ restarting
    def explain(self, result: RunResult) -> None:
        """The failing rank's own error (torchrun's error files), else its log's last lines;
        and the first traceback printed before it (blame_first)."""
        if result.root_cause is None:
            return
        if not result.explained:
            result.explained = True
            failed = result.failed
            rank_error = (
                torchrun_root_cause(self.request, failed.proc.spec, failed.start_wall)
                if failed is not None
                else None
            )
            if rank_error is not None:
                result.reason += f": {rank_error.summary}"
                result.tail = rank_error.traceback
                result.tail_kind = "traceback"
                result.rank = rank_error.rank
            else:
                result.tail = tail(self.logs / f"{result.root_cause}.log")
        self.blame_first(result)

    def blame_first(self, result: RunResult) -> None:
        """The first traceback a process here printed before the failure (an exit's, seen
        before the exit was; the failing process's own at any time), named ahead of it:
        `<rank> of <process> raised <its last line> (<where>); then <the failure>`. Where it
        is the failing process's own error, it only says what the reason does not yet."""
        if result.blamed:
            return
        result.blamed = True
        failed = result.failed
        own = failed.name if failed is not None else result.root_cause
        self.errors.read(final=True)
        before = failed.ended_at if failed is not None and failed.ended_at else time.monotonic()
        first = self.errors.first(before, own)
        if first is None:
            return
        if first.process == own:
            if first.traceback.collateral:
                return  # its peer's end (or torchrun's report of it): no reason of its own
            if result.rank is not None and first.rank in (result.rank, None):
                return  # torchrun's error file named this rank's error already
            if first.traceback.exception in result.reason:
                return
            if result.tail_kind == "log":  # its exit, and its own traceback says why
                result.reason += f": {first.summary(own=True)}"
                result.tail = list(first.traceback.lines[-TRACEBACK_LINES:])
                result.tail_kind = "traceback"
                return
        result.reason = f"{first.summary()}; then {result.reason}"
        result.first = first

    def recover(self, result: RunResult) -> bool:
        """Restart what failed, within launcher.max_restarts; False: the run ends."""
        if result.follow is not None:  # a peer already decided and counted it
            self.out.say(
                f"restart {result.follow.n}: trainers restart with the other nodes' "
                f"({result.follow.reason})",
                "yellow",
            )
            self.restart_trainers(result.follow.epoch, 0.0)
            return True
        failed = result.failed
        if failed is None or not self.request.max_restarts:
            return False
        self.explain(result)
        kind = restarts.TRAINERS if not failed.is_service else failed.name
        failure = restarts.Failure(
            failed.name, kind, result.reason, time.monotonic() - failed.started_at, result.tail
        )
        history = restarts.read_all(self.run_dir)
        limit = self.request.max_restarts
        if restarts.counted(history) >= limit:
            return False
        wait = restarts.backoff_s(failure, history)
        if wait is None:
            result.reason += (
                f"; the same failure {len(restarts.BACKOFF_S) + 1} times in a "
                "row, each soon after its start: not restarted again"
            )
            return False
        if kind == restarts.TRAINERS:
            made, _ = restarts.claim_trainer_restart(self.run_dir, self.epoch + 1, failure)
        else:
            made = restarts.record(self.run_dir, failure)
        _say_root_cause(self.out, result, title=f"restart {made.n} of {limit}")
        if wait:
            self.out.say(
                f"the same failure as the last restart, {failure.uptime_s:.0f} s after "
                f"its start: waiting {wait:.0f} s before restarting",
                "yellow",
            )
        if kind == restarts.TRAINERS:
            self.restart_trainers(made.epoch, wait)
        else:
            self.restart_server(failed, wait)
        return True

    def _pause(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.stop.signum is None:
            self.out.pump()
            time.sleep(TICK_S)

    def stop_group(self, group: Sequence[Started], everything: bool) -> None:
        """Stop `group` (everything: every process below us too). Muted first, so their
        shutdown chatter stays in their logs; those still running are marked as stopped by
        the launcher, which the tables say instead of an exit code."""
        self.out.mute({s.name for s in group})
        for s in group:
            s.stopped = s.poll() is None
        _stop(group, self.request.grace_period_s, self.stop, self.request.run_id, everything)

    def _replace(self, old: Sequence[Started], wait: float) -> None:
        self.stop_group(old, everything=False)
        self._pause(wait)
        if self.stop.signum is not None:
            return
        for s in old:
            self.started[self.started.index(s)] = self.start(s.proc)
        self.out.mute({s.name for s in old}, muted=False)

    def restart_trainers(self, epoch: int, wait: float) -> None:
        self.epoch = epoch
        self._replace(self.trainers, wait)
        self.finished.clear()
        if self.watchdog is not None:
            self.watchdog.rearm(epoch)
        if self.silent is not None:
            self.silent.rearm()
        self.out.say(
            f"trainers started again (restart {epoch}): "
            + ", ".join(f"{s.name} (pid {s.popen.pid})" for s in self.trainers),
            "dim",
        )

    def restart_server(self, failed: Started, wait: float) -> None:
        self._replace([failed], wait)
        again = next(s for s in self.started if s.name == failed.name)
        self.out.say(
            f"{again.name} started again (pid {again.popen.pid}) on the same GPUs and "
            "port; the other processes go on",
            "dim",
        )

    # ------------------------------------------------------------------ the end
    def final_reason(self, result: RunResult) -> None:
        """Past the limit: the last failure's cause, with the earlier ones listed."""
        earlier = [r for r in restarts.read_all(self.run_dir) if r.counted]
        if earlier and result.root_cause is not None:
            result.reason += (
                f" (after {len(earlier)} restart(s) of "
                f"launcher.max_restarts={self.request.max_restarts}; earlier: "
                + "; ".join(f"{r.n}: {r.reason}" for r in earlier)
                + ")"
            )


def _say_root_cause(out: RunConsole, result: RunResult, title: str = "") -> None:
    """The failure on the console: its reason, the first error's traceback where the reason
    names one ahead of it, then its tail."""
    failed, first = result.failed, result.first
    earlier: tuple[str, list[str]] = ("", [])
    if first is not None:
        earlier = (
            f"the first error's traceback ({first.process}, also in {first.log}):",
            list(first.traceback.lines[-TRACEBACK_LINES:]),
        )
    log = failed.log if failed is not None else None
    out.root_cause(result.reason, log, result.tail, result.tail_kind, title=title, first=earlier)


def supervise(
    request: LaunchRequest,
    procs: Sequence[Materialized],
    *,
    node: Optional[int],
    out: RunConsole,
    peers: Optional[Peers] = None,
    remote_health: Sequence[str] = (),
) -> RunResult:
    """Start `procs` (the node's, materialized) at once, supervise them, restart what fails
    within launcher.max_restarts, stop them all. remote_health: the health URLs of the run's
    servers on other nodes (hosts filled in), which the silent-hang clock waits for."""
    if not procs:
        return RunResult(0, None, f"no process to run on node {node}")
    remote = (
        RemoteServers(tuple(remote_health), request.health_timeout_s)
        if remote_health and request.hang_timeout_s
        else None
    )
    run = NodeRun(request, procs, node, out, peers, remote)
    if remote is not None:
        remote.watch(run.done)
    run.logs.mkdir(parents=True, exist_ok=True)
    status = NodeStatus(run.run_dir, node)
    result = _to_the_end(run, status)
    if (
        result.exit_code == 0
        and peers is not None
        and node is not None
        and run.started
        and run.trainers
    ):
        peers.mark_done(node)
    if run.started:
        out.summary([s.summary() for s in run.started])
    if result.root_cause is not None:
        run.explain(result)
        run.final_reason(result)
        _say_root_cause(out, result)
    else:
        out.say(
            f"{result.reason} after {time.monotonic() - run.begun:.0f} s; run folder {run.run_dir}",
            "bold green" if result.exit_code == 0 else "bold yellow",
        )
    status.write(
        run.started, "finished" if result.exit_code == 0 else "failed", result, epoch=run.epoch
    )
    return result


class NodeStatus:
    """run_dir/status/<node>.json: what `areal-launch status` shows about a node."""

    def __init__(self, run_dir: Path, node: Optional[int]):
        self.path = run_dir / status_file(node)

    def write(
        self, started: list[Started], state: str, result: Optional[RunResult] = None, epoch: int = 0
    ) -> None:
        data = {
            "state": state,
            "pid": os.getpid(),
            "updated": time.time(),
            "trainer_restarts": epoch,
            "processes": [
                {
                    "name": s.name,
                    "role": s.proc.spec.role,
                    "pid": s.popen.pid,
                    "exit": s.popen.returncode,
                    "log": str(s.log),
                    "restart": s.restart,
                    "started": s.start_wall,
                }
                for s in started
            ],
        }
        if result is not None:
            data.update(
                exit_code=result.exit_code,
                reason=result.reason,
                root_cause=result.root_cause,
                tail=result.tail[-20:],
            )
            if result.first is not None:
                data["first_error"] = result.first.to_dict()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            part = self.path.with_suffix(".part")
            part.write_text(json.dumps(data, indent=1))
            os.replace(part, self.path)
        except OSError:
            pass  # status is for people; a full disk must not stop the run


def _to_the_end(run: NodeRun, status: NodeStatus) -> RunResult:
    """Start the node's processes, watch them and restart what may be restarted until the run
    ends, then stop them all; how it ended."""
    out = run.out
    with stop_signals_recorded(run.stop), run.wakeup:
        result = None
        try:
            result = run.start_all()
            where = "this machine" if run.node is None else f"node {run.node}"
            out.say(
                f"started {len(run.started)} process(es) on {where}: "
                + ", ".join(f"{s.name} (pid {s.popen.pid})" for s in run.started)
                + f"; logs in {run.logs}",
                "dim",
            )
            status.write(run.started, "running", epoch=run.epoch)
            while result is None:
                result = run.watch()
                if run.recover(result):
                    status.write(run.started, "running", epoch=run.epoch)
                    result = None
        finally:
            run.done.set()
            out.end_status()
            run.stop_group(run.started, everything=True)
            for s in run.started:
                s.popen.wait()
                s.poll()
            out.pump(final=True)
    return result
