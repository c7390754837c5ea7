"""The Ray driver: place a run, start one node actor per plan node, see the run through.

It runs in `areal-launch` itself (attached) or as a Ray job's entrypoint (detached), and
performs a RayJob (rayjob.py) exactly: the placement group, waited for with a timeout (one that
cannot be placed never becomes ready); node actor k on bundle k, asked where it landed; then
each actor runs plan node k's supervisor with every node's address. The actor asks Ray for the
node's GPUs, so Ray gives it some (CUDA_VISIBLE_DEVICES) and the supervisor maps the plan's GPU
positions through them.

The supervisor is the actor's child in the actor's process group, never in a session of its own:
whenever Ray ends the actor (the driver exits or is killed, the job is stopped, the node is lost)
it ends the supervisor's holder too, and the node's keeper sweeps the rest (reference/ray.md,
design D: nothing was left in any case measured). The driver coordinates the nodes: the run
succeeds when every node with trainers exits 0, then nodes with servers only are stopped; the
first node that fails or is lost stops all of them; SIGINT/SIGTERM/SIGHUP stop all, exit 128+N.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from launcher.node.runs import make_folders, write_private
from launcher.spec.errors import LaunchError
from launcher.spec.process import ENV_GPUS
from launcher.spec.request import Folders
from launcher.spec.runfolder import status_file

if TYPE_CHECKING:  # the driver's; a node actor loads only what it runs (it starts sooner)
    from launcher.node.supervisor import StopRequest
    from launcher.runners.rayjob import RayJob
    from launcher.spec.request import LaunchRequest

ENV_NOSET = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"  # Ray's, for job entrypoints only
TICK_S = 0.1  # how often the driver looks at signals while it waits on Ray
STOP_EXTRA_S = 15.0  # a node's stop may take its grace period plus this
LOG_DRAIN_S = 0.3  # Ray streams output within ~0.1 s: the verdict comes after the last lines


class NodeActor:
    """Plan node `node` inside Ray (made a Ray actor by `drive`; this module never imports ray
    at import time, so the launcher does not either)."""

    def __init__(self, node: int):
        self.node = node
        self.proc: Optional[subprocess.Popen] = None
        self.said: deque[str] = deque(maxlen=20)  # the supervisor's last stderr lines
        self.copier: Optional[threading.Thread] = None
        self.run_dir = Path(".")

    def __repr__(self) -> str:  # Ray prefixes the actor's output with it: "(node1 pid=...)"
        return f"node{self.node}"

    def where(self) -> str:
        import ray

        return str(ray.util.get_node_ip_address())

    def prepare(self, folders: dict) -> None:
        """The request's folders made and the earlier records cleared, here (the first plan
        node), before any node starts: the run folder need not be shared on Ray, so the nodes
        cannot wait for each other there, but the driver can wait for this."""
        make_folders(Folders.from_dict(folders), clear=True)

    def start(self, argv: list[str], request_json: str, request_path: str, cwd: str) -> int:
        """Write the request where the supervisor reads it, start the supervisor."""
        import ray

        path = Path(request_path)
        self.run_dir = path.parent
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_private(path, request_json)
        gpus = [str(g) for g in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]
        self.proc = subprocess.Popen(
            argv,
            env=node_env(os.environ, gpus),
            cwd=cwd if os.path.isdir(cwd) else str(path.parent),
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.copier = threading.Thread(target=self._copy_stderr, daemon=True)
        self.copier.start()
        return self.proc.pid

    def _copy_stderr(self) -> None:
        """Pass the supervisor's stderr on (Ray streams it) and keep its last lines."""
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.said.append(line)
            print(line, file=sys.stderr, flush=True)

    def wait(self) -> dict:
        """The supervisor's exit code and what its node status says about the run."""
        assert self.proc is not None
        code = self.proc.wait()
        if self.copier is not None:
            self.copier.join(timeout=2)
        try:
            status = json.loads((self.run_dir / status_file(self.node)).read_text())
        except (OSError, ValueError):
            status = {}
        return {
            "code": code,
            "reason": status.get("reason"),
            "tail": status.get("tail", []),
            "said": list(self.said),
        }

    def stop(self) -> int:
        """SIGTERM to the supervisor: it stops its processes (grace, then KILL) and exits."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait()


def node_env(environ: Mapping[str, str], gpus: list[str]) -> dict[str, str]:
    """The supervisor's environment: the actor's, with the node's GPUs named, without what Ray
    sets for its own workers (a job entrypoint's NOSET switch, a worker's OMP_NUM_THREADS=1)."""
    env = dict(environ)
    env.pop(ENV_NOSET, None)
    if "OMP_NUM_THREADS" not in _initial_environ():
        env.pop("OMP_NUM_THREADS", None)  # Ray set it for this worker, not for the run
    if gpus:
        env[ENV_GPUS] = ",".join(gpus)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _initial_environ() -> set[str]:
    """Names in the environment this process was started with (before Ray changed it)."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return set(os.environ)
    return {item.split(b"=", 1)[0].decode("utf-8", "replace") for item in raw.split(b"\0") if item}


# ----------------------------------------------------------------------------- the driver
@dataclass
class Verdict:
    """How the run ended: its exit code and the lines that say so (printed last)."""

    code: int
    lines: list[str] = field(default_factory=list)


def drive(job: RayJob, say: Callable[[str], None], actor_env: dict[str, str]) -> int:
    """Perform `job` on the connected Ray cluster; the run's exit code. LaunchError when the
    cluster cannot place it in time (nothing was started)."""
    from ray.exceptions import RayError
    from ray.util.placement_group import placement_group, remove_placement_group

    from launcher.node.supervisor import StopRequest, stop_signals_recorded
    from launcher.runners.rayjob import STRATEGY, first_line

    begun = time.monotonic()
    stop = StopRequest()
    pg = placement_group(list(job.bundles), strategy=STRATEGY, name=job.name)
    actors: list[Any] = []
    verdict = Verdict(1)
    try:
        with stop_signals_recorded(stop):
            actors = _node_actors(job, pg, actor_env)
            hosts = _placed(job, pg, actors, stop)
            if hosts is None:
                return _stopped(stop)
            say("placed: " + ", ".join(f"plan node {k} on {h}" for k, h in enumerate(hosts)))
            if not _started(job, actors, hosts, stop):
                return _stopped(stop)
            verdict = _watch(job.request, actors, hosts, stop, say, begun)
    except RayError as exc:  # an actor died before its node started
        verdict = Verdict(
            1, [f"run failed: a node actor could not start its node: {first_line(exc)}"]
        )
    finally:
        _stop_nodes(actors, job.request.grace_period_s, stop)
        remove_placement_group(pg)
    time.sleep(LOG_DRAIN_S)  # the nodes' last lines reach us before the verdict
    for line in verdict.lines:
        say(line)
    if job.request.post_exit_hook:  # every node actor is gone, and with it its processes
        from launcher.node.exithook import run_hook

        request = job.request
        assert request.post_exit_hook is not None
        say(run_hook(request.post_exit_hook, request.run_dir, verdict.code).line())
    return verdict.code


def _node_actors(job: RayJob, pg: Any, actor_env: dict[str, str]) -> list[Any]:
    """Node actor k on bundle k; each starts as soon as its bundle is placed."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    remote = ray.remote(NodeActor)
    return [
        remote.options(  # wait() blocks in one thread while stop() runs
            max_concurrency=4,
            num_cpus=job.cpus(k),
            num_gpus=job.gpus(k),
            memory=job.memory(k),
            runtime_env=job.runtime_env(k, actor_env),
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=k
            ),
        ).remote(k)
        for k in range(len(job.bundles))
    ]


def _placed(job: RayJob, pg: Any, actors: list[Any], stop: StopRequest) -> Optional[list[str]]:
    """Where each node actor landed, once the placement group is ready (None: a stop signal
    came first). LaunchError when it is not placed within the job's timeout."""
    import ray

    if not _wait_for([pg.ready()], stop, job.placement_timeout_s):
        if stop.signum is None:
            raise LaunchError(_pending(job, ray.available_resources()))
        return None
    return _get([a.where.remote() for a in actors], stop)


def _started(job: RayJob, actors: list[Any], hosts: list[str], stop: StopRequest) -> bool:
    """The request's folders prepared by the first plan node's actor, then every node's
    supervisor started (False: a stop signal came first)."""
    request = job.request
    if request.folders is not None and request.nodes:
        first = actors[request.nodes[0]]
        if _get([first.prepare.remote(request.folders.to_dict())], stop) is None:
            return False
    text = request.to_json()
    starts = [
        a.start.remote(job.node_argv(k, hosts), text, job.request_path, job.cwd)
        for k, a in enumerate(actors)
    ]
    return _get(starts, stop) is not None


def _stopped(stop: StopRequest) -> int:
    return 128 + (stop.signum or 0)


def _wait_for(refs: list, stop: StopRequest, timeout_s: Optional[float]) -> bool:
    """Whether every ref is ready before timeout_s; False at once on a stop signal."""
    import ray

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pending = list(refs)
    while pending:
        if stop.signum is not None or (deadline is not None and time.monotonic() > deadline):
            return False
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=TICK_S)
    return True


def _get(refs: list, stop: StopRequest) -> Optional[list]:
    import ray

    return ray.get(refs) if _wait_for(refs, stop, None) else None


def _pending(job: RayJob, free: dict[str, float]) -> str:
    """What the placement timeout says: the bundles still pending, what is free now."""
    from launcher.runners.rayjob import STRATEGY

    bundles = "; ".join(
        f"plan node {k}: {json.dumps(b, sort_keys=True)}" for k, b in enumerate(job.bundles)
    )
    now = ", ".join(f"{free.get(r, 0):g} {r}" for r in ("GPU", "CPU"))
    return (
        f"the Ray cluster did not place the run within {job.placement_timeout_s:g} s: "
        f"placement group {job.name} ({STRATEGY}, one node each) is still pending for "
        f"{bundles}; free in the cluster now: {now} (`ray status` lists the pending "
        "demands): wait for other jobs to free their nodes, or raise "
        "launcher.placement_timeout_s"
    )


def _watch(
    request: LaunchRequest,
    actors: list,
    hosts: list[str],
    stop: StopRequest,
    say: Callable[[str], None],
    begun: float,
) -> Verdict:
    """Until every node with trainers has exited 0 (or, with no trainers, until stopped); the
    first node that fails or is lost ends the run."""
    import ray
    from ray.exceptions import RayError

    pending = {a.wait.remote(): k for k, a in enumerate(actors)}
    trainers = {k for k in range(len(actors)) if request.has_trainers(k)}
    needed = set(trainers)
    while pending and (needed or not trainers):
        if stop.signum is not None:
            name = signal.Signals(stop.signum).name
            say(f"got {name}: stopping every node")
            return Verdict(128 + stop.signum, [f"run stopped: got {name}"])
        done, _ = ray.wait(list(pending), num_returns=1, timeout=TICK_S)
        for ref in done:
            k = pending.pop(ref)
            try:
                result = ray.get(ref)
            except RayError as exc:
                why = f"plan node {k} ({hosts[k]}) was lost ({type(exc).__name__})"
                say(f"{why}: stopping every node")
                return Verdict(1, [f"run failed: {why}"])
            if result["code"] != 0:
                reason = result["reason"] or (
                    result["said"][-1]
                    if result["said"]
                    else f"its supervisor exited with {result['code']}"
                )
                say(f"plan node {k} failed: stopping every node")
                return Verdict(
                    1,
                    [
                        f"run failed: plan node {k} ({hosts[k]}): {reason}",
                        *(f"  {line}" for line in result["tail"]),
                    ],
                )
            needed.discard(k)
    return Verdict(
        0,
        [
            f"run finished: every node with trainers exited 0 after "
            f"{time.monotonic() - begun:.0f} s; run folder {request.run_dir}"
        ],
    )


def _stop_nodes(actors: list, grace_s: float, stop: StopRequest) -> None:
    """Stop every node still running (TERM to its supervisor, which stops its processes),
    then end the actors; whatever is left, each node's keeper sweeps."""
    if not actors:
        return
    import ray
    from ray.exceptions import RayError

    refs = [a.stop.remote() for a in actors]
    deadline = time.monotonic() + grace_s + STOP_EXTRA_S
    while refs and not stop.hurry and time.monotonic() < deadline:  # a 2nd Ctrl-C: no waiting
        _, refs = ray.wait(refs, num_returns=len(refs), timeout=TICK_S)
    for a in actors:
        try:
            ray.kill(a)
        except RayError:
            pass
