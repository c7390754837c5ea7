"""From the typed config to a Plan, in named stages (pure):

    chosen   = wanted(config, offer)           what the config asks to run, the scheduler's nodes
    sized    = size_run(chosen, local_gpus)    the cluster, every engine's dims, parsed
    engines  = resolve.engines(...)            each engine typed (options, offload, training)
    placed   = place_run(chosen, sized, ...)   GPUs per component, the mode, the warnings
    comps    = rank_run(chosen, sized, ...)    ranks, instances and worker processes
    syncs    = sync_run(chosen, comps, ...)    the weight-sync pairs
    plan     = Plan(...)                       with the run facts entry points read (meta)

The only outside facts it takes are `local_gpus` (how many GPUs this machine has: a number, or a
callable the CLI passes so that `nvidia-smi` runs only when the answer matters) and, under a
scheduler, `offer` (what the job's nodes have, read by the runner: planning.offer), so the same
config plans the same way everywhere and tests need no GPU.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Union

from launcher.config.schema import ClusterConfig, LaunchConfig, declared_kind, engine
from launcher.planning import resolve
from launcher.planning.components import Worker, placed_names, split_placement, worker_plan, workers
from launcher.planning.forms import Placed, engine_sets, read_placement, virtual_slots
from launcher.planning.nodes import node_groups
from launcher.planning.offer import check_holds, with_offer
from launcher.planning.placement import Placement, Rules, place, slots_needed
from launcher.planning.ranks import component_plan, weight_sync
from launcher.planning.sizing import Dims, Sizing, size
from launcher.spec.alloc import ModelAllocation
from launcher.spec.builtins import ENGINES, INHERITING, POLICY, PRIMARY
from launcher.spec.cluster import UNBOUNDED, ClusterSpec, NodeGroup, NodeOffer
from launcher.spec.entry import flag_of
from launcher.spec.errors import ConfigError
from launcher.spec.gpuset import parse_gpu_set
from launcher.spec.limits import MAX_GPUS, MAX_GPUS_PER_NODE, MAX_NODES
from launcher.spec.plan import ComponentPlan, Plan, WeightSync
from launcher.spec.registry import SERVE

DEFAULT_GPUS_PER_NODE = 8  # planning for cuda where no GPU is visible (a laptop)

GPUCount = Union[int, Callable[[], int]]


@dataclass(frozen=True)
class Planned:
    """A plan (without processes yet) and the typed engines it was made from."""

    plan: Plan
    engines: dict[str, resolve.Engine]
    config: LaunchConfig  # the config, with what sizing turned on (releases) applied
    notes: tuple[str, ...] = field(default_factory=tuple)  # what the launcher chose
    workers: dict[str, Worker] = field(default_factory=dict)  # the declared worker components
    # each flag the user gave the rollout servers and where it was written (--x -> vllm.x,
    # rollout.server_args.x, rollout.extra_args): the preflight names it if refused
    flag_origins: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Wanted:
    """What the config asks to run, before anything is sized: the config (the scheduler's
    nodes applied), the engines' backend texts and kinds (resolve.Chosen), the workers, the
    placement split into the engines' and the workers', and what the offer said."""

    config: LaunchConfig
    chosen: resolve.Chosen
    workers: dict[str, Worker]
    placement: dict[str, Any]
    worker_placement: dict[str, Any]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sized:
    """The cluster and every engine's parsed allocation: the config with the releases sizing
    needs, the engines' GPU sets as written (process maps and node groups read), which
    engines took the policy's backend, and what sizing said."""

    config: LaunchConfig
    cluster: ClusterSpec
    allocs: dict[str, ModelAllocation]
    inherited: dict[str, str]
    placement: dict[str, Any]
    warnings: tuple[str, ...] = ()
    note: str = ""


def build_plan(
    config: LaunchConfig,
    local_gpus: GPUCount = 0,
    more_nodes: bool = True,
    offer: Optional[NodeOffer] = None,
    flag_origins: Mapping[str, str] = {},
) -> Planned:
    """Everything decided before anything starts: engines, GPUs, ranks, weight-sync pairs.

    more_nodes: whether the runner can give the plan more nodes (Slurm, Ray) or not (this
    machine): errors advise accordingly. offer: the scheduler's nodes (Slurm's partition):
    cluster.device=auto plans for them, and a cluster they cannot hold is refused.
    flag_origins: where a peer's section wrote the flags it gave the servers.
    """
    chosen = wanted(config, offer)
    sized = size_run(chosen, local_gpus, offer)
    engines = resolve.engines(
        sized.config, sized.allocs, sized.inherited, model_path(sized.config), sized.cluster.device
    )
    at = {n: read_placement(n, v, sized.cluster) for n, v in chosen.worker_placement.items()}
    placed = place_run(chosen, sized, engines, at, more_nodes)
    components = rank_run(chosen, sized, placed, at)
    plan = Plan(
        cluster=sized.cluster,
        mode=placed.mode,
        components=components,
        weight_sync=sync_run(chosen.chosen.feeds, components, sized.cluster),
        warnings=(*sized.warnings, *placed.warnings),
        meta=run_meta(sized.config, engines, chosen.workers),
    )
    notes = (*chosen.notes, *((sized.note,) if sized.note else ()))
    origins = server_flag_origins(sized.config, flag_origins) if PRIMARY in engines else {}
    return Planned(plan, engines, sized.config, notes, chosen.workers, origins)


# ----------------------------------------------------------------------------- resolve
def wanted(config: LaunchConfig, offer: Optional[NodeOffer]) -> Wanted:
    """What the config asks to run; under a scheduler with cluster.device=auto, planned for
    the nodes the scheduler offers."""
    notes: tuple[str, ...] = ()
    if offer is not None and str(config.cluster.device) == "auto":
        offered, notes = with_offer(config.cluster, offer)
        config = dataclasses.replace(config, cluster=offered)
    chosen = resolve.chosen_backends(config)
    declared = workers(config)
    placement, worker_placement = split_placement(chosen.placement, declared)
    return Wanted(config, chosen, declared, placement, worker_placement, notes)


# ----------------------------------------------------------------------------- size
def size_run(chosen: Wanted, local_gpus: GPUCount, offer: Optional[NodeOffer]) -> Sized:
    """The cluster (this machine's GPUs, the config's or the CPU run's virtual slots) and
    every engine's allocation, bare backends sized for it."""
    config, warnings = chosen.config, list[str]()
    count = local_gpus if callable(local_gpus) else (lambda: local_gpus)
    device = _device(config.cluster, count)
    cluster = known_cluster(config.cluster, device, count, warnings)
    if cluster is not None:
        _check_offer(cluster, offer)
    # placement forms (process maps, node groups) as global GPU sets: against an unbounded
    # cluster while a CPU run's size is not known yet (place() checks them again)
    placement, per_process = engine_sets(chosen.placement, cluster or UNBOUNDED)
    dims = engine_dims(config, per_process)
    texts = _placed_inheritors(chosen.chosen.texts, placement)
    inheriting = frozenset(n for n in texts if texts[n] != chosen.chosen.texts[n])
    sizing = size(
        texts,
        placement,
        device,
        cluster.total_gpus if cluster else 0,
        lambda text: _placed_count(text, cluster),
        dims,
    )
    allocs, inherited = _parsed(sizing, chosen.chosen.kinds, inheriting, placement)
    if not allocs and not chosen.workers:
        raise ConfigError(
            "every engine is off and no worker is declared: set rollout.backend and/or "
            "actor.backend (e.g. rollout.backend=vllm:d1 actor.backend=fsdp:d2), or declare "
            "a worker (+components.NAME.entry=script.py)"
        )
    _check_dims(allocs, dims, per_process)
    placement = {**placement, **sizing.placement}
    if cluster is None:
        need = max(
            slots_needed(allocs, placement, rules(config)), virtual_slots(chosen.worker_placement)
        )
        cluster = cpu_cluster(config.cluster, lambda: need)
        _check_offer(cluster, offer)
    if allocs and cluster.gpu_nodes == 0:
        raise ConfigError(
            "cluster.node_groups: every node is CPU-only; the engines need GPU nodes (add "
            "nodes: raise cluster.num_nodes)"
        )
    config = resolve.with_offload(config, sizing.release)
    return Sized(config, cluster, allocs, inherited, placement, tuple(warnings), sizing.note)


def known_cluster(
    cluster: ClusterConfig, device: str, count: Callable[[], int], warnings: list[str]
) -> Optional[ClusterSpec]:
    """The cluster when its size is known before the engines are sized: on GPUs, or on cpu
    with gpus_per_node given; None for a CPU run sized by what the plan needs."""
    if device == "cuda":
        return cuda_cluster(cluster, count, warnings)
    if cluster.gpus_per_node is not None:
        return cpu_cluster(cluster, lambda: 0)
    return None


def _parsed(
    sizing: Sizing,
    kinds: dict[str, str],
    inheriting: frozenset[str],
    placement: Mapping[str, Any],
) -> tuple[dict[str, ModelAllocation], dict[str, str]]:
    """The sized texts parsed; a declared engine written without dims is sized by its
    placement only."""
    placed = placed_names(placement)
    for name, text in sizing.texts.items():
        if name not in ENGINES and resolve.is_bare(text) and name not in placed:
            raise ConfigError(
                f"components.{name}.backend={text}: give its dims ({text}:d2) or place it "
                f"(cluster.component_placement.{name}=0-1)"
            )
    return _parse(sizing.texts, kinds, inheriting)


def _check_offer(cluster: ClusterSpec, offer: Optional[NodeOffer]) -> None:
    if offer is not None and offer.unread is None:
        check_holds(cluster, offer)


def _placed_count(text: str, cluster: Optional[ClusterSpec]) -> int:
    """How many GPUs a placement text names; `all` on a CPU run whose size is not known yet is
    one slot (the engines placed there share it, as the CPU demo does)."""
    if cluster is None and str(text).strip().lower() == "all":
        return 1
    return len(parse_gpu_set(text, cluster or UNBOUNDED))


def engine_dims(config: LaunchConfig, per_process: dict[str, int]) -> Dims:
    """Each engine's tp/pp/cp for sizing a bare backend: its `parallel`, else a serving
    process map's GPUs per process (`0-7:0-3`: 2 GPUs an instance)."""
    parallel: dict[str, tuple[int, int, int]] = {}
    said: dict[str, str] = {}
    declared = [str(n) for n, raw in config.components.items() if declared_kind(raw) == SERVE]
    for name in (*ENGINES, *declared):
        sizes = dataclasses.asdict(engine(config, name).parallel)
        for axis, v in sizes.items():
            if v is not None and (isinstance(v, bool) or not 1 <= v <= MAX_GPUS_PER_NODE):
                raise ConfigError(f"{name}.parallel.{axis}={v}: choose 1 to {MAX_GPUS_PER_NODE}")
        if any(v is not None for v in sizes.values()):
            tp, pp, cp = (sizes[a] or 1 for a in ("tp", "pp", "cp"))
            parallel[name] = (tp, pp, cp)
            said[name] = " ".join(f"{name}.parallel.{a}={v}" for a, v in sizes.items() if v)
        elif per_process.get(name, 1) > 1:
            parallel[name] = (per_process[name], 1, 1)
            said[name] = f"cluster.component_placement.{name} ({per_process[name]} GPUs a process)"
    return Dims(parallel, said)


def _check_dims(
    allocs: dict[str, ModelAllocation], dims: Dims, per_process: dict[str, int]
) -> None:
    """An engine's `parallel` and a serving process map must agree with dims in its backend."""
    for name, alloc in allocs.items():
        if name in dims.parallel:
            tp, pp, cp = dims.parallel[name]
            if (alloc.tp, alloc.pp, alloc.cp) != (tp, pp, cp) and not alloc.hybrid:
                raise ConfigError(
                    f"{dims.said[name]} but {name}.backend={alloc} has tp {alloc.tp}, pp "
                    f"{alloc.pp}, cp {alloc.cp}: say it once (drop the dims or the keys)"
                )
        if name in per_process and alloc.is_inference and per_process[name] != alloc.tp * alloc.pp:
            raise ConfigError(
                f"cluster.component_placement.{name} gives each process {per_process[name]} "
                f"GPUs but {name}.backend={alloc} has {alloc.tp * alloc.pp} an instance"
            )


def _placed_inheritors(
    texts: dict[str, Optional[str]], placement: dict[str, Any]
) -> dict[str, Optional[str]]:
    """An engine that takes the policy's backend ("") and is placed takes its world size from
    its placement (`inference: 10-11` beside `actor: 12-15`): the policy's backend name, sized
    like any bare one."""
    placed = placed_names(placement)
    out = dict(texts)
    for name in INHERITING:
        policy = texts.get(POLICY)
        if texts[name] == "" and name in placed and policy is not None:
            out[name] = str(policy).partition(":")[0].strip() or policy
    return out


def _parse(
    texts: dict[str, Optional[str]], kinds: dict[str, str], inheriting: frozenset[str] = frozenset()
) -> tuple[dict[str, ModelAllocation], dict[str, str]]:
    """Parsed allocations of the active engines, built-in ones first; "" means the policy's
    backend (and so do the names in `inheriting`, sized by their placement already)."""
    allocs: dict[str, ModelAllocation] = {}
    inherited: dict[str, str] = {n: POLICY for n in inheriting}
    for name, text in texts.items():
        if text is None:
            continue
        if name in INHERITING and not str(text).strip():
            if texts.get(POLICY) is None:
                raise ConfigError(
                    f"{name}.backend is empty, which means the {POLICY}'s backend, but {POLICY} "
                    f"is off: set {name}.backend=fsdp:d2 (for example) or {POLICY}.backend"
                )
            text, inherited[name] = texts[POLICY], POLICY
        allocs[name] = resolve.parse_for(name, str(text), kinds.get(name))
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
            f"cluster.num_nodes={nodes} x cluster.gpus_per_node={gpn} is more than the "
            f"{MAX_GPUS} GPUs areal-launch plans for"
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
                "(set cluster.gpus_per_node)"
            )
        per_node = min(per_node, MAX_GPUS_PER_NODE)
    if nodes * per_node > MAX_GPUS:
        raise ConfigError(
            f"cluster.num_nodes={nodes} x {per_node} GPUs is more than the {MAX_GPUS} GPUs "
            "areal-launch plans for"
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
                "cluster.node_groups with GPUs on a CPU run: set cluster.gpus_per_node (the "
                "virtual GPU slots of each node)"
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
    _nodes(dataclasses.replace(cluster, num_nodes=nodes))
    return groups, cpu_nodes, nodes


# ----------------------------------------------------------------------------- place
def rules(config: LaunchConfig) -> Rules:
    """How the default placement shares GPUs, as the cluster section says."""
    colocate = {str(k): str(v) for k, v in dict(config.cluster.colocate).items()}
    return Rules(
        colocate, frozenset(map(str, config.cluster.separate)), bool(config.cluster.oversubscribe)
    )


def place_run(
    chosen: Wanted,
    sized: Sized,
    engines: Mapping[str, resolve.Engine],
    at: Mapping[str, Placed],
    more_nodes: bool,
) -> Placement:
    """GPUs per engine (workers' GPUs counted for sharing and idle GPUs), the mode, warnings."""
    offload = {
        **{n: e.offload for n, e in engines.items()},
        **{n: w.offload for n, w in chosen.workers.items()},
    }
    return place(
        sized.allocs,
        sized.cluster,
        sized.placement,
        offload,
        more_nodes=more_nodes,
        workers={n: a.gpus for n, a in at.items()},
        rules=rules(sized.config),
    )


# ----------------------------------------------------------------------------- ranks, sync
def rank_run(
    chosen: Wanted, sized: Sized, placed: Placement, at: Mapping[str, Placed]
) -> dict[str, ComponentPlan]:
    """Every component's plan: ranks (train), instances (serve, in the order of the trainer
    that feeds them) and processes (worker)."""
    fed_by = {dst: src for src, dst in chosen.chosen.feeds.items()}
    components: dict[str, ComponentPlan] = {}
    for name, a in sorted(sized.allocs.items(), key=lambda item: item[1].is_inference):
        feeder = components.get(fed_by.get(name, ""))
        components[name] = component_plan(
            name, a, placed.gpus[name], sized.cluster, sized.inherited.get(name), feeder
        )
    components = {name: components[name] for name in sized.allocs}  # in the engines' order
    for name, w in chosen.workers.items():
        components[name] = worker_plan(w, at.get(name), sized.cluster, components)
    return components


def sync_run(
    feeds: Mapping[str, str], components: Mapping[str, ComponentPlan], cluster: ClusterSpec
) -> tuple[WeightSync, ...]:
    """The weight-sync pairs of each trainer and the servers it feeds."""
    return tuple(
        weight_sync(components[src], components[dst], cluster)
        for src, dst in feeds.items()
        if src in components and dst in components
    )


# ----------------------------------------------------------------------------- run facts
def model_path(config: LaunchConfig) -> str:
    """rollout.model_path, else model_path, with `~` expanded (no other environment read)."""
    import os.path

    return os.path.expanduser(str(config.rollout.model_path or config.model_path))


def run_meta(
    config: LaunchConfig, engines: Mapping[str, resolve.Engine], declared: Mapping[str, Worker]
) -> dict:
    """Run facts entry points read from the plan: names, model, recipe options, how long the
    launcher waits for servers (trainers wait as long), and each component's options."""
    recipe = config.recipe
    if dataclasses.is_dataclass(recipe) and not isinstance(recipe, type):
        recipe = dataclasses.asdict(recipe)
    recipe = dict(recipe or {})
    _finite(recipe, "recipe")
    options = {n: engine_options(e, _model(config, e)) for n, e in engines.items()}
    options.update(
        {
            n: {"options": dict(w.options), "offload": w.offload, "mem_gib": w.mem_gib}
            for n, w in declared.items()
        }
    )
    if PRIMARY in options:  # the recipe's stages of a pipelined rollout
        options[PRIMARY]["pipeline_stage_num"] = stage_num(config)
    return {
        "experiment_name": config.experiment_name,
        "trial_name": config.trial_name,
        "model_path": model_path(config),
        "health_timeout_s": health_timeout_s(config),
        "recipe": recipe,
        "engine_options": options,
    }


def _model(config: LaunchConfig, e: resolve.Engine) -> dict:
    """A trainer's `model` settings for its entry (an inheriting one's are the policy's)."""
    node = engine(config, e.inherited_from or e.name, e.alloc.kind)
    return dict(getattr(node, "model", None) or {})


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


def health_timeout_s(config: LaunchConfig) -> float:
    """launcher.health_timeout_s, else rollout.health_timeout_s."""
    return float(config.launcher.health_timeout_s or config.rollout.health_timeout_s)


MAX_PIPELINE_STAGES = 1024


def stage_num(config: LaunchConfig) -> int:
    """rollout.pipeline_stage_num, bounded: env and rollout take turns on this many stages."""
    n = config.rollout.pipeline_stage_num
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PIPELINE_STAGES:
        raise ConfigError(
            f"rollout.pipeline_stage_num={n!r}: choose 1 to {MAX_PIPELINE_STAGES} (stages of a "
            "batch that env and rollout pipeline)"
        )
    return n


def engine_options(engine: resolve.Engine, model: Optional[dict] = None) -> dict:
    """One engine's options for its entry point: its backend's sub-key, its offload, and for
    trainers how they train (dtype, gradient_checkpointing, max_tokens_per_mb)."""
    offload = (
        engine.offload if engine.offload_parts is None else dataclasses.asdict(engine.offload_parts)
    )
    out = {"options": dataclasses.asdict(engine.options), "offload": offload}
    if engine.training is not None:
        out["training"] = dataclasses.asdict(engine.training)
    if model:
        out["model"] = model
    return out


def server_flag_origins(config: LaunchConfig, peer: Mapping[str, str]) -> dict[str, str]:
    """Every flag the user gave the rollout's servers, with where it was written: a peer's
    section (`peer`), `rollout.server_args.<key>`, `rollout.extra_args`. What the preflight
    names when the engine's own parser refuses one."""
    origins = dict(peer)
    for key in config.rollout.server_args:
        origins.setdefault(flag_of(str(key)), f"rollout.server_args.{key}")
    for arg in config.rollout.extra_args:
        if str(arg).startswith("-"):
            origins.setdefault(str(arg).partition("=")[0], "rollout.extra_args")
    return origins
