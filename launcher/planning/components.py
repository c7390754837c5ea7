"""Declared components (`components.<name>`): checked, typed, placed and planned
(docs/architecture.md §12).

The built-in engines (rollout, actor, critic, ref, teacher) go through launcher.planning.resolve;
any other name the user declares is a component of a kind, today `worker`: plain processes on a
GPU set (`cluster.component_placement.<name>`, `processes_per_gpu` on each GPU) or CPU-only
(`processes` of them on the first node). Its plan entry is a ComponentPlan like any other, with
one instance per process, so placement, the GPU map, the supervisor and the runtime read it by
kind. Pure: no I/O.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from launcher.config.schema import ComponentConfig, typed
from launcher.spec import registry
from launcher.spec.alloc import ModelAllocation
from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import ConfigError, PlacementError
from launcher.spec.gpuset import parse_gpu_set
from launcher.spec.plan import ENGINES, ComponentPlan, Instance

MAX_PROCESSES = 4096  # per component: a typo of many digits is an error, not a fork bomb
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}$")


@dataclass(frozen=True)
class Worker:
    """A declared worker component, typed and checked."""

    name: str
    backend: str
    entry: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    processes: int = 1
    processes_per_gpu: int = 1
    health_path: Optional[str] = None


def workers(declared: Mapping[str, Any]) -> dict[str, Worker]:
    """`components.*` as written -> typed workers, in the order written."""
    return {str(name): _worker(str(name), typed(f"components.{name}", ComponentConfig, node,
                                                "a component's keys"))
            for name, node in declared.items()}


def _worker(name: str, node: ComponentConfig) -> Worker:
    key = f"components.{name}"
    if name in ENGINES:
        raise ConfigError(f"{key}: {name} is a built-in engine; set {name}.* instead, or "
                          f"declare the component under another name")
    if not _NAME.match(name):
        raise ConfigError(f"{key}: a component name is lowercase letters, digits and _, "
                          "starting with a letter (at most 32), e.g. components.env_sim")
    if node.kind != registry.WORKER:
        raise ConfigError(f"{key}.kind={node.kind!r}: a declared component is a worker "
                          f"({key}.kind=worker); serving and training components are the "
                          "built-in rollout and actor/critic/ref/teacher")
    backend = str(node.backend)
    if backend not in registry.backend_names(registry.WORKER):
        raise ConfigError(f"{key}.backend={backend!r}: choose a worker backend "
                          f"({', '.join(registry.backend_names(registry.WORKER))})")
    entry = str(node.entry or "").strip()
    if not entry or entry == "-m":
        raise ConfigError(f"{key}.entry is not set: give the script or module its processes "
                          f"run (+{key}.entry=path/to/worker.py or '+{key}.entry=-m pkg.mod')")
    for field in ("processes", "processes_per_gpu"):
        n = getattr(node, field)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PROCESSES:
            raise ConfigError(f"{key}.{field}={n!r}: choose 1 to {MAX_PROCESSES}")
    health = node.health_path
    if health is not None and (not str(health).strip() or any(c.isspace() for c in str(health))):
        raise ConfigError(f"{key}.health_path={health!r}: an HTTP path such as /health "
                          "(or null: no probe)")
    return Worker(name=name, backend=backend, entry=entry,
                  args=tuple(str(a) for a in node.args),
                  env={str(k): str(v) for k, v in dict(node.env).items()},
                  processes=int(node.processes), processes_per_gpu=int(node.processes_per_gpu),
                  health_path=None if health is None else str(health))


def split_placement(placement: Mapping[str, Any], names: Mapping[str, Worker]
                    ) -> tuple[dict[str, Any], dict[str, str]]:
    """cluster.component_placement -> (what the engines' placement reads, worker -> GPU set).

    A comma key may join workers and engines (`actor,env_sim: all`): each gets the same set.
    """
    engines: dict[str, Any] = {}
    placed: dict[str, str] = {}
    for key, value in placement.items():
        parts = [p.strip() for p in str(key).split(",")]
        mine = [p for p in parts if p in names]
        if value is not None:
            for name in mine:
                if name in placed:
                    raise PlacementError(f"cluster.component_placement: {name} is placed twice "
                                         f"(place each component once)")
                placed[name] = str(value)
        rest = [p for p in parts if p not in names]
        if rest:
            engines[",".join(rest)] = value
    return engines, placed


def slots_needed(placed: Mapping[str, str]) -> int:
    """The GPU slots a CPU run needs for the workers' sets: the highest index + 1 (`all`
    needs none of its own: it is whatever the engines need)."""
    unbounded = ClusterSpec(1, 1 << 16, "cpu")  # more virtual slots than any machine runs
    return max((max(parse_gpu_set(text, unbounded, key=_key(name))) + 1
                for name, text in placed.items() if text.strip().lower() != "all"), default=0)


def _key(name: str) -> str:
    return f"cluster.component_placement.{name}"


def worker_plan(worker: Worker, text: Optional[str], cluster: ClusterSpec) -> ComponentPlan:
    """The worker's plan entry: one instance per process, on its GPUs or CPU-only (node 0)."""
    key = _key(worker.name)
    unread = ("processes_per_gpu", worker.processes_per_gpu) if text is None else \
        ("processes", worker.processes)
    if unread[1] != 1:  # the other one counts: say so rather than ignore what was set
        raise ConfigError(f"components.{worker.name}.{unread[0]}={unread[1]} is for a worker "
                          f"{'placed on GPUs' if text is None else 'without a placement'}; "
                          + (f"place it ({key}=0-1) or set components.{worker.name}.processes"
                             if text is None else
                             f"on {key}={text} set components.{worker.name}.processes_per_gpu"))
    if text is None:
        count = worker.processes
        instances = tuple(Instance(i, (), (0,)) for i in range(count))
        gpus: tuple[int, ...] = ()
    else:
        gpus = parse_gpu_set(text, cluster, key=key)
        per = worker.processes_per_gpu
        if len(gpus) * per > MAX_PROCESSES:
            raise PlacementError(f"{key}={text} with components.{worker.name}.processes_per_gpu="
                                 f"{per} is {len(gpus) * per} processes; at most "
                                 f"{MAX_PROCESSES}")
        instances = tuple(Instance(i * per + j, (g,), (cluster.node_of(g),))
                          for i, g in enumerate(gpus) for j in range(per))
    alloc = ModelAllocation(worker.backend, dp=len(instances))
    return ComponentPlan(name=worker.name, alloc=alloc, gpus=gpus, instances=instances)
