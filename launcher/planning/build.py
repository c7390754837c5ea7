"""From the typed config to a Plan: resolve, size the cluster, place, map ranks (pure).

The only outside facts it takes are `local_gpus` (how many GPUs this machine has: a number, or a
callable the CLI passes so that `nvidia-smi` runs only when the answer matters) and, under a
scheduler, `offer` (what the job's nodes have, read by the runner: planning.offer), so the same
config plans the same way everywhere and tests need no GPU.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Union

from launcher.config.schema import ClusterConfig, LaunchConfig, engine
from launcher.planning import peer_servers, resolve
from launcher.planning.components import (
    Worker,
    placed_names,
    split_placement,
    worker_plan,
    workers,
)
from launcher.planning.forms import engine_sets, read_placement, virtual_slots
from launcher.planning.nodes import node_groups
from launcher.planning.offer import check_holds, with_offer
from launcher.planning.placement import place, slots_needed
from launcher.planning.ranks import component_plan, weight_sync
from launcher.planning.sizing import Dims, size
from launcher.spec import registry
from launcher.spec.alloc import ModelAllocation
from launcher.spec.builtins import ENGINES, INHERITING
from launcher.spec.cluster import UNBOUNDED, ClusterSpec, NodeGroup, NodeOffer
from launcher.spec.errors import ConfigError, PlacementError
from launcher.spec.gpuset import parse_gpu_set
from launcher.spec.limits import MAX_GPUS, MAX_GPUS_PER_NODE, MAX_NODES
from launcher.spec.plan import Plan

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
    # each flag the user gave the rollout servers and where it was written (--x -> vllm.x,
    # rollout.server_args.x, rollout.extra_args): the preflight names it if refused
    flag_origins: Mapping[str, str] = field(default_factory=dict)


def build_plan(
    spec: LaunchConfig,
    local_gpus: GPUCount = 0,
    explicit: frozenset[str] = frozenset(),
    more_nodes: bool = True,
    offer: Optional[NodeOffer] = None,
    servers: Mapping[str, Mapping[str, Any]] = {},
) -> Planned:
    """Everything decided before anything starts: engines, GPUs, ranks, weight-sync pairs.

    explicit: the keys the user set on the command line. more_nodes: whether the runner can
    give the plan more nodes (Slurm, Ray) or not (this machine): errors advise accordingly.
    offer: the scheduler's nodes (Slurm's partition): cluster.device=auto plans for them, and
    a cluster they cannot hold is refused. servers: AReaL's `vllm:`/`sglang:` sections
    (planning.peer_servers), applied once the rollout's backend is known.
    """
    warnings: list[str] = []
    notes: tuple[str, ...] = ()
    if offer is not None and str(spec.cluster.device) == "auto":
        offered, notes = with_offer(spec.cluster, offer)
        spec = dataclasses.replace(spec, cluster=offered)
    if spec.cluster.auto_scheduler:
        raise ConfigError(
            "cluster.auto_scheduler=true: not supported (RLinf's run-time "
            "placement); areal-launch places every component before anything "
            "starts: write cluster.component_placement, or leave it out for the "
            "default"
        )
    chosen = resolve.chosen_backends(spec, explicit, warnings)
    texts, raw = chosen.texts, chosen.placement
    declared = workers(spec, placed_names(raw))
    raw, worker_raw = split_placement(raw, declared)
    count = local_gpus if callable(local_gpus) else (lambda: local_gpus)
    device = _device(spec.cluster, count)
    cluster = None
    if device == "cuda":
        cluster = cuda_cluster(spec.cluster, count, warnings)
    elif spec.cluster.gpus_per_node is not None:  # a CPU run of a given size: known now
        cluster = cpu_cluster(spec.cluster, lambda: 0)
    if cluster is not None:
        _check_offer(cluster, offer)
    # RLinf's forms (process maps, node groups) as global GPU sets: against an unbounded
    # cluster while a CPU run's size is not known yet (place() checks them again)
    placement, per_process = engine_sets(raw, cluster or UNBOUNDED)
    dims = _dims(spec, per_process)
    total = cluster.total_gpus if cluster else 0
    sized_alone = _placed_inheritors(texts, placement)
    inheriting = frozenset(n for n in texts if sized_alone[n] != texts[n])
    texts = sized_alone
    sizing = size(texts, placement, device, total, lambda text: _placed_count(text, cluster), dims)
    texts = sizing.texts
    placement = {**placement, **sizing.placement}
    spec = resolve.with_offload(spec, sizing.release)
    _check_declared_sized(texts, chosen.kinds, placement)
    allocs, inherited = _parse(texts, chosen.kinds, inheriting)
    _check_dims(spec, allocs, dims, per_process)
    strategies = scheduling_strategies(spec, allocs)
    if cluster is None:
        cluster = cpu_cluster(
            spec.cluster,
            lambda: max(slots_needed(allocs, placement, strategies), virtual_slots(worker_raw)),
        )
        _check_offer(cluster, offer)
    peer = peer_servers.apply(
        spec, allocs["rollout"].backend if "rollout" in allocs else None, servers
    )
    spec = peer.spec
    engines = resolve.engines(spec, allocs, inherited, model_path(spec), cluster.device)
    at = {name: read_placement(name, value, cluster) for name, value in worker_raw.items()}
    offload = {
        **{n: e.offload for n, e in engines.items()},
        **{n: w.offload for n, w in declared.items()},
    }
    try:
        placed = place(
            allocs,
            cluster,
            placement,
            offload,
            more_nodes=more_nodes,
            workers={n: a.gpus for n, a in at.items()},
            strategies=strategies,
            in_turn=spec.scheduler.type == "local",
        )
    except PlacementError as exc:
        raise PlacementError(as_written(str(exc), spec.cluster)) from None
    warnings += placed.warnings
    components = {
        name: component_plan(name, a, placed.gpus[name], cluster, inherited.get(name))
        for name, a in allocs.items()
    }
    for name, w in declared.items():
        components[name] = worker_plan(w, at.get(name), cluster)
    syncs = tuple(
        weight_sync(components[src], components[dst], cluster)
        for src, dst in chosen.feeds.items()
        if src in components and dst in components
    )
    meta = {
        **plan_meta(spec),
        "engine_options": {
            **{n: engine_options(e, _model_keys(spec, e)) for n, e in engines.items()},
            **{
                n: {"options": dict(w.options), "offload": w.offload, "mem_gib": w.mem_gib}
                for n, w in declared.items()
            },
        },
    }
    if "rollout" in meta["engine_options"]:  # RLinf's pipelined rollout: the recipe's stages
        meta["engine_options"]["rollout"]["pipeline_stage_num"] = stage_num(spec)
    plan = Plan(
        cluster=cluster,
        mode=placed.mode,
        components=components,
        weight_sync=syncs,
        warnings=tuple(warnings),
        meta=meta,
    )
    return Planned(
        plan,
        engines,
        spec,
        notes + ((sizing.note,) if sizing.note else ()) + peer.notes,
        declared,
        peer_servers.flag_origins(spec.rollout, peer.origins) if "rollout" in allocs else {},
    )


def as_written(message: str, cluster: ClusterConfig) -> str:
    """A message naming cluster.num_nodes/gpus_per_node in the spelling the config used
    (AReaL's n_nodes/n_gpus_per_node), so the fix it gives is a key the user has."""
    for ours, theirs in (("num_nodes", "n_nodes"), ("gpus_per_node", "n_gpus_per_node")):
        if getattr(cluster, theirs) is not None:
            message = re.sub(rf"\bcluster\.{ours}\b", f"cluster.{theirs}", message)
    return message


def _check_offer(cluster: ClusterSpec, offer: Optional[NodeOffer]) -> None:
    if offer is not None and offer.unread is None:
        check_holds(cluster, offer)


def _placed_count(text: str, cluster: Optional[ClusterSpec]) -> int:
    """How many GPUs a placement text names; `all` on a CPU run whose size is not known yet is
    one slot (the engines placed there share it, as the CPU demo does)."""
    if cluster is None and str(text).strip().lower() == "all":
        return 1
    return len(parse_gpu_set(text, cluster or UNBOUNDED))


def _dims(spec: LaunchConfig, per_process: dict[str, int]) -> Dims:
    """Each engine's tp/pp/cp for sizing a bare backend: RLinf's keys, else a serving process
    map's GPUs per process (`0-7:0-3`: 2 GPUs an instance)."""
    parallel: dict[str, tuple[int, int, int]] = {}
    said: dict[str, str] = {}
    for name, keys in _rlinf_parallel(spec).items():
        sizes = [v or 1 for _, v in keys]
        for key, v in keys:
            if v is not None and (isinstance(v, bool) or not 1 <= v <= MAX_GPUS_PER_NODE):
                raise ConfigError(f"{key}={v}: choose 1 to {MAX_GPUS_PER_NODE}")
        if any(v is not None for _, v in keys):
            parallel[name] = (sizes[0], sizes[1], sizes[2])
            said[name] = " ".join(f"{k}={v}" for k, v in keys if v is not None)
        elif per_process.get(name, 1) > 1:
            parallel[name] = (per_process[name], 1, 1)
            said[name] = f"cluster.component_placement.{name} ({per_process[name]} GPUs a process)"
    return Dims(parallel, said)


def _rlinf_parallel(spec: LaunchConfig) -> dict[str, list[tuple[str, Optional[int]]]]:
    """engine -> [(key, tp), (key, pp), (key, cp)] as RLinf writes them."""
    out = {
        "rollout": [
            ("rollout.tensor_parallel_size", spec.rollout.tensor_parallel_size),
            ("rollout.pipeline_parallel_size", spec.rollout.pipeline_parallel_size),
            ("rollout.context_parallel_size", None),
        ]
    }
    for name in ENGINES[1:]:
        model = getattr(spec, name).model
        out[name] = [
            (f"{name}.model.tensor_model_parallel_size", model.tensor_model_parallel_size),
            (f"{name}.model.pipeline_model_parallel_size", model.pipeline_model_parallel_size),
            (f"{name}.model.context_parallel_size", model.context_parallel_size),
        ]
    return out


def _check_dims(
    spec: LaunchConfig, allocs: dict[str, ModelAllocation], dims: Dims, per_process: dict[str, int]
) -> None:
    """RLinf's tp keys and a serving process map must agree with dims written in the backend."""
    for name, alloc in allocs.items():
        if name in dims.parallel:
            tp, pp, cp = dims.parallel[name]
            if (alloc.tp, alloc.pp, alloc.cp) != (tp, pp, cp) and not alloc.hybrid:
                raise ConfigError(
                    f"{dims.said[name]} but {name}.backend={alloc} has tp "
                    f"{alloc.tp}, pp {alloc.pp}, cp {alloc.cp}: say it once (drop "
                    "the dims or the keys)"
                )
        if name in per_process and alloc.is_inference and per_process[name] != alloc.tp * alloc.pp:
            raise ConfigError(
                f"cluster.component_placement.{name} gives each process "
                f"{per_process[name]} GPUs but {name}.backend={alloc} has "
                f"{alloc.tp * alloc.pp} an instance"
            )


def _placed_inheritors(
    texts: dict[str, Optional[str]], placement: dict[str, Any]
) -> dict[str, Optional[str]]:
    """An engine that takes the actor's backend ("") and is placed takes its world size from
    its placement (RLinf's `inference: 10-11` beside `actor: 12-15`): the actor's backend name,
    sized like any bare one."""
    placed = placed_names(placement)
    out = dict(texts)
    for name in INHERITING:
        actor = texts.get("actor")
        if texts[name] == "" and name in placed and actor is not None:
            out[name] = str(actor).partition(":")[0].strip() or actor
    return out


def _check_declared_sized(
    texts: dict[str, Optional[str]], kinds: dict[str, str], placement: dict[str, Any]
) -> None:
    """A declared engine written without dims is sized by its placement only."""
    placed = placed_names(placement)
    for name, text in texts.items():
        if name not in ENGINES and resolve.is_bare(text) and name not in placed:
            raise ConfigError(
                f"components.{name}.backend={text}: give its dims "
                f"({text}:d2) or place it (cluster.component_placement.{name}=0-1)"
            )


def _parse(
    texts: dict[str, Optional[str]], kinds: dict[str, str], inheriting: frozenset[str] = frozenset()
) -> tuple[dict[str, ModelAllocation], dict[str, str]]:
    """Parsed allocations of the active engines, built-in ones first; "" means the actor's
    backend (and so do the names in `inheriting`, sized by their placement already)."""
    allocs: dict[str, ModelAllocation] = {}
    inherited: dict[str, str] = {n: "actor" for n in inheriting}
    for name in texts:
        text = texts[name]
        if text is None:
            continue
        if name in INHERITING and not str(text).strip():
            if texts.get("actor") is None:
                raise ConfigError(
                    f"{name}.backend is empty, which means the actor's backend, "
                    f"but actor is off: set {name}.backend=fsdp:d2 (for example) "
                    "or actor.backend"
                )
            text, inherited[name] = texts["actor"], "actor"
        allocs[name] = resolve.parse_for(name, str(text), kinds.get(name))
    if not allocs:
        raise ConfigError(
            "every engine is off: set rollout.backend and/or actor.backend (e.g. "
            "rollout.backend=vllm:d1 actor.backend=fsdp:d2)"
        )
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
        raise ConfigError(
            f"cluster.num_nodes={nodes} x cluster.gpus_per_node={gpn} is more "
            f"than the {MAX_GPUS} GPUs areal-launch plans for"
        )
    return nodes


def cuda_cluster(
    cluster: ClusterConfig, count: Callable[[], int], warnings: list[str]
) -> ClusterSpec:
    """cluster.* -> ClusterSpec for GPUs: the machine's count unless given."""
    groups, cpu_nodes, nodes = _groups(cluster)
    per_node = cluster.gpus_per_node
    if per_node is None:
        per_node = count()
        if per_node <= 0:
            per_node = DEFAULT_GPUS_PER_NODE
            warnings.append(
                f"no GPU visible here: planning for {per_node} GPUs per node "
                f"(set cluster.gpus_per_node)"
            )
        per_node = min(per_node, MAX_GPUS_PER_NODE)
    if nodes * per_node > MAX_GPUS:
        raise ConfigError(
            f"cluster.num_nodes={nodes} x {per_node} GPUs is more than the "
            f"{MAX_GPUS} GPUs areal-launch plans for"
        )
    node_groups(cluster.node_groups, nodes, per_node)  # the group's GPU count against ours
    return ClusterSpec(
        num_nodes=nodes, gpus_per_node=per_node, device="cuda", groups=groups, cpu_nodes=cpu_nodes
    )


def cpu_cluster(cluster: ClusterConfig, needed: Callable[[], int]) -> ClusterSpec:
    """cluster.* -> ClusterSpec on cpu: GPU slots are virtual, by default what the plan needs."""
    groups, cpu_nodes, nodes = _groups(cluster)
    per_node = cluster.gpus_per_node
    if per_node is None:
        if any(g.gpus for g in groups):
            raise ConfigError(
                "cluster.node_groups with GPUs on a CPU run: set "
                "cluster.gpus_per_node (the virtual GPU slots of each node)"
            )
        per_node = max(1, -(-needed() // max(1, nodes - cpu_nodes)))
    return ClusterSpec(
        num_nodes=nodes, gpus_per_node=per_node, device="cpu", groups=groups, cpu_nodes=cpu_nodes
    )


def _groups(cluster: ClusterConfig) -> tuple[tuple[NodeGroup, ...], int, int]:
    """The node groups, how many nodes are CPU-only (the last ones), and the node count."""
    if not cluster.node_groups:
        return (), 0, _nodes(cluster)
    groups, cpu_nodes, nodes = node_groups(
        list(cluster.node_groups), cluster.num_nodes, cluster.gpus_per_node
    )
    if nodes == cpu_nodes:
        raise ConfigError(
            "cluster.node_groups: every node is CPU-only; the engines need GPU "
            "nodes (add nodes: raise cluster.num_nodes)"
        )
    _nodes(dataclasses.replace(cluster, num_nodes=nodes))
    return groups, cpu_nodes, nodes


def model_path(spec: LaunchConfig) -> str:
    """rollout.model_path, else model_path, with `~` expanded (no other environment read)."""
    import os.path

    return os.path.expanduser(str(spec.rollout.model_path or spec.model_path))


def scheduling_strategies(
    spec: LaunchConfig, allocs: Mapping[str, ModelAllocation]
) -> dict[str, tuple[Optional[str], Optional[str]]]:
    """AReaL's `<engine>.scheduling_strategy` of each running engine that gives one."""
    out = {}
    for name, alloc in allocs.items():
        kind = registry.SERVE if alloc.is_inference else registry.TRAIN
        strategy = getattr(engine(spec, name, kind), "scheduling_strategy", None)
        if strategy is not None and strategy.type is not None:
            out[name] = (strategy.type, strategy.target)
    return out


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
        # AReaL's: the root for logs and checkpoints (None: the run folder) and how its
        # processes find each other (the request's `areal` folders, made by each node)
        "fileroot": spec.cluster.fileroot,
        "name_resolve": dataclasses.asdict(spec.cluster.name_resolve),
    }


def _finite(value: object, key: str) -> None:
    """ConfigError for a NaN or infinite number (`recipe.lr=nan`): the plan is JSON, which has
    neither, and no entry point trains with one."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}={value}: not a finite number; give a value such as 1e-6")
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, (list, tuple))
        else ()
    )
    for k, v in items:
        _finite(v, f"{key}.{k}" if isinstance(value, dict) else f"{key}[{k}]")


def health_timeout_s(spec: LaunchConfig) -> float:
    """launcher.health_timeout_s, else rollout.health_timeout_s."""
    return float(spec.launcher.health_timeout_s or spec.rollout.health_timeout_s)


MAX_PIPELINE_STAGES = 1024


def stage_num(spec: LaunchConfig) -> int:
    """rollout.pipeline_stage_num, bounded: env and rollout take turns on this many stages."""
    n = spec.rollout.pipeline_stage_num
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PIPELINE_STAGES:
        raise ConfigError(
            f"rollout.pipeline_stage_num={n!r}: choose 1 to {MAX_PIPELINE_STAGES} "
            "(stages of a batch that env and rollout pipeline)"
        )
    return n


def _model_keys(spec: LaunchConfig, e: resolve.Engine) -> dict:
    """RLinf's other `<engine>.model.*` keys (precision, ...), for the entry point."""
    node = resolve.engine(spec, e.inherited_from or e.name, e.alloc.kind)
    return dict(getattr(getattr(node, "model", None), "options", None) or {})


def engine_options(engine: resolve.Engine, model: Optional[dict] = None) -> dict:
    """One engine's options for its entry point: its backend's sub-key, its offload, and for
    trainers how they train (dtype, gradient_checkpointing, max_tokens_per_mb)."""
    import dataclasses

    offload = (
        engine.offload if engine.offload_parts is None else dataclasses.asdict(engine.offload_parts)
    )
    out = {"options": dataclasses.asdict(engine.options), "offload": offload}
    if engine.training is not None:
        out["training"] = dataclasses.asdict(engine.training)
    if model:
        out["model"] = model
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
