"""The launch request: what every runner executes, and what a dry run prints
(docs/architecture.md, "Runners").

Backends turn the plan into processes (launcher.backends.plan_processes); the request adds
what the node supervisors need (run id, run folder, deadlines). It is runner-neutral: hosts
are placeholders and GPUs are positions in a node's visible GPUs. `materialize` is the one
place that turns a process into what is exec'd on a node: hosts filled in,
CUDA_VISIBLE_DEVICES set to the GPUs those positions name there (the user's mask, Slurm's or
Ray's ids, UUIDs and MIG ids as given). The supervisor runs it on the node; dry runs run it
too, so what they print is what would run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Optional, Sequence

from launcher.spec.cluster import NodeGroup
from launcher.spec.codec import JsonRecord, from_json, to_json
from launcher.spec.errors import LaunchError, UserError
from launcher.spec.process import (
    ENV_GPUS,
    ENV_HOSTS,
    ENV_RUN_MARKER,
    INDENT_UP_TO,
    ProcessSpec,
    fill_hosts,
    masked,
    nodes_named,
)

REQUEST_SCHEMA = 1
# The one home of these defaults: the schema (launcher.*, rollout.*) and the request read them
GRACE_PERIOD_S = 10.0  # after SIGTERM, before SIGKILL, when a run stops
HEALTH_TIMEOUT_S = 600.0  # a server must answer its health probe within this


USER = "{user}"  # in a path of Folders: the user the node runs as (records are per user)


@dataclass(frozen=True)
class Folders(JsonRecord):
    """Folders outside the run folder that the run's processes share, prepared on every node
    before any process starts: `make` made on each node; `clear` (records an earlier run of
    the same name left) removed by the run's first node before any node starts anything, so
    that no process finds an earlier run's records there, and no node clears what another
    node's processes wrote."""

    make: tuple[str, ...] = ()
    clear: tuple[str, ...] = ()

    def cleared(self, user: str) -> tuple[str, ...]:
        """The folders to clear on a node that runs as `user`."""
        return tuple(path.replace(USER, user) for path in self.clear)


@dataclass(frozen=True)
class FlagCheck(JsonRecord):
    """The flags the user gave a serving component's servers (AReaL's `vllm:` section,
    `server_args`, `extra_args`), each with the key it was written as: before anything starts
    the preflight parses the servers' argv with the engine's own parser and names the key of
    a flag it refuses."""

    backend: str
    component: str
    origins: Mapping[str, str]  # flag -> where it was written


@dataclass(frozen=True)
class EngineAsk(JsonRecord):
    """What an engine asks of the nodes its processes run on: for each GPU of a process (a
    process on no GPU counts as one) CPU cores and GiB of memory (0: not asked); a container
    image; the nodes it must or must not get (Slurm's node lists; None: not asked). Each runner
    honours what it can (Slurm: job-wide values; Ray: each plan node's bundle asks the sum of
    its processes' asks; local: nothing but the CPUs, as thread counts) and says in a note what
    it does not. `key`: where the user wrote them, for those notes. Slurm's reservation and
    whether the job's nodes are its own (`exclusive`: None, not asked) are the job's, one
    value for all engines."""

    cpu: int = 0
    mem_gib: int = 0
    image: Optional[str] = None
    nodelist: Optional[str] = None
    exclude: Optional[str] = None
    key: str = ""
    reservation: Optional[str] = None
    exclusive: Optional[bool] = None

    def asked(self) -> tuple[str, ...]:
        """What it asks for, each named as the notes name it."""
        named = (
            ("cpu", self.cpu),
            ("memory", self.mem_gib),
            ("image", self.image),
            ("nodelist", self.nodelist),
            ("exclude", self.exclude),
            ("reservation", self.reservation),
            ("exclusive", self.exclusive is not None),
        )
        return tuple(name for name, value in named if value)


@dataclass(frozen=True)
class NodeAsk:
    """What one plan node's processes ask together (EngineAsk summed over them)."""

    cpu: int = 0
    mem_gib: int = 0
    images: tuple[str, ...] = ()  # the distinct images its processes ask for


@dataclass(frozen=True)
class LaunchRequest(JsonRecord):
    """One run, runner-neutral: its processes per plan node and how to supervise them."""

    run_id: str  # unique: marks every process of the run (AREAL_LAUNCH_RUN)
    run_dir: str
    job_name: str
    device: str  # "cuda" or "cpu" (cpu: GPU slots are virtual, every GPU is hidden)
    num_nodes: int
    gpus_per_node: int
    grace_period_s: float = GRACE_PERIOD_S
    health_timeout_s: float = HEALTH_TIMEOUT_S
    paths: tuple[str, ...] = ()  # folders the processes read (model, trainer entry): mounts
    max_restarts: int = 0  # restarts per run (failed trainer jobs, or a server alone)
    hang_timeout_s: Optional[float] = None  # no trainer progress this long: a failure
    console: str = "auto"  # launcher.console: which processes' lines the console shows
    # the plan's node groups and how many last nodes are CPU-only (spec/cluster.py): schedulers
    # ask for each group's nodes as the runner's options for that group say
    node_groups: tuple[NodeGroup, ...] = ()
    cpu_nodes: int = 0
    folders: Optional[Folders] = None  # prepared on every node before anything starts
    flag_check: Optional[FlagCheck] = None  # the user's server flags, checked by the preflight
    asks: Mapping[str, EngineAsk] = field(default_factory=dict)  # engine -> its scheduling_spec's
    # a shell command run once the run has ended, where the launcher waits (node/exithook.py)
    post_exit_hook: Optional[str] = None
    processes: tuple[ProcessSpec, ...] = ()  # last in the JSON: the long part
    # written only when set (the plan's node groups with its CPU-only nodes; each other one)
    JSON_OPTIONAL: ClassVar = (
        ("node_groups", "cpu_nodes"),
        ("folders",),
        ("flag_check",),
        ("asks",),
        ("post_exit_hook",),
    )

    def cpu_only(self, node: int) -> bool:
        return node >= self.num_nodes - self.cpu_nodes

    def group_label(self, node: int) -> Optional[str]:
        """The label of the first node group holding `node` (None: none does)."""
        return next((g.label for g in self.node_groups if node in g.nodes), None)

    @property
    def nodes(self) -> list[int]:
        """The plan nodes that run a process, in order."""
        return sorted({p.node for p in self.processes})

    def on_node(self, node: Optional[int]) -> tuple[ProcessSpec, ...]:
        """The processes of `node` (None: all of them, every node being this machine)."""
        return tuple(p for p in self.processes if node is None or p.node == node)

    def nodes_needed(self) -> int:
        """Nodes the run needs: up to the highest node a process runs on or names."""
        used = [p.node for p in self.processes]
        used += [
            n
            for p in self.processes
            for text in (*p.argv, *p.env.values())
            for n in nodes_named(text)
        ]
        return max(used, default=0) + 1

    def node_ask(self, node: int) -> NodeAsk:
        """The CPUs, memory and images plan node `node`'s processes ask for (engines' asks per
        GPU times the process's GPUs; a process serving several engines asks the most of each)."""
        cpu = mem = 0
        images: list[str] = []
        for p in self.on_node(node):
            mine = [self.asks[e] for e in p.component.split(",") if e in self.asks]
            times = max(len(p.gpus), 1)
            cpu += times * max((a.cpu for a in mine), default=0)
            mem += times * max((a.mem_gib for a in mine), default=0)
            images += [a.image for a in mine if a.image and a.image not in images]
        return NodeAsk(cpu, mem, tuple(images))

    def has_trainers(self, node: Optional[int] = None) -> bool:
        return any(p.is_trainer for p in self.on_node(node))

    def to_dict(self, mask_secrets: bool = False) -> dict:
        """Schema 1 of the request, secrets masked when it is for printing."""
        out = {"schema": REQUEST_SCHEMA, **to_json(self)}
        masked(out["processes"], mask_secrets)
        return out

    def to_json(self, mask_secrets: bool = False) -> str:
        indent = 1 if len(self.processes) <= INDENT_UP_TO else None  # as the plan's
        return json.dumps(self.to_dict(mask_secrets), indent=indent)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LaunchRequest":
        if d.get("schema") != REQUEST_SCHEMA:
            raise LaunchError(
                f"launch request schema {d.get('schema')!r}: this launcher reads "
                f"{REQUEST_SCHEMA} (was the run started by another version?)"
            )
        return from_json(cls, d)


# ----------------------------------------------------------------------------- on a node
@dataclass(frozen=True)
class Materialized:
    """A process as exec'd on its node: hosts filled in, its GPUs named as the node names them."""

    spec: ProcessSpec
    argv: tuple[str, ...]
    env: dict[str, str]  # added to the inherited environment
    health_url: Optional[str]

    @property
    def name(self) -> str:
        return self.spec.name


def visible_gpus(environ: Mapping[str, str]) -> Optional[list[str]]:
    """The GPUs a node's CUDA_VISIBLE_DEVICES shows, as given (indices, `GPU-<uuid>`, MIG ids);
    None when it is unset (then position k is GPU k). Empty or -1: no GPU."""
    value = environ.get(ENV_GPUS)
    if value is None:
        return None
    ids = [v.strip() for v in value.split(",") if v.strip()]
    return [] if not ids or ids[0] == "-1" else ids


def gpu_ids(spec: ProcessSpec, visible: Optional[Sequence[str]]) -> str:
    """CUDA_VISIBLE_DEVICES for `spec`: the node's GPUs at the spec's positions."""
    if visible is None:
        return ",".join(map(str, spec.gpus))
    missing = [g for g in spec.gpus if g >= len(visible)]
    if missing:
        shown = ",".join(visible) if visible else "none"
        raise UserError(
            f"{spec.name} needs GPU {missing[0]} of node {spec.node}, but "
            f"{ENV_GPUS} there shows {len(visible)} GPU(s) ({shown}): plan GPU "
            f"indices are positions in the visible GPUs; show more GPUs or set "
            f"cluster.gpus_per_node={len(visible)}"
        )
    return ",".join(visible[g] for g in spec.gpus)


def materialize(
    spec: ProcessSpec,
    hosts: Sequence[str],
    visible: Optional[Sequence[str]],
    device: str,
    run_id: str,
) -> Materialized:
    """What runs for `spec` on its node (see module doc). On cpu every GPU is hidden."""
    env = {k: fill_hosts(v, hosts) for k, v in spec.env.items()}
    env[ENV_GPUS] = gpu_ids(spec, visible) if device == "cuda" else ""
    env[ENV_HOSTS] = ",".join(hosts)
    env[ENV_RUN_MARKER] = run_id
    url = fill_hosts(spec.health_url, hosts) if spec.health_url else None
    return Materialized(spec, tuple(fill_hosts(a, hosts) for a in spec.argv), env, url)
