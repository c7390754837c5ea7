"""Ray runner: plan node k on one Ray node, its supervisor inside a Ray actor (docs/architecture.md
§8).

`check` asks the cluster for its alive nodes and refuses a plan that cannot fit (before anything
starts); a dry run that reaches no cluster says so and prints anyway. Its request object is the
RayJob (rayjob.py: the bundles and each node's command, for the request the nodes get); `run`
writes it beside request.json and performs it (raydriver.py): attached, this command is the
driver and streams every node's output, prefixed `(node<k> pid=..., ip=...)`; detached
(`launcher.detach=true`), the same driver runs as a Ray job with submission id
`areal-<run id>`, so the terminal may go away.

`status`, `cancel` and `logs` of a detached run ask Ray's Job API (the address is recorded);
of an attached run they work like the local runner's, from the run folder and the driver's pid.
This module imports ray only inside the functions of launcher=ray, never at import time.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Sequence

from launcher.node.logs import engine_processes
from launcher.node.runs import RunRecord, write_private, write_record
from launcher.runners import LauncherBase, local
from launcher.runners.base import RunnerBase, unhonoured
from launcher.runners.rayjob import (
    HEAD,
    RayJob,
    RayNode,
    custom_resources,
    dry_run_text,
    entrypoint,
    first_line,
    fit_problem,
    group_warnings,
    head_note,
    ray_job,
    ray_offer,
)
from launcher.spec.cluster import NodeOffer
from launcher.spec.errors import ConfigError, LaunchError, UserError
from launcher.spec.limits import seconds_problem
from launcher.spec.request import EngineAsk, LaunchRequest
from launcher.spec.runfolder import RAY_JOB

PROBE_S = 3.0  # a cluster address that does not answer within this is no cluster
# the driver's log streaming: every line (no "[repeated 3x]"), no colour codes in the prefix
DRIVER_ENV = {"RAY_DEDUP_LOGS": "0", "RAY_COLOR_PREFIX": "0"}
FINISHED = ("SUCCEEDED", "FAILED", "STOPPED")


@dataclass
class Config(LauncherBase):
    """launcher=ray: one Ray node per plan node, each node's supervisor in a Ray actor."""

    _target_: str = "launcher.runners.ray.Runner"
    address: str = "auto"  # auto (RAY_ADDRESS, else this machine's cluster) | HOST:PORT | ray://..
    detach: bool = False  # true: the driver runs as a Ray job (areal-<run id>); returns at once
    placement_timeout_s: float = 60.0  # how long the cluster may take to give every plan node
    cpus_per_node: float = 1.0  # Ray CPUs each node's actor takes (the processes' are not counted)
    python: Optional[str] = None  # the interpreter on the Ray nodes; None: this one's path
    # node group label -> custom Ray resources each of its plan nodes asks for, so it lands on
    # the Ray nodes started with them, e.g. {cpu: {cpu_node: 1}} for a CPU-only group
    group_resources: Dict[str, Dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        problem = seconds_problem(self.placement_timeout_s, allow_zero=False)
        if problem:
            raise ConfigError(f"launcher.placement_timeout_s={self.placement_timeout_s}: {problem}")
        if not 0 < self.cpus_per_node <= 1024:
            raise ConfigError(
                f"launcher.cpus_per_node={self.cpus_per_node}: choose a number "
                "of Ray CPUs from 0 to 1024 (more than 0)"
            )
        if not str(self.address).strip():
            raise ConfigError("launcher.address is empty: use auto or HOST:PORT")


def for_nodes(request: LaunchRequest) -> LaunchRequest:
    """The request the nodes get (and the dry run shows): the nodes' output, through Ray, is the
    only log `logs` can read from here (the run folder need not be shared), so every process's
    lines go into it, the servers' too."""
    return replace(request, console="all")


RAY_CURRENT = "ray_current_cluster"  # where `ray start` writes the address `auto` finds


class Runner(RunnerBase[Config, RayJob]):
    name = "ray"

    def __init__(self, config: Config):
        super().__init__(config)
        self.nodes: Optional[list[RayNode]] = None  # the cluster's alive nodes, once read

    def offer(self) -> Optional[NodeOffer]:
        """The cluster's alive nodes (GPUs, Ray's accelerator_type), so that cluster.device=auto
        plans for the nodes the run gets, not for this machine. When no cluster answers, an
        offer that says why (`unread`): `plan` and a dry run plan for this machine with that
        note (the dry run also says the fit went unchecked), and a launch stops at check()'s
        connection error."""
        where = f"the Ray cluster at {self.config.address}"
        if (
            self.config.address == "auto"
            and not os.environ.get("RAY_ADDRESS")
            and not Path(os.environ.get("RAY_TMPDIR", "/tmp"), "ray", RAY_CURRENT).exists()
        ):
            # no cluster started on this machine: Ray's own search would say so
            return NodeOffer(
                where,
                (),
                unread="no Ray cluster was found (launcher.address="
                "auto, RAY_ADDRESS unset, none started on this machine)",
            )
        try:
            self.nodes = state_api_nodes(self.config.address)
        except (LaunchError, UserError) as exc:
            return NodeOffer(where, (), unread=f"{where} did not say its nodes ({exc})")
        return ray_offer(self.nodes, where)

    def python(self, asks: Mapping[str, EngineAsk] = {}) -> str:
        return self.config.python or sys.executable

    def notes(self, request: LaunchRequest) -> list[str]:
        """Each plan node's bundle asks its processes' CPUs and memory, its actor their image;
        Ray places bundles on nodes it picks. Once the cluster's nodes are read (device=auto,
        a launch's check): where the run goes when its head has no GPU."""
        why = "Ray picks the nodes of the placement group"
        said = unhonoured(request, self.name, ("cpu", "memory", "image"), why)
        head = head_note(request, self.nodes or [], self.config.detach)
        return said + ([head] if head else [])

    def job(self, request: LaunchRequest) -> RayJob:
        return ray_job(
            for_nodes(request),
            self.python(),
            self.config.cpus_per_node,
            os.getcwd(),
            self.config.placement_timeout_s,
            self.config.group_resources,
        )

    def check(self, request: LaunchRequest) -> list[str]:
        if not request.processes:
            raise UserError("the plan has no processes to run on Ray: enable rollout or actor")
        if request.nodes_needed() > request.num_nodes:
            raise UserError(
                f"the plan needs {request.nodes_needed()} nodes but "
                f"cluster.num_nodes={request.num_nodes}; set cluster.num_nodes="
                f"{request.nodes_needed()}"
            )
        job = self.job(request)
        said = group_warnings(request, self.config.group_resources)
        try:
            self.nodes = nodes = self.cluster_nodes()
        except LaunchError as exc:
            if self.config.dry_run:  # printing needs no cluster; the fit is said to be unchecked
                return said + [f"{exc}; the dry run did not check that the plan fits a Ray cluster"]
            raise
        problem = fit_problem(job, nodes, f"launcher.address={self.config.address}")
        if problem:
            raise UserError(problem)
        return said

    def cluster_nodes(self) -> list[RayNode]:
        """The cluster's alive nodes: through the driver's connection when this command will
        be the driver, else through the read-only state API (a dry run, a detached run)."""
        if self.config.dry_run or self.config.detach:
            return state_api_nodes(self.config.address)
        ray = connect(self.config.address)
        return [
            RayNode(
                n["NodeManagerAddress"],
                n["Resources"].get("GPU", 0.0),
                n["Resources"].get("CPU", 0.0),
                custom_resources(n["Resources"]),
                head=HEAD in n["Resources"],
            )
            for n in ray.nodes()
            if n["Alive"]
        ]

    def render(self, job: RayJob) -> str:
        return dry_run_text(
            job, self.config.address, entrypoint(job) if self.config.detach else None
        )

    def execute(self, job: RayJob) -> int:
        """The job's request is beside it in the run folder: what a detached driver reads."""
        request = job.request
        write_private(Path(request.run_dir) / RAY_JOB, json.dumps(job.to_dict(), indent=1))
        if self.config.detach:
            return self.submit(job)
        from launcher.runners.raydriver import drive

        me = os.getpid()
        write_record(
            RunRecord(
                "ray", request.run_id, request.run_dir, pid=me, pid_start=local.start_time(me)
            )
        )
        say(
            f"run {request.run_id}: {len(job.bundles)} plan node(s) on the Ray cluster at "
            f"{self.config.address}; areal-launch status|cancel|logs {request.run_id}"
        )
        connect(self.config.address)
        return drive(job, say, actor_env())

    def submit(self, job: RayJob) -> int:
        """The driver as a Ray job: the run folder (request.json, ray-job.json) travels as
        its working_dir; Ray keeps its output (`areal-launch logs`)."""
        request = job.request
        client = job_client(self.config.address)
        env = {
            **actor_env(),
            "RAY_JOB_STOP_WAIT_TIME_S": f"{request.grace_period_s + 15:.0f}",
            **DRIVER_ENV,
        }
        try:
            client.submit_job(
                entrypoint=shlex.join(entrypoint(job)),
                submission_id=job.name,
                runtime_env={"working_dir": request.run_dir, "env_vars": env},
                metadata={"run_dir": request.run_dir},
            )
        except Exception as exc:  # noqa: BLE001 - the Job API's refusals become one line
            raise LaunchError(
                f"the Ray Job API at {client.get_address()} refused the job: {first_line(exc)}"
            ) from None
        write_record(
            RunRecord(
                "ray",
                request.run_id,
                request.run_dir,
                job_id=job.name,
                address=client.get_address(),
            )
        )
        print(job.name, flush=True)
        print(
            f"areal-launch: submitted; areal-launch status|logs|cancel {job.name}",
            file=sys.stderr,
            flush=True,
        )
        return 0

    # ------------------------------------------------------------------------- a run
    def status(self, record: RunRecord) -> tuple[str, int]:
        if record.job_id is None:
            return self._attached().status(record)
        info = _job_info(record)
        if info is None:
            return (
                f"job {record.job_id}: not known to the Ray cluster at {record.address}"
                f"\nrun folder: {record.run_dir}",
                1,
            )
        lines = [f"job {record.job_id}: {info.status} (Ray job at {record.address})"]
        if info.message:
            lines.append(f"  {info.message}")
        if info.driver_exit_code is not None:
            lines.append(f"  driver exit code {info.driver_exit_code}")
        lines.append(f"run folder: {record.run_dir}")
        return "\n".join(lines), 0

    def cancel(self, record: RunRecord) -> str:
        if record.job_id is None:
            return self._attached().cancel(record)
        info = _job_info(record)
        if info is None:
            raise UserError(
                f"job {record.job_id}: not known to the Ray cluster at {record.address}"
            )
        if str(info.status) in FINISHED:
            return f"job {record.job_id}: already {info.status}; nothing to cancel"
        client = job_client(str(record.address))
        client.stop_job(record.job_id)
        deadline = time.monotonic() + self.config.grace_period_s + 20
        while time.monotonic() < deadline:
            state = str(client.get_job_status(record.job_id))
            if state in FINISHED:
                return f"job {record.job_id}: {state} (was {info.status})"
            time.sleep(0.2)
        return f"job {record.job_id}: stop requested (still stopping)"

    def logs(self, record: RunRecord, follow: bool, engine: Optional[str]) -> Iterator[str]:
        if record.job_id is None:
            return self._attached().logs(record, follow, engine)
        return _job_logs(record, follow, engine)

    def _attached(self) -> local.Runner:
        """An attached run is this machine's driver process: what the local runner does."""
        return local.Runner(local.Config(grace_period_s=self.config.grace_period_s))


def say(text: str) -> None:
    print(f"areal-launch: {text}", flush=True)


# ----------------------------------------------------------------------------- the cluster
def probe(address: str) -> None:
    """LaunchError, at once, when a HOST:PORT address does not answer (ray.init would wait
    for minutes); `auto` without RAY_ADDRESS is left to Ray's own search of this machine."""
    given = os.environ.get("RAY_ADDRESS", "") if address == "auto" else address
    m = re.fullmatch(r"(?:[a-z]+://)?\[?([^\]/]+?)\]?:(\d+)/?", given.strip())
    if not given or m is None:
        return
    try:
        socket.create_connection((m.group(1), int(m.group(2))), timeout=PROBE_S).close()
    except OSError as exc:
        raise LaunchError(
            f"no Ray cluster answers at {given} ({exc.strerror or exc}): start "
            "one (ray start --head) or set launcher.address=HOST:PORT"
        ) from None


def _import_ray() -> Any:
    import logging

    os.environ.update(DRIVER_ENV)  # read when ray is imported and when it connects
    try:
        import ray
    except ImportError as exc:
        raise UserError(
            f"launcher=ray needs Ray here ({exc}): pip install -e '.[ray]' "
            "(ray[default]==2.60.0, the version the cluster runs)"
        ) from None

    logging.getLogger("ray").setLevel(logging.WARNING)  # after import: ray sets its own
    return ray


def connect(address: str) -> Any:
    """This process as the Ray driver (once); the ray module."""
    probe(address)
    ray = _import_ray()
    if not ray.is_initialized():
        try:
            ray.init(address=address, logging_level="ERROR", log_to_driver=True)
        except Exception as exc:  # noqa: BLE001 - Ray's connection errors become one line
            raise LaunchError(
                f"cannot connect to the Ray cluster at {address}: "
                f"{first_line(exc)}: start one (ray start --head) or set "
                "launcher.address=HOST:PORT"
            ) from None
    return ray


def state_api_nodes(address: str) -> list[RayNode]:
    """Alive nodes through Ray's state API (read-only; needs the cluster's dashboard)."""
    probe(address)
    _import_ray()
    from ray.util.state import list_nodes

    try:
        found = list_nodes(address=address, filters=[("state", "=", "ALIVE")])
    except Exception as exc:  # noqa: BLE001
        raise LaunchError(
            f"cannot ask the Ray cluster at {address} for its nodes: {first_line(exc)}"
        ) from None
    return [
        RayNode(
            n.node_ip,
            n.resources_total.get("GPU", 0.0),
            n.resources_total.get("CPU", 0.0),
            custom_resources(n.resources_total),
            head=bool(n.is_head_node),
        )
        for n in found
    ]


def job_client(address: str) -> Any:
    probe(address)
    _import_ray()
    import logging

    from ray.job_submission import JobSubmissionClient

    logging.getLogger("ray.dashboard.modules.dashboard_sdk").setLevel(logging.WARNING)
    try:
        return JobSubmissionClient(address)
    except Exception as exc:  # noqa: BLE001
        raise LaunchError(
            f"cannot reach the Ray Job API at {address}: {first_line(exc)} "
            "(a detached run needs the cluster's dashboard)"
        ) from None


def actor_env() -> dict[str, str]:
    """What node actors (and a detached driver) need of this process's environment: its
    PYTHONPATH, when it has one (a checkout run in place; absolute, for workers elsewhere). An
    installed areal-launch needs nothing, and an actor without a runtime_env starts ~0.7 s
    sooner (Ray starts no worker of its own for it)."""
    paths = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"PYTHONPATH": os.pathsep.join(paths)} if paths else {}


# ----------------------------------------------------------------------------- Ray jobs
def _job_info(record: RunRecord) -> Any:
    """The Job API's record of the run's job; None when the cluster does not know it."""
    client = job_client(str(record.address))
    try:
        return client.get_job_info(str(record.job_id))
    except Exception as exc:  # noqa: BLE001
        if "does not exist" in str(exc) or "404" in str(exc):
            return None
        raise LaunchError(
            f"cannot ask the Ray Job API at {record.address}: {first_line(exc)}"
        ) from None


_PREFIX = re.compile(r"\((?P<actor>[^()\s]+) pid=\d+(?:, ip=[^)]*)?\) (?P<name>[^\s|]+)\s+\| ")


def _job_logs(record: RunRecord, follow: bool, engine: Optional[str]) -> Iterator[str]:
    """The job's output (every node's lines, as the driver printed them); with `engine`, the
    lines of that engine's processes only. With `follow`, as they come until the job ends."""
    client = job_client(str(record.address))
    keep = _engine_filter(Path(record.run_dir), engine)
    job = str(record.job_id)
    lines = _tailed(client, job) if follow else iter(client.get_job_logs(job).splitlines())
    return (line for line in lines if keep(line))


def _tailed(client: Any, job: str) -> Iterator[str]:
    """Lines of the job's log through Ray's log stream (a websocket), until the job has ended."""
    import asyncio
    import queue
    import threading

    chunks: queue.Queue = queue.Queue()

    def pump() -> None:
        async def tail() -> None:
            async for chunk in client.tail_job_logs(job):
                chunks.put(chunk)

        try:
            asyncio.run(tail())
        except Exception as exc:  # noqa: BLE001 - said once, at the end of the lines
            chunks.put(f"\nareal-launch: the log stream ended: {first_line(exc)}\n")
        finally:
            chunks.put(None)

    threading.Thread(target=pump, daemon=True).start()
    partial = ""
    while (chunk := chunks.get()) is not None:
        *whole, partial = (partial + chunk).split("\n")
        yield from whole
    if partial:
        yield partial


def _engine_filter(run_dir: Path, engine: Optional[str]) -> Callable[[str], bool]:
    if engine is None:
        return lambda line: True
    names = set(engine_processes(run_dir, engine))

    def keep(line: str) -> bool:
        m = _PREFIX.match(line)
        return m is not None and m.group("name") in names

    return keep


# ----------------------------------------------------------------------------- the job
def main(argv: Optional[Sequence[str]] = None) -> int:
    """A detached run's driver: `python -m launcher.runners.ray request.json ray-job.json`,
    run by Ray as the job's entrypoint in the job's working_dir (the run folder's copy)."""
    from launcher.runners.raydriver import drive

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m launcher.runners.ray REQUEST_JSON RAY_JOB_JSON", file=sys.stderr)
        return 2
    try:
        request = LaunchRequest.from_dict(json.loads(Path(args[0]).read_text()))
        job = RayJob.from_dict(json.loads(Path(args[1]).read_text()), request)
        say(f"run {request.run_id}: the driver of Ray job {job.name}; run folder {request.run_dir}")
        connect("auto")  # RAY_ADDRESS: Ray sets it for a job's entrypoint
        return drive(job, say, {})  # the actors inherit the job's runtime_env
    except (LaunchError, OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
