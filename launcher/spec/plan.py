"""The plan: everything the launcher decided, as pure data (JSON schema 1, docs/architecture.md
§6), and the
environment contract every started process is told (docs/architecture.md §7).

`plan` prints it, runners write it to the run folder and hand its path to every process
(`AREAL_LAUNCH_PLAN`); `Plan.from_dict` reads it back, so the launcher, the runtime API and
every runner share one reader. Built by `launcher.planning.build.build_plan`; nothing here does I/O.
"""

from __future__ import annotations

import bisect
import ipaddress
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from launcher.spec.alloc import ModelAllocation, parse_backend
from launcher.spec.cluster import ClusterSpec
from launcher.spec.codec import JsonRecord, json_key, to_json
from launcher.spec.registry import TRAIN, WORKER

SCHEMA = 1
WORKERS = ("env", "reward", "agent")  # RLinf's worker components, top-level keys of the config

# ----------------------------------------------------------------------------- environment
# What a started process is told (docs/architecture.md §7). Every reader and writer imports these
# names.
ENV_PLAN = "AREAL_LAUNCH_PLAN"  # path of the plan JSON
ENV_RUN_DIR = "AREAL_RUN_DIR"  # the run folder
ENV_COMPONENT = "AREAL_COMPONENT"  # the engine(s) a process serves: "actor" or "actor,ref"
ENV_SERVER_ADDRS = "AREAL_LLM_SERVER_ADDRS"  # host:port,... of the rollout servers (when short)
ENV_COMPONENT_ADDRS = "AREAL_{NAME}_ADDRS"  # host:port,... of a worker component with a port
ENV_HOSTS = "AREAL_HOSTS"  # every plan node's address, in order: fills the plan's placeholders
MAX_ENV_ADDRS = 32 * 1024  # longer address lists stay in the plan (Linux caps a variable at 128K)
ENV_SERVED_MODEL = "AREAL_SERVED_MODEL_NAME"  # the model name the servers answer to
ENV_SPMD_MODE = "AREAL_SPMD_MODE"  # "1": AReaL's trainer was started by a launcher (torchrun)
ENV_RUN_MARKER = "AREAL_LAUNCH_RUN"  # the run id, in every process of a run
ENV_RESTART = "AREAL_RESTART"  # how many times this process's job was restarted (0 first)
ENV_PROCESS = "AREAL_LAUNCH_PROCESS"  # the process's name in the plan: what to stop of it
ENV_GPUS = "CUDA_VISIBLE_DEVICES"  # set by the node's supervisor from the process's GPUs
CONTRACT_PREFIX = "AREAL_"  # the launcher's own variables: the user's env never overrides them
DEFAULT_SERVED_MODEL = "policy"  # stable, so trainers can name the model in requests

# Hosts are not known when the plan is made (Slurm and Ray pick the nodes): backends write a
# placeholder for node k and the node's supervisor fills it in (launcher.spec.request.materialize).
# A server binds its node's address: loopback stays loopback (a local run exposes nothing),
# a real node's address becomes 0.0.0.0, so others reach it whatever the name resolves to.
_PLACEHOLDER = re.compile(r"@@AREAL_(NODE|BIND)_(\d+)@@")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def component_addrs_env(name: str) -> str:
    """The variable that holds where component `name`'s processes answer (AREAL_REWARD_ADDRS)."""
    return ENV_COMPONENT_ADDRS.replace("{NAME}", name.upper())


def host_placeholder(node: int) -> str:
    """The address of plan node `node`, filled in on the node by its supervisor."""
    return f"@@AREAL_NODE_{int(node)}@@"


def bind_placeholder(node: int) -> str:
    """The address a server on plan node `node` listens on (see bind_address)."""
    return f"@@AREAL_BIND_{int(node)}@@"


def bind_address(host: str) -> str:
    return host if is_loopback(host) else "0.0.0.0"


def is_loopback(host: str) -> bool:
    """localhost, ::1, or any of 127.0.0.0/8 (several nodes on one machine use 127.0.0.2, ..)."""
    try:
        return host in LOOPBACK or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def fill_hosts(text: str, hosts: Sequence[str]) -> str:
    """`text` with every placeholder replaced by its node's address (or bind address)."""
    if "@@" not in text:
        return text

    def one(m: "re.Match[str]") -> str:
        host = hosts[int(m.group(2))]
        return host if m.group(1) == "NODE" else bind_address(host)

    return _PLACEHOLDER.sub(one, text)


def nodes_named(text: str) -> list[int]:
    """The plan nodes whose placeholders appear in `text`."""
    return [int(m.group(2)) for m in _PLACEHOLDER.finditer(text)]


_SECRET = re.compile(r"(_TOKEN|_KEY|_SECRET)$|PASSWORD", re.IGNORECASE)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """Hide secret values wherever a plan or request is printed (docs/architecture.md §7)."""
    return {k: ("***" if _SECRET.search(k) else v) for k, v in env.items()}


# ----------------------------------------------------------------------------- the schema
@dataclass(frozen=True)
class Rank(JsonRecord):
    """One training rank: its GPU and its coordinates in the parallel grid."""

    rank: int
    gpu: int
    node: int
    local_gpu: int
    dp: int
    tp: int
    pp: int
    cp: int


@dataclass(frozen=True)
class Instance(JsonRecord):
    """One server (a block of t*p GPUs on one node or on whole nodes), or one worker process
    (its GPU, or none: CPU-only)."""

    index: int
    gpus: tuple[int, ...]
    nodes: tuple[int, ...]


@dataclass(frozen=True)
class Run(JsonRecord):
    """`count` worker processes from index `first` on, on the same GPUs of one node."""

    first: int
    count: int
    gpus: tuple[int, ...]
    node: int


class Runs(Sequence[Instance]):
    """A worker component's processes as runs of `count` on the same GPUs and node (first,
    count, gpus, node): hundreds of CPU agents a node plan and print as one run a node, and
    read as Instances one by one (len, index and iteration as a tuple's)."""

    def __init__(self, runs: Sequence[tuple[int, int, tuple[int, ...], int]]) -> None:
        self.runs = tuple(runs)
        self._starts = [r[0] for r in self.runs]
        self._len = sum(r[1] for r in self.runs)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Any:
        for first, count, gpus, node in self.runs:
            for j in range(count):
                yield Instance(first + j, gpus, (node,))

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self)[i]
        i = i + self._len if i < 0 else i
        if not 0 <= i < self._len:
            raise IndexError(i)
        k = bisect.bisect_right(self._starts, i) - 1
        first, _, gpus, node = self.runs[k]
        return Instance(i, gpus, (node,))

    def __eq__(self, other: object) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.runs)

    def to_list(self) -> list[dict]:
        return [Run(*r).to_dict() for r in self.runs]

    @classmethod
    def from_list(cls, items: Sequence[Mapping[str, Any]]) -> "Runs":
        runs = (Run.from_dict(r) for r in items)
        return cls([(r.first, r.count, r.gpus, r.node) for r in runs])


@dataclass(frozen=True)
class SyncPair(JsonRecord):
    """Training rank `rank` sends weights to tp rank `tp` of rollout instance `instance`."""

    rank: int
    instance: int
    tp: int


@dataclass(frozen=True)
class WeightSync(JsonRecord):
    """Training component `src` pushes its weights to serving component `dst`, pair by pair."""

    src: str = field(metadata=json_key("from"))
    dst: str = field(metadata=json_key("to"))
    pairs: tuple[SyncPair, ...]


@dataclass(frozen=True)
class ProcessSpec(JsonRecord):
    """One process a runner starts: what to exec, on which plan node, with what added env.

    `env` holds only what the launcher adds to the inherited environment. `gpus` are the
    node-local GPU indices (positions in the node's visible GPUs) it may use: the node's
    supervisor turns them into CUDA_VISIBLE_DEVICES. Hosts in argv and env are placeholders
    (`host_placeholder`). `health_url` is polled for servers (None: no probe).
    """

    name: str
    component: str  # engine(s) it serves, comma-joined for shared trainer jobs ("actor,ref")
    role: str  # "server", "trainer" or "worker"
    node: int
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    gpus: tuple[int, ...] = ()
    ports: tuple[int, ...] = ()
    health_url: Optional[str] = None

    @property
    def is_server(self) -> bool:
        return self.role == "server"

    @property
    def is_trainer(self) -> bool:
        """Trainers finish the run; servers and workers serve it (and restart alone)."""
        return self.role == "trainer"


@dataclass(frozen=True)
class ComponentPlan:
    """One engine: its parsed allocation, where its GPUs are, and its ranks or instances."""

    name: str
    alloc: ModelAllocation
    inherited_from: Optional[str] = None
    gpus: tuple[int, ...] = ()
    ranks: tuple[Rank, ...] = ()
    instances: Sequence[Instance] = ()  # a worker's: Runs

    @property
    def backend(self) -> str:
        return self.alloc.backend

    @property
    def world_size(self) -> int:
        return self.alloc.world_size

    @property
    def kind(self) -> str:
        """serve (instances), train (ranks) or worker (processes, as instances)."""
        return self.alloc.kind

    @property
    def is_inference(self) -> bool:
        return self.alloc.is_inference

    @property
    def is_worker(self) -> bool:
        return self.kind == WORKER

    def to_dict(self) -> dict:
        """A view, not its fields: the allocation as its text and sizes, and the ranks, the
        instances or a worker's runs, as its kind has them (docs/architecture.md §6)."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "backend": self.alloc.backend,
            "spec": str(self.alloc),
            "inherited_from": self.inherited_from,
            "world_size": self.alloc.world_size,
            "parallel": self.alloc.to_dict(),
            "gpus": list(self.gpus),
        }
        if isinstance(self.instances, Runs):
            out["runs"] = self.instances.to_list()
        elif self.kind != TRAIN:
            out["instances"] = to_json(self.instances)
        else:
            out["ranks"] = to_json(self.ranks)
        return out

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any]) -> "ComponentPlan":
        return cls(
            name=name,
            alloc=parse_backend(str(d["spec"])),
            inherited_from=d.get("inherited_from"),
            gpus=tuple(d.get("gpus", ())),
            ranks=tuple(Rank.from_dict(r) for r in d.get("ranks", ())),
            instances=Runs.from_list(d["runs"])
            if "runs" in d
            else tuple(Instance.from_dict(i) for i in d.get("instances", ())),
        )


def masked(processes: list[dict], mask_secrets: bool) -> list[dict]:
    """Processes as JSON, their secrets masked (in place) when it is for printing."""
    if mask_secrets:
        for p in processes:
            p["env"] = mask_env(p["env"])
    return processes


INDENT_UP_TO = 256  # processes
_KNOWN_KEYS = ("schema", "cluster", "mode", "components", "weight_sync", "processes", "warnings")


def plan_meta(d: Mapping[str, Any]) -> dict:
    """The run facts of a plan dict (every key but the structure's): `Plan.meta`, and what the
    runtime API reads from a dict that holds run facts only (a recipe's unit test)."""
    return {k: v for k, v in d.items() if k not in _KNOWN_KEYS}


@dataclass(frozen=True)
class Plan:
    cluster: ClusterSpec
    mode: str  # "collocated" | "disaggregated" | "hybrid"
    components: dict[str, ComponentPlan]
    weight_sync: tuple[WeightSync, ...] = ()
    processes: tuple[ProcessSpec, ...] = ()
    warnings: tuple[str, ...] = ()
    # run facts handed to entry points (model_path, recipe options, run names, engine options,
    # memory): added keys at the top level of the JSON
    meta: dict = field(default_factory=dict)

    def to_dict(self, mask_secrets: bool = True) -> dict:
        """Schema 1: the plan's own keys, then its run facts (`meta`) beside them."""
        return {
            "schema": SCHEMA,
            "cluster": self.cluster.to_dict(),
            "mode": self.mode,
            "components": {name: c.to_dict() for name, c in self.components.items()},
            "weight_sync": to_json(self.weight_sync),
            "processes": masked(to_json(self.processes), mask_secrets),
            "warnings": list(self.warnings),
            **self.meta,
        }

    def to_json(self, mask_secrets: bool = True) -> str:
        """Indented for people while the plan is small; compact for big ones (indenting a
        thousand-node plan takes seven times as long as the rest of printing it)."""
        indent = 2 if len(self.processes) <= INDENT_UP_TO else None
        return json.dumps(self.to_dict(mask_secrets=mask_secrets), indent=indent)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Plan":
        """The plan a `to_dict` wrote (the launcher's own JSON; not for untrusted input)."""
        if d.get("schema") != SCHEMA:
            raise ValueError(f"plan schema {d.get('schema')!r}: this launcher reads {SCHEMA}")
        return cls(
            cluster=ClusterSpec.from_dict(d["cluster"]),
            mode=str(d["mode"]),
            components={n: ComponentPlan.from_dict(n, comp) for n, comp in d["components"].items()},
            weight_sync=tuple(WeightSync.from_dict(w) for w in d.get("weight_sync", ())),
            processes=tuple(ProcessSpec.from_dict(p) for p in d.get("processes", ())),
            warnings=tuple(d.get("warnings", ())),
            meta=plan_meta(d),
        )
