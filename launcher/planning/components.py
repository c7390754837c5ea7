"""Worker components: checked, typed, placed and planned (docs/architecture.md §12, §15).

The built-in engines (rollout, actor, critic, ref, teacher, inference) go through
launcher.planning.resolve; workers are plain processes, each a name the user declares under
`components.<name>` (env simulators, reward functions, agents). A worker sits on a GPU set
(`processes_per_gpu` on each GPU), on a process map (`0-3:0-7`, `0-1:0`), on a CPU-only
node group, or CPU-only on the first node (`processes` of them). Its plan entry is a
ComponentPlan like any other, with one instance per process, so placement, the GPU map, the
supervisor and the runtime read it by kind. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from launcher.config.schema import (
    ENGINE_KINDS,
    ComponentConfig,
    LaunchConfig,
    declared_kind,
    engine,
    typed,
)
from launcher.planning.forms import Placed
from launcher.spec import registry
from launcher.spec.alloc import ModelAllocation
from launcher.spec.builtins import ENGINES
from launcher.spec.cluster import ClusterSpec
from launcher.spec.entry import check_python
from launcher.spec.errors import ConfigError, PlacementError
from launcher.spec.plan import ComponentPlan, Runs

MAX_PROCESSES = 1 << 20  # per component: a typo of many digits is an error, not a fork bomb
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
    mem_gib: Optional[float] = None
    offload: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    python: Optional[str] = None  # its own interpreter (launcher.spec.entry)
    beside: Optional[str] = None  # a serving component: one process beside each instance


def workers(config: LaunchConfig) -> dict[str, Worker]:
    """The run's workers: `components.*` that are no serving or training engine, in the order
    written. A built-in engine's name is a worker's while that engine is off (a rollout run
    as a policy worker per process, no server)."""
    out: dict[str, Worker] = {}
    on = {n for n in ENGINES if engine(config, n).backend is not None}
    for name, raw in config.components.items():
        name = str(name)
        if declared_kind(raw) in ENGINE_KINDS:
            continue  # a serving or training component: an engine (launcher.planning.resolve)
        key = f"components.{name}"
        node = typed(key, ComponentConfig, raw, "a component's keys")
        out[name] = _worker(name, node, key, on)
    return out


def _worker(name: str, node: ComponentConfig, key: str, engines_on: set[str]) -> Worker:
    if name in engines_on:
        raise ConfigError(
            f"{key}: {name} is a built-in engine and it is on; set {name}.* instead, turn it "
            f"off ({name}.backend=null), or declare the component under another name"
        )
    if not _NAME.match(name):
        raise ConfigError(
            f"{key}: a component name is lowercase letters, digits and _, "
            "starting with a letter (at most 32), e.g. components.env_sim"
        )
    if node.kind != registry.WORKER:
        raise ConfigError(
            f"{key}.kind={node.kind!r}: choose worker (plain processes), serve "
            "(inference servers) or train (torchrun ranks)"
        )
    backend = str(node.backend)
    if backend not in registry.backend_names(registry.WORKER):
        raise ConfigError(
            f"{key}.backend={backend!r}: choose a worker backend "
            f"({', '.join(registry.backend_names(registry.WORKER))})"
        )
    entry = str(node.entry or "").strip()
    health = node.health_path
    if not entry or entry == "-m":
        raise ConfigError(
            f"{key}.entry is not set: give the script or module its processes "
            f"run (+{key}.entry=path/to/worker.py or '+{key}.entry=-m pkg.mod')"
        )
    for count_key in ("processes", "processes_per_gpu"):
        n = getattr(node, count_key)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PROCESSES:
            raise ConfigError(f"{key}.{count_key}={n!r}: choose 1 to {MAX_PROCESSES}")
    mem = node.mem_gib
    if mem is not None and (isinstance(mem, bool) or not 0 <= mem <= 1 << 20):
        raise ConfigError(f"{key}.mem_gib={mem!r}: GiB per process, from 0 to {1 << 20}")
    if health is not None and (not str(health).strip() or any(c.isspace() for c in str(health))):
        raise ConfigError(
            f"{key}.health_path={health!r}: an HTTP path such as /health (or null: no probe)"
        )
    check_python(f"{key}.python", node.python)
    if node.beside is not None and not _NAME.match(str(node.beside)):
        raise ConfigError(f"{key}.beside={node.beside!r}: the name of a serving component")
    return Worker(
        beside=None if node.beside is None else str(node.beside),
        name=name,
        backend=backend,
        entry=entry,
        python=node.python,
        args=tuple(str(a) for a in node.args),
        env={str(k): str(v) for k, v in dict(node.env).items()},
        processes=int(node.processes),
        processes_per_gpu=int(node.processes_per_gpu),
        health_path=None if health is None else str(health),
        mem_gib=None if mem is None else float(mem),
        offload=bool(node.offload),
        options=dict(node.options),
    )


def split_placement(
    placement: Mapping[str, Any], names: Mapping[str, Worker]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """cluster.component_placement -> (what the engines' placement reads, worker -> value).

    A comma key may join workers and engines (`actor,env_sim: all`): each gets the same value.
    """
    engines: dict[str, Any] = {}
    placed: dict[str, Any] = {}
    for key, value in placement.items():
        parts = [p.strip() for p in str(key).split(",")]
        mine = [p for p in parts if p in names]
        if value is not None:
            for name in mine:
                if name in placed:
                    raise PlacementError(
                        f"cluster.component_placement: {name} is placed twice "
                        f"(place each component once)"
                    )
                placed[name] = value
        rest = [p for p in parts if p not in names]
        if rest:
            engines[",".join(rest)] = value
    return engines, placed


def placed_names(placement: Mapping[str, Any]) -> frozenset[str]:
    """Every name a placement key holds (`actor,rollout` holds two)."""
    return frozenset(
        p.strip() for k, v in placement.items() if v is not None for p in str(k).split(",")
    )


def _key(name: str) -> str:
    return f"cluster.component_placement.{name}"


def worker_plan(
    worker: Worker,
    placed: Optional[Placed],
    cluster: ClusterSpec,
    served: Mapping[str, ComponentPlan] = {},
) -> ComponentPlan:
    """The worker's plan entry: one instance per process, on its GPUs, its process map, its
    CPU-only nodes, beside each instance of a serving component, or CPU-only on node 0."""
    key = _key(worker.name)
    where = f"components.{worker.name}"
    if worker.beside is not None:
        instances = _beside(worker, placed, served)
        gpus: tuple[int, ...] = ()
    elif placed is None:
        if worker.processes_per_gpu != 1:
            raise ConfigError(
                f"{where}.processes_per_gpu={worker.processes_per_gpu} is for a "
                f"worker placed on GPUs; place it ({key}=0-1) or set "
                f"{where}.processes"
            )
        instances = Runs([(0, worker.processes, (), 0)])
        gpus = ()
    else:
        if worker.processes != 1:
            raise ConfigError(
                f"{where}.processes={worker.processes} is for a worker without "
                f"a placement; on {key}={placed.text} "
                + (
                    "write the count in the process map (GPUS:0-N)"
                    if placed.mapped
                    else f"set {where}.processes_per_gpu"
                )
            )
        per = worker.processes_per_gpu
        if placed.mapped and per != 1:
            raise ConfigError(
                f"{where}.processes_per_gpu={per} and the process map {key}="
                f"{placed.text} both say how many: keep the map"
            )
        if placed.processes * per > MAX_PROCESSES:
            raise PlacementError(
                f"{key}={placed.text} with {where}.processes_per_gpu={per} is "
                f"{placed.processes * per} processes; at most "
                f"{MAX_PROCESSES}"
            )
        gpus = placed.gpus
        runs, first = [], 0
        for g, node, count in placed.runs:
            runs.append((first, count * per, g, node))
            first += count * per
        instances = Runs(runs)
    alloc = ModelAllocation(worker.backend, dp=len(instances))
    return ComponentPlan(name=worker.name, alloc=alloc, gpus=gpus, instances=instances)


def _beside(worker: Worker, placed: Optional[Placed], served: Mapping[str, ComponentPlan]) -> Runs:
    """One CPU-only process on the first node of each instance of `worker.beside`."""
    where = f"components.{worker.name}.beside={worker.beside}"
    target = served.get(str(worker.beside))
    if target is None or target.kind != registry.SERVE:
        names = ", ".join(n for n, c in served.items() if c.kind == registry.SERVE) or "none"
        raise ConfigError(f"{where}: not a serving component of this run (serving: {names})")
    if placed is not None:
        raise ConfigError(f"{where} and {_key(worker.name)}: say where once (keep one of them)")
    return Runs([(i, 1, (), inst.nodes[0]) for i, inst in enumerate(target.instances)])
