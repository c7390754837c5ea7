"""Which GPUs each engine gets, and whether the result can run (docs/architecture.md §4).

Pure: the cluster comes in as a ClusterSpec, the placement as the mapping the user wrote
(`cluster.component_placement`). Every check that can fail before a process starts is done here
(or in launcher.planning.ranks, which this calls), so a bad layout is one clear error, not a hang on
node 3.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional, Sequence, Union

from launcher.planning.ranks import check_inference, check_training
from launcher.spec.alloc import ModelAllocation
from launcher.spec.builtins import ENGINES, INHERITING, POLICY, PRIMARY, builtin_kind
from launcher.spec.cluster import UNBOUNDED, ClusterSpec
from launcher.spec.errors import PlacementError
from launcher.spec.gpuset import format_gpu_set, parse_gpu_set
from launcher.spec.registry import SERVE, TRAIN

__all__ = [
    "Placement",
    "parse_gpu_set",
    "format_gpu_set",
    "parse_placement_keys",
    "slots_needed",
    "place",
    "offload_option",
    "Rules",
]

PlacementValue = Union[str, int, None]


@dataclass(frozen=True)
class Rules:
    """How the default placement shares GPUs beyond the engines placed by hand: colocate
    (name -> the component whose GPUs it takes), separate (names that never share the
    policy's GPUs by default), oversubscribe (engines asking more GPUs than the cluster has
    share them, handed out in turn)."""

    colocate: Mapping[str, str] = field(default_factory=dict)
    separate: frozenset[str] = frozenset()
    oversubscribe: bool = False


@dataclass(frozen=True)
class Placement:
    """GPUs per active engine (in ENGINES order), the mode, and what the user should know.

    mode: "collocated" (one GPU set for all), "disaggregated" (distinct sets pairwise disjoint;
    engines placed together count as one set), "hybrid" (sets partly overlap).
    """

    gpus: dict[str, tuple[int, ...]]
    mode: str
    warnings: tuple[str, ...] = ()


def _keys(
    component_placement: Mapping[str, PlacementValue], active: Sequence[str]
) -> dict[str, tuple[str, str]]:
    """engine -> (the key the user wrote, the GPU-set text)."""
    out: dict[str, tuple[str, str]] = {}
    for key, value in component_placement.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise PlacementError(
                f"cluster.component_placement.{key}={value!r}: not a GPU set (write all, a-b, a, "
                f"or a quoted list: cluster.component_placement.{key}='0-2,5,7')"
            )
        for name in (part.strip() for part in str(key).split(",")):
            if name not in ENGINES and name not in active:
                known = [*ENGINES, *(n for n in active if n not in ENGINES)]
                raise PlacementError(
                    f"cluster.component_placement key {key!r}: unknown component {name!r} "
                    f"(components: {', '.join(known)}, or one declared under components.*; "
                    "join names with commas to share GPUs)"
                )
            if name in out:
                raise PlacementError(
                    f"cluster.component_placement: {name} is placed twice, by {out[name][0]!r} "
                    f"and {key!r} (place each engine once; use one key like 'actor,rollout' "
                    "to share GPUs)"
                )
            if name not in active:
                raise PlacementError(
                    f"cluster.component_placement.{key}={value}: {name} is not enabled (set "
                    f"{name}.backend to enable it, or remove {name} from the placement)"
                )
            out[name] = (str(key), str(value))
    return out


def parse_placement_keys(
    component_placement: Mapping[str, PlacementValue], active: Sequence[str]
) -> dict[str, str]:
    """engine -> GPU-set text. Comma keys ("actor,rollout") give each engine the same text.

    A placement for an engine that is not active is an error, not a warning: it means the
    user believes the engine runs, and dropping it silently hides that.
    """
    return {name: text for name, (_, text) in _keys(component_placement, active).items()}


def _fill(
    allocs: Mapping[str, ModelAllocation],
    fixed: Mapping[str, tuple[int, ...]],
    free: Iterator[int],
    rules: Rules = Rules(),
) -> dict[str, tuple[int, ...]]:
    """The default for engines not in `fixed`: serving first, then the policy, then the
    engines that inherit it on its GPUs when their world size matches, else on the next free
    ones; an engine colocated with another takes that one's GPUs, one kept separate never
    shares. A result shorter than the world size means the cluster ran out."""
    gpus: dict[str, tuple[int, ...]] = {}
    for name in [n for n in allocs if n not in rules.colocate]:
        if name in fixed:
            gpus[name] = fixed[name]
        elif name not in rules.separate and _shares_policy(name, allocs, fixed):
            gpus[name] = gpus[POLICY]
        else:
            gpus[name] = tuple(itertools.islice(free, allocs[name].world_size))
    for name, target in rules.colocate.items():
        if name in allocs:
            gpus[name] = _colocated(name, target, allocs, gpus, fixed)
    return {name: gpus[name] for name in allocs}


def _colocated(
    name: str,
    target: str,
    allocs: Mapping[str, ModelAllocation],
    gpus: Mapping[str, tuple[int, ...]],
    fixed: Mapping[str, tuple[int, ...]],
) -> tuple[int, ...]:
    """The GPUs of `name`'s colocation target, or PlacementError saying why it cannot share."""
    key = f"cluster.colocate.{name}"
    if target not in gpus:
        running = ", ".join(n for n in allocs if n != name)
        raise PlacementError(
            f"{key}: target {target!r} is not a running engine that is "
            f"placed on its own (running: {running or 'none'})"
        )
    if allocs[name].world_size != allocs[target].world_size:
        raise PlacementError(
            f"{key}: colocation with {target} needs {name}'s world size "
            f"({allocs[name]}: {allocs[name].world_size}) to equal "
            f"{target}'s ({allocs[target]}: {allocs[target].world_size}); "
            f"change {name}.backend, or put {name} in cluster.separate"
        )
    if name in fixed and fixed[name] != gpus[target]:
        raise PlacementError(
            f"{key}: colocation with {target} (GPUs "
            f"{format_gpu_set(gpus[target])}) but cluster.component_placement "
            f"puts {name} on {format_gpu_set(fixed[name])}: write one of them"
        )
    return gpus[target]


def _shares_policy(
    name: str, allocs: Mapping[str, ModelAllocation], fixed: Mapping[str, tuple[int, ...]]
) -> bool:
    return (  # a trainer in the policy's job: a served teacher has servers of its own
        name in INHERITING
        and name not in fixed
        and POLICY in allocs
        and allocs[name].kind == TRAIN
        and allocs[name].world_size == allocs[POLICY].world_size
    )


def _in_turn(used: set[int], total: int) -> Iterator[int]:
    """GPUs handed out in turn, the free ones first, then round again over all of them (a
    counter modulo the GPUs), so any `total` in a row differ."""
    return itertools.cycle(
        [g for g in range(total) if g not in used] + [g for g in range(total) if g in used]
    )


def _free(used: set[int], stop: Optional[int]) -> Iterator[int]:
    numbers = itertools.count() if stop is None else iter(range(stop))
    return (g for g in numbers if g not in used)


def slots_needed(
    allocs: Mapping[str, ModelAllocation],
    component_placement: Mapping[str, PlacementValue],
    rules: Rules = Rules(),
) -> int:
    """Virtual GPU slots a device=cpu cluster (1 node x N) needs for this plan: the default
    placement's need, or the highest placed index + 1, whichever is larger. `all` counts as the
    largest world size placed on it."""
    placed = _keys(component_placement, list(allocs))
    fixed: dict[str, tuple[int, ...]] = {}
    everywhere = [name for name, (_, text) in placed.items() if text.strip().lower() == "all"]
    span = max((allocs[name].world_size for name in everywhere), default=0)
    for name, (key, text) in placed.items():
        fixed[name] = (
            tuple(range(span)) if name in everywhere else parse_gpu_set(text, UNBOUNDED, key=key)
        )
    used = {g for gpus in fixed.values() for g in gpus}
    gpus = _fill(allocs, fixed, _free(used, None), rules)
    return max((max(s) + 1 for s in gpus.values() if s), default=1)


def offload_option(name: str) -> str:
    """The override that turns offload on for `name` (what the sharing warning suggests)."""
    kind = builtin_kind(name)
    if kind is None:
        return f"components.{name}.offload=true"
    return f"{name}.offload=true" if kind == SERVE else f"{name}.offload.weight=true"


def _words(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _shortage(
    allocs: Mapping[str, ModelAllocation],
    fixed: Mapping[str, tuple[int, ...]],
    cluster: ClusterSpec,
    more_nodes: bool,
) -> PlacementError:
    parts: list[str] = []
    need = 0
    for name, alloc in allocs.items():
        if name in fixed or _shares_policy(name, allocs, fixed):
            continue
        parts.append(f"{name} {alloc} needs {alloc.world_size}" + (" GPUs" if not parts else ""))
        need += alloc.world_size
    taken = sorted({g for s in fixed.values() for g in s})
    if taken:
        parts.append(f"cluster.component_placement takes {len(taken)} ({format_gpu_set(taken)})")
        need += len(taken)
    nodes = "node" if cluster.num_nodes == 1 else "nodes"
    have = (
        f"the cluster has {cluster.total_gpus} ({cluster.num_nodes} {nodes} x "
        f"{cluster.gpus_per_node})"
    )
    return PlacementError(
        f"{_words(parts)}: {need} in all, but {have} ({_fixes(allocs, cluster, need, more_nodes)})"
    )


def _fixes(
    allocs: Mapping[str, ModelAllocation], cluster: ClusterSpec, need: int, more_nodes: bool
) -> str:
    """Only advice that works where the run goes: more nodes where the runner can add them;
    on this machine, engines that fit, or engines that share the GPUs."""
    if more_nodes:
        more = math.ceil(need / cluster.gpus_per_node)
        return f"set cluster.num_nodes={more}, or use smaller backends"
    total = cluster.total_gpus
    names = [n for n in allocs if n in (PRIMARY, POLICY)] or list(allocs)
    share = " ".join(
        f"cluster.component_placement.{n}=all" for n in names if allocs[n].world_size == total
    )
    shared = (
        (
            f"or let engines share the GPUs, each releasing memory between phases: {share} "
            f"{' '.join(offload_option(n) for n in names)}"
        )
        if share
        else ""
    )
    if cluster.device == "cpu":
        return "raise cluster.gpus_per_node or leave it unset" + (
            f", {shared}" if shared else ", or use smaller backends"
        )
    big = [n for n, a in allocs.items() if a.world_size > total]
    if big:
        sizes = " ".join(f"{n}.backend={a.backend}:d{total}" for n, a in allocs.items() if n in big)
        return (
            f"on {total} GPU(s) with the local runner: use backends that fit, e.g. {sizes}; a "
            "bigger layout needs launcher=slurm or launcher=ray"
        )
    tail = f", {shared}" if shared else ""
    return f"on {total} GPU(s) with the local runner: use smaller backends{tail}"


def _mode(gpus: Mapping[str, tuple[int, ...]]) -> str:
    distinct = {frozenset(s) for s in gpus.values()}
    if len(gpus) > 1 and len(distinct) == 1:
        return "collocated"
    if sum(len(s) for s in distinct) == len(frozenset().union(*distinct)):
        return "disaggregated"
    return "hybrid"


def _sharing_warnings(
    gpus: Mapping[str, tuple[int, ...]],
    offload: Mapping[str, bool],
    together: frozenset[frozenset[str]] = frozenset(),
) -> list[str]:
    """One warning per group of engines linked by shared GPUs where offload is not on for all.
    `together`: pairs that run in one process (a torchrun job serving both, as actor and ref
    on the same GPUs): they hold their memory together, which the memory check counts."""
    names = list(gpus)
    sets = {n: set(gpus[n]) for n in names}
    group_of = {n: {n} for n in names}
    overlaps: list[tuple[str, str, set[int]]] = []
    for a, b in itertools.combinations(names, 2):
        both = sets[a] & sets[b]
        if both and frozenset((a, b)) not in together:
            overlaps.append((a, b, both))
            merged = group_of[a] | group_of[b]
            for n in merged:
                group_of[n] = merged
    out, seen = [], []
    for n in names:
        group = group_of[n]
        if len(group) < 2 or group in seen:
            continue
        seen.append(group)
        lacking = [m for m in names if m in group and not offload.get(m, False)]
        if lacking:
            pairs = [
                f"{a} and {b} share GPUs {format_gpu_set(sorted(both))}"
                for a, b, both in overlaps
                if a in group
            ]
            out.append(
                f"{'; '.join(pairs)}: without offload they compete for GPU memory "
                f"(set {' '.join(offload_option(m) for m in lacking)})"
            )
    return out


def place(
    allocs: Mapping[str, ModelAllocation],
    cluster: ClusterSpec,
    component_placement: Mapping[str, PlacementValue],
    offload: Optional[Mapping[str, bool]] = None,
    more_nodes: bool = True,
    workers: Optional[Mapping[str, tuple[int, ...]]] = None,
    rules: Rules = Rules(),
) -> Placement:
    """GPUs for every engine in `allocs` (the active ones). `workers`: the GPUs the worker
    components were placed on (they count for the sharing warnings and idle GPUs, not the
    mode: that is the engines'; `offload` holds theirs too).

    Raises PlacementError for anything that cannot run: sets outside the cluster, a set whose
    size is not the engine's world size, too few GPUs, an instance or tp group across a node.
    """
    fixed = _fixed(allocs, cluster, component_placement)
    gpus, wrapped = _filled(allocs, cluster, fixed, rules, more_nodes)
    for name, alloc in allocs.items():
        check = check_inference if alloc.is_inference else check_training
        check(name, alloc, gpus[name], cluster)
    every = {**gpus, **{n: g for n, g in (workers or {}).items() if g}}
    warnings = [_wrapped(gpus, cluster)] if wrapped else []
    together = frozenset(
        frozenset((a, b))
        for a, b in itertools.combinations(allocs, 2)
        if gpus[a] == gpus[b]
        and allocs[a].kind == allocs[b].kind == TRAIN
        and allocs[a].backend == allocs[b].backend
    )
    warnings += _sharing_warnings(every, offload or {}, together)
    warnings += _idle(every, cluster)
    return Placement(gpus=gpus, mode=_mode(gpus), warnings=tuple(warnings))


def _fixed(
    allocs: Mapping[str, ModelAllocation],
    cluster: ClusterSpec,
    component_placement: Mapping[str, PlacementValue],
) -> dict[str, tuple[int, ...]]:
    """The GPUs of the engines placed by hand, each set of its engine's world size."""
    fixed: dict[str, tuple[int, ...]] = {}
    for name, (key, text) in _keys(component_placement, list(allocs)).items():
        fixed[name] = parse_gpu_set(text, cluster, key=key)
        alloc = allocs[name]
        if len(fixed[name]) != alloc.world_size:
            raise PlacementError(
                f"cluster.component_placement.{key}={text!r} gives {name} {alloc} "
                f"{len(fixed[name])} GPUs ({format_gpu_set(fixed[name])}), but its world size "
                f"is {alloc.world_size} (place it on {alloc.world_size} GPUs or change "
                f"{name}.backend)"
            )
    return fixed


def _filled(
    allocs: Mapping[str, ModelAllocation],
    cluster: ClusterSpec,
    fixed: Mapping[str, tuple[int, ...]],
    rules: Rules,
    more_nodes: bool,
) -> tuple[dict[str, tuple[int, ...]], bool]:
    """Every engine's GPUs, and whether they were handed out in turn (oversubscribed)."""
    used = {g for gpus in fixed.values() for g in gpus}
    gpus = _fill(allocs, fixed, _free(used, cluster.total_gpus), rules)
    short = any(len(gpus[name]) < alloc.world_size for name, alloc in allocs.items())
    wrapped = (
        rules.oversubscribe
        and short
        and all(a.world_size <= cluster.total_gpus for a in allocs.values())
    )
    if wrapped:
        gpus = _fill(allocs, fixed, _in_turn(used, cluster.total_gpus), rules)
    elif short:
        raise _shortage(allocs, fixed, cluster, more_nodes)
    return gpus, wrapped


def _wrapped(gpus: Mapping[str, tuple[int, ...]], cluster: ClusterSpec) -> str:
    return (
        f"cluster.oversubscribe: the engines ask more than the {cluster.total_gpus} GPU(s) "
        "here, so they are handed out in turn and wrap around: "
        + ", ".join(f"{n} {format_gpu_set(g)}" for n, g in gpus.items())
    )


def _idle(every: Mapping[str, tuple[int, ...]], cluster: ClusterSpec) -> list[str]:
    busy = set().union(*map(set, every.values())) if every else set()
    idle = [g for g in range(cluster.total_gpus) if g not in busy]
    if not idle:
        return []
    fix = (
        "lower cluster.num_nodes, use larger backends"
        if cluster.num_nodes > 1
        else "use larger backends"
    )
    return [
        f"{len(idle)} of {cluster.total_gpus} GPUs are idle ({format_gpu_set(idle)}): no "
        f"engine is placed on them ({fix} or place an engine there)"
    ]
