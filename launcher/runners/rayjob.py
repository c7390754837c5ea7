"""What the Ray runner executes for one run, as data and as text: pure, like sbatch.py.

One STRICT_SPREAD placement group with one bundle per plan node (the GPUs that node's processes
use and the node actor's CPUs), one node actor per bundle, and in each actor one command: the
node's supervisor (`python -m launcher.node.agent`), which runs that node's processes from the
run's request.json. Which Ray node gets bundle k is Ray's choice, so the hosts (`--hosts`) are
filled in once every actor has said where it landed. `dry_run_text` prints it all; the runner
performs exactly this (launcher/runners/ray.py). `fit_problem` says, from the nodes Ray reports,
why the plan cannot be placed at all.

A cpu plan's GPU slots are virtual: its bundles ask Ray for CPUs only (a CPU-only Ray cluster
runs it), and STRICT_SPREAD still gives every plan node a Ray node of its own. A plan node of a
node group asks for that group's custom resources too (launcher.group_resources), so it lands
on the Ray nodes started with them; a CPU-only node asks for no GPU.

A head node without GPUs (AReaL 2.0 accepts one, #1575: its Ray scheduler reads the device from
the cluster, not the driver's node) is a node like the others: the plan's nodes that ask GPUs
can only go on the GPU nodes, so the fit counts those apart, and `head_note` says where the
driver and the plan nodes go.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from launcher.runners.base import NODE_MODULE
from launcher.spec.cluster import NodeOffer, OfferedNode
from launcher.spec.errors import UserError
from launcher.spec.request import LaunchRequest
from launcher.spec.runfolder import RAY_JOB, REQUEST

STRATEGY = "STRICT_SPREAD"
MEMORY = "memory"  # Ray's resource of host memory, in bytes
HEAD = "node:__internal_head__"  # the resource Ray gives its head node alone
GIB = 1 << 30


@dataclass(frozen=True)
class RayNode:
    """A Ray node as the cluster reports it (alive nodes only)."""

    ip: str
    gpus: float
    cpus: float
    custom: Mapping[str, float] = field(default_factory=dict)  # its other resources
    # the cluster's head: where `ray start --head` ran and a Ray job's entrypoint (a detached
    # run's driver) runs; Ray's state API says so, ray.nodes() by the resource HEAD
    head: bool = False


def custom_resources(resources: Mapping[str, float]) -> dict[str, float]:
    """A node's resources other than GPU and CPU (custom ones, Ray's memory, node:IP)."""
    return {str(k): float(v) for k, v in resources.items() if k not in ("GPU", "CPU")}


ACCELERATOR = "accelerator_type:"  # Ray's resource naming a node's GPU type: accelerator_type:H100


def ray_offer(nodes: Sequence[RayNode], where: str) -> NodeOffer:
    """What `nodes` offer a run planned with cluster.device=auto: each node's GPUs and the GPU
    type Ray's accelerator_type resource names (launcher.planning.offer reads it)."""
    return NodeOffer(
        where,
        tuple(
            OfferedNode(
                n.ip,
                int(n.gpus),
                next(
                    (k[len(ACCELERATOR) :] for k in sorted(n.custom) if k.startswith(ACCELERATOR)),
                    None,
                ),
            )
            for n in nodes
        ),
    )


@dataclass(frozen=True)
class RayJob:
    """The run on Ray: bundle k (and node actor k) runs plan node k of `request`."""

    request: LaunchRequest  # what the nodes run (in the run folder as request.json, not here)
    python: str  # the interpreter on the Ray nodes
    cwd: str  # where node supervisors (so the processes) start, if it exists there
    bundles: tuple[dict[str, float], ...]
    placement_timeout_s: float  # how long the placement group may stay pending
    images: tuple[Optional[str], ...] = ()  # node actor k's container (runtime_env image_uri)

    @property
    def run_id(self) -> str:
        return self.request.run_id

    @property
    def request_path(self) -> str:
        """Where each node's supervisor reads the request (its node actor writes it there)."""
        return f"{self.request.run_dir}/{REQUEST}"

    def to_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "request_path": self.request_path,
            "python": self.python,
            "cwd": self.cwd,
            "bundles": list(self.bundles),
            "placement_timeout_s": self.placement_timeout_s,
            "images": list(self.images),
        }

    @classmethod
    def from_dict(cls, d: dict, request: LaunchRequest) -> "RayJob":
        """The job as to_dict wrote it, for `request` (read from its own file)."""
        if str(d["run_id"]) != request.run_id:
            raise UserError(
                f"the Ray job is of run {d['run_id']} but the request of run {request.run_id}"
            )
        return cls(
            request,
            str(d["python"]),
            str(d["cwd"]),
            tuple({str(k): float(v) for k, v in b.items()} for b in d["bundles"]),
            float(d["placement_timeout_s"]),
            tuple(d.get("images", ())),
        )

    @property
    def name(self) -> str:
        """The placement group's name (and the detached job's submission id)."""
        return f"areal-{self.run_id}"

    def node_argv(self, node: int, hosts: Sequence[str]) -> list[str]:
        """What node actor `node` runs: the node's supervisor, every plan node's address given."""
        return [
            self.python,
            "-m",
            NODE_MODULE,
            self.request_path,
            "--node",
            str(node),
            "--hosts",
            ",".join(hosts),
        ]

    def gpus(self, node: int) -> int:
        return int(self.bundles[node].get("GPU", 0))

    def cpus(self, node: int) -> float:
        return self.bundles[node]["CPU"]

    def memory(self, node: int) -> Optional[float]:
        """Bytes of Ray's `memory` node actor `node` takes (None: it asks none)."""
        return self.bundles[node].get(MEMORY)

    def image(self, node: int) -> Optional[str]:
        return self.images[node] if node < len(self.images) else None

    def runtime_env(self, node: int, env: Mapping[str, str]) -> Optional[dict]:
        """Node actor `node`'s runtime_env: the driver's variables, the image its engines ask."""
        out: dict = {"env_vars": dict(env)} if env else {}
        if self.image(node):
            out["image_uri"] = self.image(node)
        return out or None


def gpus_on_node(request: LaunchRequest, node: int) -> int:
    """GPUs plan node `node` asks Ray for: up to the highest position its processes use (the
    positions index the GPUs Ray gives the node's actor). 0 on cpu: the slots are virtual."""
    if request.device != "cuda":
        return 0
    return max((g + 1 for p in request.on_node(node) for g in p.gpus), default=0)


def ray_job(
    request: LaunchRequest,
    python: str,
    cpus_per_node: float,
    cwd: str,
    placement_timeout_s: float,
    group_resources: Optional[Mapping[str, Mapping[str, float]]] = None,
) -> RayJob:
    """group_resources: node group label -> the custom resources each of its plan nodes asks."""
    given = checked_groups(request, group_resources or {})
    bundles, images = [], []
    for node in range(request.nodes_needed()):
        ask = request.node_ask(node)  # the engines' scheduling_spec: the processes' own
        bundle = {"CPU": float(cpus_per_node + ask.cpu)}
        if gpus_on_node(request, node):
            bundle["GPU"] = float(gpus_on_node(request, node))
        if ask.mem_gib:
            bundle[MEMORY] = float(ask.mem_gib * GIB)
        bundle.update(given.get(request.group_label(node) or "", {}))
        bundles.append(bundle)
        if len(ask.images) > 1:
            raise UserError(
                f"plan node {node} runs engines asking different images "
                f"({', '.join(ask.images)}) in their scheduling_spec, but one Ray "
                "actor runs a node's processes: give them the same image"
            )
        images.append(ask.images[0] if ask.images else None)
    return RayJob(
        request,
        python,
        cwd,
        tuple(bundles),
        placement_timeout_s,
        tuple(images) if any(images) else (),
    )


def checked_groups(
    request: LaunchRequest, given: Mapping[str, Mapping[str, float]]
) -> dict[str, dict[str, float]]:
    """launcher.group_resources, checked: a label of the plan's node groups, custom resources
    (not CPU or GPU: those come from the plan) in positive amounts."""
    labels = {g.label for g in request.node_groups}
    out: dict[str, dict[str, float]] = {}
    for label, resources in given.items():
        key = f"launcher.group_resources.{label}"
        if label not in labels:
            raise UserError(
                f"{key}: the plan has no node group {label!r} (its groups: "
                f"{', '.join(sorted(labels)) or 'none'}); use a label of "
                "cluster.node_groups"
            )
        out[label] = {}
        for name, amount in dict(resources or {}).items():
            if (
                name in ("CPU", "GPU")
                or not isinstance(amount, (int, float))
                or isinstance(amount, bool)
                or not 0 < amount <= 1e9
            ):
                raise UserError(
                    f"{key}.{name}={amount!r}: a custom Ray resource (not CPU or "
                    "GPU, which the plan sets) and an amount above 0, e.g. "
                    f"{key}={{cpu_node: 1}}"
                )
            out[label][str(name)] = float(amount)
    return out


def group_warnings(request: LaunchRequest, given: Mapping[str, Mapping[str, float]]) -> list[str]:
    """A CPU-only node group that asks for no custom resource may land on a GPU node."""
    cpu = sorted(
        {request.group_label(k) or "" for k in range(request.nodes_needed()) if request.cpu_only(k)}
    )
    return [
        f"node group {label!r} is CPU-only but launcher.group_resources has none for it: "
        "its plan nodes may land on any Ray node with the CPUs (start its Ray nodes with a "
        f"custom resource, e.g. --resources='{{\"cpu_node\": 1}}', and set "
        f"launcher.group_resources.{label}={{cpu_node: 1}})"
        for label in cpu
        if label and not given.get(label)
    ]


def head_note(request: LaunchRequest, nodes: Sequence[RayNode], detach: bool) -> Optional[str]:
    """Where a GPU run goes on a cluster whose head has no GPU (None: the head has GPUs, the
    plan is on cpu, or no node has GPUs, which fit_problem refuses)."""
    head = next((n for n in nodes if n.head), None)
    gpu_nodes = [n.ip for n in nodes if n.gpus > 0]
    if request.device != "cuda" or head is None or head.gpus > 0 or not gpu_nodes:
        return None
    want = request.nodes_needed()
    asking = sum(1 for k in range(want) if gpus_on_node(request, k))
    shown = ", ".join(gpu_nodes[:3]) + (", ..." if len(gpu_nodes) > 3 else "")
    driver = "the driver (the run's Ray job)" if detach else "the driver if this command runs there"
    return (
        f"the Ray cluster's head {head.ip} has no GPU: it runs {driver}; the {asking} plan "
        f"node(s) with GPUs go on its {len(gpu_nodes)} GPU node(s) ({shown}) only"
        + (f", the {want - asking} without may land on the head" if want > asking else "")
    )


def placeholder_hosts(job: RayJob) -> list[str]:
    """What the dry run shows for the hosts, known only once placed."""
    return [f"HOST{k}" for k in range(len(job.bundles))]


def entrypoint(job: RayJob) -> list[str]:
    """The detached run's Ray job: this runner's driver, on the request and the RayJob shipped
    in the job's working_dir (the run folder)."""
    return [job.python, "-m", "launcher.runners.ray", REQUEST, RAY_JOB]


def dry_run_text(job: RayJob, address: str, job_entry: Optional[list[str]]) -> str:
    """Exactly what the runner executes, secrets masked."""
    lines = [
        f"# Ray cluster: launcher.address={address}; driver: "
        + ("a Ray job, submission id " + job.name if job_entry else "this command")
    ]
    if job_entry:
        lines += [
            "# job: entrypoint, working_dir = the run folder (request.json travels with it)",
            shlex.join(job_entry),
        ]
    lines.append(
        f"# placement group {job.name}: {STRATEGY}, bundle k = plan node k, placed "
        f"within {job.placement_timeout_s:g} s"
    )
    lines += [f"bundle {k}: {json.dumps(b, sort_keys=True)}" for k, b in enumerate(job.bundles)]
    lines += [
        f"# node actor {k} runs in the image {job.image(k)} (runtime_env image_uri)"
        for k in range(len(job.bundles))
        if job.image(k)
    ]
    lines.append(
        f"# node actor k (bundle k) runs in {shlex.quote(job.cwd)}; HOSTk = the address"
        " of the Ray node bundle k lands on"
    )
    hosts = placeholder_hosts(job)
    lines += [f"node {k}: {shlex.join(job.node_argv(k, hosts))}" for k in range(len(job.bundles))]
    if job.request.post_exit_hook:
        lines.append("# the driver, once every node actor is gone: post_exit_hook (in the request)")
    lines.append(f"# {job.request_path} (secrets masked):")
    return "\n".join(lines) + "\n" + job.request.to_json(mask_secrets=True) + "\n"


# ----------------------------------------------------------------------------- fit
def fit_problem(job: RayJob, nodes: Sequence[RayNode], where: str) -> Optional[str]:
    """Why the bundles cannot go on distinct nodes of `nodes` (None: they can), with a fix.
    `where` names the cluster in the message (launcher.address=...)."""
    asked = any(MEMORY in b for b in job.bundles)
    have = (
        "; ".join(
            f"{n.ip}: {n.gpus:g} GPU, {n.cpus:g} CPU"
            + (f", {n.custom.get(MEMORY, 0) / GIB:.0f} GiB memory" if asked else "")
            for n in nodes
        )
        or "none"
    )
    want = len(job.bundles)
    gpu_nodes = [n for n in nodes if n.gpus > 0]
    with_gpus = sum(1 for b in job.bundles if b.get("GPU", 0) > 0)
    if with_gpus > len(gpu_nodes) and len(gpu_nodes) < len(nodes):  # some have none: apart
        head = next((n for n in nodes if n.head and n.gpus <= 0), None)
        fewer = (
            f"plan for {len(gpu_nodes)} GPU node(s) (cluster.num_nodes="
            f"{len(gpu_nodes) + want - with_gpus})"
            if gpu_nodes
            else "run on cpu (cluster.device=cpu)"
        )
        return (
            f"{with_gpus} plan node(s) ask GPUs, each on a Ray node of its own, but the Ray "
            f"cluster ({where}) has {len(gpu_nodes)} node(s) with GPUs ({have})"
            + (f"; its head {head.ip} has none: it runs the driver" if head else "")
            + f": add Ray nodes with GPUs, or {fewer}"
        )
    if want > len(nodes):
        return (
            f"the plan needs {want} Ray nodes (one per plan node) but the Ray cluster "
            f"({where}) has {len(nodes)} alive ({have}): add Ray nodes, or plan for "
            f"{len(nodes)} (cluster.num_nodes={len(nodes)})"
        )
    custom = sorted({k for b in job.bundles for k in b if k not in ("GPU", "CPU", MEMORY)})
    for name in custom:  # a node group's plan nodes, each on a Ray node of its own
        asking = [b for b in job.bundles if name in b]
        holding = [n for n in nodes if n.custom.get(name, 0) > 0]
        if not _fit_apart(asking, holding):
            return (
                f"{len(asking)} plan node(s) ask for the custom resource {name!r} "
                f"(launcher.group_resources) but the Ray cluster ({where}) has "
                f"{len(holding)} node(s) with it that fit them: start more Ray nodes "
                f"with --resources='{{\"{name}\": 1}}'"
            )
    for k, b in enumerate(job.bundles):
        if not any(_fits(b, n) for n in nodes):
            return (
                f"plan node {k} needs {_text(b)} on one Ray node but no node of the Ray "
                f"cluster ({where}) has that many ({have}): set cluster.gpus_per_node to "
                f"at most {max(n.gpus for n in nodes):g}, or lower launcher.cpus_per_node "
                "(and the cpu and mem of the engines' scheduling_spec)"
            )
    if not _fit_apart(job.bundles, nodes):
        return (
            f"the plan's {want} nodes ({'; '.join(map(_text, job.bundles))}) do not fit on "
            f"distinct nodes of the Ray cluster ({where}; {have}): add Ray nodes with that "
            "many GPUs, or use fewer GPUs per node"
        )
    return None


def _fits(bundle: dict[str, float], node: RayNode) -> bool:
    return (
        bundle.get("GPU", 0) <= node.gpus
        and bundle.get("CPU", 0) <= node.cpus
        and all(v <= node.custom.get(k, 0) for k, v in bundle.items() if k not in ("GPU", "CPU"))
    )


def _text(bundle: dict[str, float]) -> str:
    return ", ".join(
        f"{v / GIB:g} GiB {k}" if k == MEMORY else f"{v:g} {k}"
        for k, v in sorted(bundle.items(), reverse=True)
    )


def _fit_apart(bundles: Sequence[dict[str, float]], nodes: Sequence[RayNode]) -> bool:
    """Whether each bundle gets a node of its own. Where every bundle asks the same CPUs and
    memory, only GPUs vary: the k-th largest bundle must fit the k-th largest node that has
    the CPUs and memory. Where the engines' scheduling_spec makes them differ, a bundle that
    fits no node alone was refused already, and Ray's placement decides the rest (a plan it
    cannot place times out naming what is pending): True."""
    if len({(b.get("CPU", 0), b.get(MEMORY, 0)) for b in bundles}) > 1:
        return True
    cpus = max((b.get("CPU", 0) for b in bundles), default=0)
    memory = max((b.get(MEMORY, 0) for b in bundles), default=0)
    room = sorted(
        (n.gpus for n in nodes if n.cpus >= cpus and n.custom.get(MEMORY, 0) >= memory),
        reverse=True,
    )
    need = sorted((b.get("GPU", 0) for b in bundles), reverse=True)
    return len(need) <= len(room) and all(g <= r for g, r in zip(need, room))


def first_line(exc: BaseException) -> str:
    """An error in one line; a Ray task's error as the exception it wraps."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {first_line(cause)}"
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__
