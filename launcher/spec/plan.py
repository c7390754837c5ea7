"""The plan: everything the launcher decided, as pure data (JSON schema 1, docs/architecture.md
§6). The processes it holds and the environment they are told are spec/process.py's.

`plan` prints it, runners write it to the run folder and hand its path to every process
(`AREAL_LAUNCH_PLAN`); `Plan.from_dict` reads it back, so the launcher, the runtime API and
every runner share one reader. Built by `launcher.planning.build.build_plan`; nothing here does I/O.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from launcher.spec.alloc import ModelAllocation, parse_backend
from launcher.spec.cluster import ClusterSpec
from launcher.spec.codec import JsonRecord, json_key, to_json

# A process and its environment contract lived here before spec/process.py: a backend or a
# runner of one's own (an entry point) written then imports them from this module, and still
# can. Their one home is spec/process.py; the launcher's own modules import them from there.
from launcher.spec.process import (  # noqa: F401
    CONTRACT_PREFIX,
    DEFAULT_SERVED_MODEL,
    ENV_COMPONENT,
    ENV_COMPONENT_ADDRS,
    ENV_GPUS,
    ENV_HOSTS,
    ENV_PLAN,
    ENV_PROCESS,
    ENV_RESTART,
    ENV_RUN_DIR,
    ENV_RUN_MARKER,
    ENV_SERVED_MODEL,
    ENV_SERVER_ADDRS,
    ENV_SPMD_MODE,
    INDENT_UP_TO,
    LOOPBACK,
    MAX_ENV_ADDRS,
    ProcessSpec,
    bind_address,
    bind_placeholder,
    component_addrs_env,
    fill_hosts,
    host_placeholder,
    is_loopback,
    mask_env,
    masked,
    nodes_named,
)
from launcher.spec.registry import TRAIN, WORKER

SCHEMA = 1
WORKERS = ("env", "reward", "agent")  # RLinf's worker components, top-level keys of the config


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
