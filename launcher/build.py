"""From a composed config to a Plan: resolve, size the cluster, place, map ranks (pure).

The only outside fact it takes is `local_gpus` (how many GPUs this machine has: a number, or a
callable the CLI passes so that `nvidia-smi` runs only when the answer matters), so the same
config plans the same way everywhere and tests need no GPU.
"""
from __future__ import annotations

from typing import Any, Callable, Union

from launcher.cluster import ClusterSpec
from launcher.config import model_path, plain
from launcher.errors import ConfigError
from launcher.placement import place, slots_needed
from launcher.plan import Plan
from launcher.ranks import component_plan, weight_sync
from launcher.resolve import resolve

DEFAULT_GPUS_PER_NODE = 8  # planning for cuda where no GPU is visible (a laptop)


GPUCount = Union[int, Callable[[], int]]


def build_plan(cfg: Any, local_gpus: GPUCount = 0, explicit: frozenset[str] = frozenset()) -> Plan:
    """Everything decided before anything starts: engines, GPUs, ranks, weight-sync pairs."""
    res = resolve(cfg, explicit)
    allocs = {name: e.alloc for name, e in res.engines.items()}
    warnings = list(res.warnings)
    cluster = cluster_spec(cfg.cluster, local_gpus, lambda: slots_needed(allocs, res.placement), warnings)
    placement = place(allocs, cluster, res.placement, {n: e.offload for n, e in res.engines.items()})
    warnings += placement.warnings
    components = {name: component_plan(name, e.alloc, placement.gpus[name], cluster, e.inherited_from)
                  for name, e in res.engines.items()}
    syncs = ()
    if "actor" in components and "rollout" in components:
        syncs = (weight_sync(components["actor"], components["rollout"], cluster),)
    meta = {**plan_meta(cfg), "engine_options": {n: engine_options(cfg, n, components[n].backend, e.offload)
                                                  for n, e in res.engines.items()}}
    return Plan(cluster=cluster, mode=placement.mode, components=components, weight_sync=syncs,
                warnings=tuple(warnings), meta=meta)


def cluster_spec(cluster_cfg: Any, local_gpus: GPUCount, needed: Callable[[], int],
                 warnings: list[str]) -> ClusterSpec:
    """cluster.* -> ClusterSpec. On cpu, GPU slots are virtual: default to what the plan needs."""
    device = str(cluster_cfg.device)
    if device not in ("auto", "cuda", "cpu"):
        raise ConfigError(f"cluster.device={device!r}: choose auto, cuda or cpu")
    count = local_gpus if callable(local_gpus) else (lambda: local_gpus)
    if device == "auto":
        device = "cuda" if count() > 0 else "cpu"
    nodes = 1 if cluster_cfg.num_nodes is None else cluster_cfg.num_nodes
    if nodes < 1 or (cluster_cfg.gpus_per_node is not None and cluster_cfg.gpus_per_node < 1):
        raise ConfigError(f"cluster.num_nodes and cluster.gpus_per_node must be >= 1 "
                          f"(got {cluster_cfg.num_nodes}, {cluster_cfg.gpus_per_node})")
    per_node = cluster_cfg.gpus_per_node
    if per_node is None:
        if device == "cpu":
            per_node = -(-needed() // nodes)
        elif count() > 0:
            per_node = count()
        else:
            per_node = DEFAULT_GPUS_PER_NODE
            warnings.append(f"no GPU visible here: planning for {per_node} GPUs per node "
                            f"(set cluster.gpus_per_node)")
    return ClusterSpec(num_nodes=nodes, gpus_per_node=per_node, device=device)


def plan_meta(cfg: Any) -> dict:
    """Run facts entry points read from the plan: names, model, recipe options, and how long
    the launcher waits for servers (trainers wait as long)."""
    return {
        "experiment_name": cfg.experiment_name,
        "trial_name": cfg.trial_name,
        "model_path": model_path(cfg),
        "health_timeout_s": cfg.launcher.health_timeout_s or cfg.rollout.health_timeout_s,
        "recipe": dict(plain(cfg.recipe) or {}),
    }


def engine_options(cfg: Any, name: str, backend: str, offload: bool) -> dict:
    """One engine's options for its entry point: its backend's sub-key, and its offload."""
    node = getattr(cfg, name)
    return {"options": plain(getattr(node, backend)),
            "offload": offload if name == "rollout" else plain(node.offload)}


def explicit_keys(overrides: list[str]) -> frozenset[str]:
    """Keys the user set on the command line (`rollout.backend=...`, `rollout=sglang`)."""
    keys = set()
    for o in overrides:
        key = o.lstrip("+~").partition("=")[0].strip()
        keys.add(key)
        if "." not in key:
            keys.add(f"{key}.backend")  # a group choice sets the backend too
    return frozenset(keys)

