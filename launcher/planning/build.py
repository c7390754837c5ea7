"""From the typed config to a Plan: resolve, size the cluster, place, map ranks (pure).

The only outside fact it takes is `local_gpus` (how many GPUs this machine has: a number, or a
callable the CLI passes so that `nvidia-smi` runs only when the answer matters), so the same
config plans the same way everywhere and tests need no GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from launcher.config.schema import ClusterConfig, LaunchConfig
from launcher.planning import resolve
from launcher.planning.components import Worker, split_placement, worker_plan, workers
from launcher.planning.components import slots_needed as worker_slots
from launcher.planning.placement import place, slots_needed
from launcher.planning.ranks import component_plan, weight_sync
from launcher.planning.sizing import size
from launcher.spec.alloc import ModelAllocation
from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import ConfigError
from launcher.spec.gpuset import parse_gpu_set
from launcher.spec.limits import MAX_GPUS, MAX_GPUS_PER_NODE, MAX_NODES
from launcher.spec.plan import ENGINES, INHERITING, Plan, WeightSync

DEFAULT_GPUS_PER_NODE = 8  # planning for cuda where no GPU is visible (a laptop)

GPUCount = Union[int, Callable[[], int]]


@dataclass(frozen=True)
class Planned:
    """A plan (without processes yet) and the typed engines it was made from."""

    plan: Plan
    engines: dict[str, resolve.Engine]
    spec: LaunchConfig  # the config, with what sizing turned on (releases) applied
    notes: tuple[str, ...] = field(default_factory=tuple)  # what the launcher chose
    workers: dict[str, Worker] = field(default_factory=dict)  # the declared worker components


def build_plan(spec: LaunchConfig, local_gpus: GPUCount = 0,
               explicit: frozenset[str] = frozenset(), more_nodes: bool = True) -> Planned:
    """Everything decided before anything starts: engines, GPUs, ranks, weight-sync pairs.

    explicit: the keys the user set on the command line. more_nodes: whether the runner can
    give the plan more nodes (Slurm, Ray) or not (this machine): errors advise accordingly.
    """
    warnings: list[str] = []
    texts, placement = resolve.chosen_backends(spec, explicit, warnings)
    declared = workers(spec.components)
    placement, worker_sets = split_placement(placement, declared)
    count = local_gpus if callable(local_gpus) else (lambda: local_gpus)
    device = _device(spec.cluster, count)
    cluster = None
    if device == "cuda":
        cluster = cuda_cluster(spec.cluster, count, warnings)
    total = cluster.total_gpus if cluster else 0
    sizing = size(texts, placement, device, total,
                  lambda text: len(parse_gpu_set(text, cluster)) if cluster else 1)
    texts = sizing.texts
    placement = {**placement, **sizing.placement}
    spec = resolve.with_offload(spec, sizing.release)
    allocs, inherited = _parse(texts)
    if cluster is None:
        cluster = cpu_cluster(spec.cluster, lambda: max(slots_needed(allocs, placement),
                                                        worker_slots(worker_sets)))
    engines = resolve.engines(spec, allocs, inherited, model_path(spec), cluster.device)
    placed = place(allocs, cluster, placement, {n: e.offload for n, e in engines.items()},
                   more_nodes=more_nodes)
    warnings += placed.warnings
    components = {name: component_plan(name, a, placed.gpus[name], cluster, inherited.get(name))
                  for name, a in allocs.items()}
    components.update({name: worker_plan(w, worker_sets.get(name), cluster)
                       for name, w in declared.items()})
    syncs: tuple[WeightSync, ...] = ()
    if "actor" in components and "rollout" in components:
        syncs = (weight_sync(components["actor"], components["rollout"], cluster),)
    meta = {**plan_meta(spec),
            "engine_options": {n: engine_options(e) for n, e in engines.items()}}
    plan = Plan(cluster=cluster, mode=placed.mode, components=components, weight_sync=syncs,
                warnings=tuple(warnings), meta=meta)
    return Planned(plan, engines, spec, (sizing.note,) if sizing.note else (), declared)


def _parse(texts: dict[str, Optional[str]]
           ) -> tuple[dict[str, ModelAllocation], dict[str, str]]:
    """Parsed allocations of the active engines; "" means the actor's backend."""
    allocs: dict[str, ModelAllocation] = {}
    inherited: dict[str, str] = {}
    for name in ENGINES:
        text = texts[name]
        if text is None:
            continue
        if name in INHERITING and not str(text).strip():
            if texts.get("actor") is None:
                raise ConfigError(f"{name}.backend is empty, which means the actor's backend, "
                                  f"but actor is off: set {name}.backend=fsdp:d2 (for example) "
                                  "or actor.backend")
            text, inherited[name] = texts["actor"], "actor"
        allocs[name] = resolve.parse_for(name, str(text))
    if not allocs:
        raise ConfigError("every engine is off: set rollout.backend and/or actor.backend (e.g. "
                          "rollout.backend=vllm:d1 actor.backend=fsdp:d2)")
    return allocs, inherited


def _device(cluster: ClusterConfig, count: Callable[[], int]) -> str:
    device = str(cluster.device)
    if device not in ("auto", "cuda", "cpu"):
        raise ConfigError(f"cluster.device={device!r}: choose auto, cuda or cpu")
    if device == "auto":
        return "cuda" if count() > 0 else "cpu"
    return device


def _nodes(cluster: ClusterConfig) -> int:
    nodes = 1 if cluster.num_nodes is None else cluster.num_nodes
    if not 1 <= nodes <= MAX_NODES:
        raise ConfigError(f"cluster.num_nodes={cluster.num_nodes}: choose 1 to {MAX_NODES}")
    gpn = cluster.gpus_per_node
    if gpn is not None and not 1 <= gpn <= MAX_GPUS_PER_NODE:
        raise ConfigError(f"cluster.gpus_per_node={gpn}: choose 1 to {MAX_GPUS_PER_NODE}")
    if gpn is not None and nodes * gpn > MAX_GPUS:
        raise ConfigError(f"cluster.num_nodes={nodes} x cluster.gpus_per_node={gpn} is more "
                          f"than the {MAX_GPUS} GPUs areal-launch plans for")
    return nodes


def cuda_cluster(cluster: ClusterConfig, count: Callable[[], int],
                 warnings: list[str]) -> ClusterSpec:
    """cluster.* -> ClusterSpec for GPUs: the machine's count unless given."""
    nodes = _nodes(cluster)
    per_node = cluster.gpus_per_node
    if per_node is None:
        per_node = count()
        if per_node <= 0:
            per_node = DEFAULT_GPUS_PER_NODE
            warnings.append(f"no GPU visible here: planning for {per_node} GPUs per node "
                            f"(set cluster.gpus_per_node)")
        per_node = min(per_node, MAX_GPUS_PER_NODE)
    if nodes * per_node > MAX_GPUS:
        raise ConfigError(f"cluster.num_nodes={nodes} x {per_node} GPUs is more than the "
                          f"{MAX_GPUS} GPUs areal-launch plans for")
    return ClusterSpec(num_nodes=nodes, gpus_per_node=per_node, device="cuda")


def cpu_cluster(cluster: ClusterConfig, needed: Callable[[], int]) -> ClusterSpec:
    """cluster.* -> ClusterSpec on cpu: GPU slots are virtual, by default what the plan needs."""
    nodes = _nodes(cluster)
    per_node = cluster.gpus_per_node
    if per_node is None:
        per_node = -(-needed() // nodes)
    return ClusterSpec(num_nodes=nodes, gpus_per_node=per_node, device="cpu")


def model_path(spec: LaunchConfig) -> str:
    """rollout.model_path, else model_path, with `~` expanded (no other environment read)."""
    import os.path

    return os.path.expanduser(str(spec.rollout.model_path or spec.model_path))


def plan_meta(spec: LaunchConfig) -> dict:
    """Run facts entry points read from the plan: names, model, recipe options, and how long
    the launcher waits for servers (trainers wait as long)."""
    import dataclasses

    recipe = spec.recipe
    if dataclasses.is_dataclass(recipe) and not isinstance(recipe, type):
        recipe = dataclasses.asdict(recipe)
    recipe = dict(recipe or {})
    _finite(recipe, "recipe")
    return {
        "experiment_name": spec.experiment_name,
        "trial_name": spec.trial_name,
        "model_path": model_path(spec),
        "health_timeout_s": health_timeout_s(spec),
        "recipe": recipe,
    }


def _finite(value: object, key: str) -> None:
    """ConfigError for a NaN or infinite number (`recipe.lr=nan`): the plan is JSON, which has
    neither, and no entry point trains with one."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}={value}: not a finite number; give a value such as 1e-6")
    items = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, (list, tuple)) else ()
    for k, v in items:
        _finite(v, f"{key}.{k}" if isinstance(value, dict) else f"{key}[{k}]")


def health_timeout_s(spec: LaunchConfig) -> float:
    """launcher.health_timeout_s, else rollout.health_timeout_s."""
    return float(spec.launcher.health_timeout_s or spec.rollout.health_timeout_s)


def engine_options(engine: resolve.Engine) -> dict:
    """One engine's options for its entry point: its backend's sub-key, its offload, and for
    trainers how they train (dtype, gradient_checkpointing, max_tokens_per_mb)."""
    import dataclasses

    offload = engine.offload if engine.offload_parts is None else \
        dataclasses.asdict(engine.offload_parts)
    out = {"options": dataclasses.asdict(engine.options), "offload": offload}
    if engine.training is not None:
        out["training"] = dataclasses.asdict(engine.training)
    return out


def explicit_keys(overrides: list[str]) -> frozenset[str]:
    """Keys the user set on the command line (`rollout.backend=...`, `rollout=sglang`)."""
    keys = set()
    for o in overrides:
        key = o.lstrip("+~").partition("=")[0].strip()
        keys.add(key)
        if "." not in key:
            keys.add(f"{key}.backend")  # a group choice sets the backend too
    return frozenset(keys)
