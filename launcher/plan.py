"""The plan: everything the launcher decided, as pure data (JSON schema 1, DESIGN §6).

`plan` prints it, runners write it to the run folder and hand its path to every process
(`AREAL_LAUNCH_PLAN`). Built by `launcher.build.build_plan`; nothing here does I/O.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from launcher.alloc import INFERENCE_BACKENDS, TRAINING_BACKENDS, ModelAllocation  # noqa: F401
from launcher.cluster import ClusterSpec
from launcher.config import ENGINE_NAMES as ENGINES  # noqa: F401 - engine order, re-exported

SCHEMA = 1


@dataclass(frozen=True)
class Rank:
    """One training rank: its GPU and its coordinates in the parallel grid."""

    rank: int
    gpu: int
    node: int
    local_gpu: int
    dp: int
    tp: int
    pp: int
    cp: int

    def to_dict(self) -> dict:
        return dict(rank=self.rank, gpu=self.gpu, node=self.node, local_gpu=self.local_gpu,
                    dp=self.dp, tp=self.tp, pp=self.pp, cp=self.cp)


@dataclass(frozen=True)
class Instance:
    """One inference server: a block of t*p GPUs on one node or on whole nodes."""

    index: int
    gpus: tuple[int, ...]
    nodes: tuple[int, ...]

    def to_dict(self) -> dict:
        return {"index": self.index, "gpus": list(self.gpus), "nodes": list(self.nodes)}


@dataclass(frozen=True)
class SyncPair:
    """Training rank `rank` sends weights to tp rank `tp` of rollout instance `instance`."""

    rank: int
    instance: int
    tp: int

    def to_dict(self) -> dict:
        return {"rank": self.rank, "instance": self.instance, "tp": self.tp}


@dataclass(frozen=True)
class WeightSync:
    src: str
    dst: str
    pairs: tuple[SyncPair, ...]

    def to_dict(self) -> dict:
        return {"from": self.src, "to": self.dst, "pairs": [p.to_dict() for p in self.pairs]}


@dataclass(frozen=True)
class ProcessSpec:
    """One process a runner starts: what to exec, where, with which added environment.

    `env` holds only what the launcher adds to the inherited environment. `gpus` are the
    node-local GPU indices it may use; `health_url` is polled for servers (None: no probe).
    """

    name: str
    component: str  # engine(s) it serves, comma-joined for shared trainer jobs ("actor,ref")
    role: str  # "server" or "trainer"
    node: int
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    gpus: tuple[int, ...] = ()
    ports: tuple[int, ...] = ()
    health_url: Optional[str] = None

    def to_dict(self) -> dict:
        return {"name": self.name, "component": self.component, "role": self.role,
                "node": self.node, "argv": list(self.argv), "env": dict(self.env),
                "gpus": list(self.gpus), "ports": list(self.ports),
                "health_url": self.health_url}


@dataclass(frozen=True)
class ComponentPlan:
    """One engine: its parsed allocation, where its GPUs are, and its ranks or instances."""

    name: str
    alloc: ModelAllocation
    inherited_from: Optional[str] = None
    gpus: tuple[int, ...] = ()
    ranks: tuple[Rank, ...] = ()
    instances: tuple[Instance, ...] = ()

    @property
    def backend(self) -> str:
        return self.alloc.backend

    @property
    def world_size(self) -> int:
        return self.alloc.world_size

    @property
    def is_inference(self) -> bool:
        return self.alloc.backend in INFERENCE_BACKENDS

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "backend": self.alloc.backend,
            "spec": str(self.alloc),
            "inherited_from": self.inherited_from,
            "world_size": self.alloc.world_size,
            "parallel": self.alloc.to_dict(),
            "gpus": list(self.gpus),
        }
        if self.is_inference:
            out["instances"] = [i.to_dict() for i in self.instances]
        else:
            out["ranks"] = [r.to_dict() for r in self.ranks]
        return out


@dataclass(frozen=True)
class Plan:
    cluster: ClusterSpec
    mode: str  # "collocated" | "disaggregated" | "hybrid"
    components: dict[str, ComponentPlan]
    weight_sync: tuple[WeightSync, ...] = ()
    processes: tuple[ProcessSpec, ...] = ()
    warnings: tuple[str, ...] = ()
    # run facts handed to entry points (model_path, recipe options, run names): added keys
    meta: dict = field(default_factory=dict)

    def to_dict(self, mask_secrets: bool = True) -> dict:
        procs = [p.to_dict() for p in self.processes]
        if mask_secrets:
            for p in procs:
                p["env"] = mask_env(p["env"])
        return {
            "schema": SCHEMA,
            "cluster": self.cluster.to_dict(),
            "mode": self.mode,
            "components": {name: c.to_dict() for name, c in self.components.items()},
            "weight_sync": [w.to_dict() for w in self.weight_sync],
            "processes": procs,
            "warnings": list(self.warnings),
            **self.meta,
        }

    def to_json(self, mask_secrets: bool = True, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(mask_secrets=mask_secrets), indent=indent)


_SECRET = re.compile(r"(_TOKEN|_KEY|_SECRET)$|PASSWORD", re.IGNORECASE)


def mask_env(env: dict[str, str]) -> dict[str, str]:
    """Hide secret values wherever a plan is printed (DESIGN §7)."""
    return {k: ("***" if _SECRET.search(k) else v) for k, v in env.items()}
