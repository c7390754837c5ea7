"""Placement forms, read into GPU sets and process maps (docs/architecture.md §15).

A value of `cluster.component_placement.<key>` is one of:
- a GPU set: `all`, `a-b`, `a`, `0-2,5,7` (launcher.spec.gpuset), global over the GPU nodes;
- a process map `GPUS:PROCESSES`: `0-3:0-7` is 8 processes on 4 GPUs (2 a GPU), `0-1:0` one
  process on GPUs 0 and 1; on a CPU-only node group the left side counts the group's nodes
  (`0-1:0-199`: processes 0-199 on its first two nodes);
- the dict form `{node_group: LABEL, placement: ...}`, where the placement counts the group's
  own GPUs (or nodes), or a list of those for one component over several groups, each list
  item's processes numbered on from the last.
`node` is a reserved label: any node by its rank, CPU processes only.
Pure: the cluster comes in as a ClusterSpec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from launcher.spec.cluster import ANY_NODE, UNBOUNDED, ClusterSpec, NodeGroup
from launcher.spec.errors import PlacementError
from launcher.spec.gpuset import format_gpu_set, parse_gpu_set

MAX_MAPPED = 1 << 20  # processes in one process map: bounded before any list is built
Run = tuple[tuple[int, ...], int, int]  # (GPUs, node, how many processes hold them)


@dataclass(frozen=True)
class Placed:
    """Where one component goes: its GPUs (global; empty: CPU-only) and its processes as runs
    of processes that hold the same GPUs on the same node (a hundred agents a node: one run)."""

    key: str  # the placement key, for messages (`env`, `actor,rollout`)
    text: str  # as the user wrote it, for messages
    gpus: tuple[int, ...]
    runs: tuple[Run, ...]
    mapped: bool  # written as a process map (or on a CPU-only group)

    @property
    def cpu_only(self) -> bool:
        return not self.gpus

    @property
    def processes(self) -> int:
        return sum(r[2] for r in self.runs)

    @property
    def gpus_per_process(self) -> int:
        return max((len(r[0]) for r in self.runs), default=1)


def shown(value: Any) -> str:
    """A placement value as the user would write it on the command line."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return str(value)


def _fail(key: str, value: Any, problem: str, fix: str) -> PlacementError:
    return PlacementError(f"cluster.component_placement.{key}={shown(value)}: {problem} ({fix})")


def read_placement(key: str, value: Any, cluster: ClusterSpec) -> Placed:
    """One placement value in any of the forms above; PlacementError naming the text."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise _fail(
            key, value, "an empty list", "give a GPU set or {node_group: ..., placement: ...} items"
        )
    gpus: list[int] = []
    runs: list[Run] = []
    mapped = False
    for item in items:
        label, text = _label_and_text(key, item, cluster)
        part = _one(key, item, label, text, cluster)
        first, done = _first_process(text), sum(r[2] for r in runs)
        if first is not None and first != done:
            word = "placed twice" if first < done else "left out"
            span = f"{first}-{done - 1}" if first < done else f"{done}-{first - 1}"
            raise _fail(
                key,
                value,
                f"processes {span} are {word}",
                f"number each item's processes on from the last one's (here from {done})",
            )
        for g in part.gpus:
            if g in gpus:
                raise _fail(key, value, f"GPU {g} is placed twice", "give each item its own GPUs")
        gpus += part.gpus
        runs += part.runs
        mapped = mapped or part.mapped
        if sum(r[2] for r in runs) > MAX_MAPPED:
            raise _fail(key, value, f"more than {MAX_MAPPED} processes", "use fewer")
    if gpus and len({bool(r[0]) for r in runs}) > 1:
        raise _fail(
            key,
            value,
            "mixes GPU and CPU-only items",
            "place a component on GPUs or on CPU-only nodes, not both",
        )
    return Placed(key, shown(value), tuple(gpus), tuple(runs), mapped)


def _label_and_text(key: str, item: Any, cluster: ClusterSpec) -> tuple[Optional[str], str]:
    if isinstance(item, Mapping):
        unknown = sorted(set(map(str, item)) - {"node_group", "placement"})
        if unknown or "placement" not in item:
            raise _fail(
                key,
                item,
                f"unknown key {unknown[0]!r}" if unknown else "no placement",
                "write {node_group: LABEL, placement: 0-3}",
            )
        label = item.get("node_group")
        label = None if label is None else str(label)
        if label is not None and label != ANY_NODE and cluster.group(label) is None:
            known = ", ".join([g.label for g in cluster.groups] + [ANY_NODE])
            raise _fail(
                key,
                item,
                f"unknown node group {label!r}",
                f"declare it in cluster.node_groups, or use one of: {known}",
            )
        return label, _text(key, item["placement"])
    return None, _text(key, item)


def _text(key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _fail(
            key,
            value,
            "not a GPU set or process map",
            "write all, a-b, a list like 0-2,5,7, or GPUS:PROCESSES like 0-3:0-7",
        )
    return str(value).strip()


def _one(key: str, item: Any, label: Optional[str], text: str, cluster: ClusterSpec) -> Placed:
    left, colon, right = text.partition(":")
    group = cluster.group(label) if label is not None else None
    cpu = label == ANY_NODE or (group is not None and not group.gpus)
    if cpu:
        nodes = _nodes(key, item, left, label, group, cluster)
        count = len(nodes) if not colon else _count(key, item, right)
        return Placed(key, text, (), _spread(key, item, [((), n) for n in nodes], count), True)
    universe = _gpu_universe(group, cluster)
    local = (
        parse_gpu_set(left, ClusterSpec(1, len(universe), cluster.device), key=key)
        if universe
        else ()
    )
    if not universe:
        raise _fail(key, item, "the cluster has no GPUs", "place it on a CPU-only group")
    gpus = tuple(universe[i] for i in local)
    if not colon:
        return Placed(key, text, gpus, tuple(((g,), cluster.node_of(g), 1) for g in gpus), False)
    count = _count(key, item, right)
    slots = [((g,), cluster.node_of(g)) for g in gpus]
    return Placed(key, text, gpus, _spread(key, item, slots, count, cluster), True)


def _gpu_universe(group: Optional[NodeGroup], cluster: ClusterSpec) -> list[int]:
    """The global GPUs a placement's local indices count: the group's nodes' GPUs in order,
    or every GPU node's."""
    g = cluster.gpus_per_node
    nodes = group.nodes if group is not None else range(cluster.gpu_nodes)
    return [n * g + i for n in nodes for i in range(g)]


def _nodes(
    key: str,
    item: Any,
    text: str,
    label: Optional[str],
    group: Optional[NodeGroup],
    cluster: ClusterSpec,
) -> list[int]:
    pool = list(group.nodes) if group is not None else list(range(cluster.num_nodes))
    where = f"node group {label!r}" if label != ANY_NODE else "the cluster"
    try:
        local = parse_gpu_set(text, ClusterSpec(1, len(pool), cluster.device), key=key)
    except PlacementError:
        raise _fail(
            key,
            item,
            f"{text!r} is not a node range of {where}, which has {len(pool)} node(s)",
            f"count its nodes from 0 to {len(pool) - 1}",
        ) from None
    return [pool[i] for i in local]


def _first_process(text: str) -> Optional[int]:
    """The first process a process map names (None: not a map)."""
    left, colon, right = text.partition(":")
    head = right.strip().split("-")[0].strip()
    return int(head) if colon and head.isdigit() and len(head) <= 7 else None


def _count(key: str, item: Any, text: str) -> int:
    """How many processes PROCESSES names: a contiguous range from 0 (`0-7`) or one (`0`)."""
    try:
        procs = parse_gpu_set(text, ClusterSpec(1, MAX_MAPPED, "cpu"), key=key)
    except PlacementError:
        raise _fail(
            key, item, f"{text!r} is not a process range", "write 0-7 (processes 0 to 7)"
        ) from None
    if procs != tuple(range(procs[0], procs[0] + len(procs))):
        raise _fail(key, item, f"processes {text} are not contiguous", "write a range a-b")
    return len(procs)


def _spread(
    key: str,
    item: Any,
    slots: Sequence[tuple[tuple[int, ...], int]],
    count: int,
    cluster: Optional[ClusterSpec] = None,
) -> tuple[Run, ...]:
    """`count` processes over `slots` (GPUs, or CPU nodes): several a slot in blocks, or for
    GPUs several slots a process (one node each)."""
    n = len(slots)
    if count >= n:
        if count % n:
            raise _fail(
                key,
                item,
                f"{count} processes do not divide evenly over {n} {'GPUs' if cluster else 'nodes'}",
                f"use a multiple of {n}",
            )
        return tuple((gpus, node, count // n) for gpus, node in slots)
    if cluster is None:  # CPU nodes: a process runs on one node
        raise _fail(
            key,
            item,
            f"{count} processes on {n} nodes",
            f"give each node a process at least (processes 0-{n - 1})",
        )
    if n % count:
        raise _fail(
            key,
            item,
            f"{n} GPUs do not divide evenly over {count} processes",
            "give each process the same number of GPUs",
        )
    per = n // count
    out = []
    for j in range(count):
        block = tuple(g for s in slots[j * per : (j + 1) * per] for g in s[0])
        nodes = {cluster.node_of(g) for g in block}
        if len(nodes) > 1:
            raise _fail(
                key,
                item,
                f"process {j} would hold GPUs {format_gpu_set(block)} on {len(nodes)} nodes",
                "a process's GPUs sit on one node",
            )
        out.append((block, cluster.node_of(block[0]), 1))
    return tuple(out)


def engine_sets(
    raw: Mapping[str, Any], cluster: ClusterSpec
) -> tuple[dict[str, Any], dict[str, int]]:
    """The engines' placement (key -> value, comma keys kept) with those forms turned into
    global GPU sets that launcher.planning.placement reads, and for each engine written as a
    process map the GPUs each process holds. A training engine runs one rank per GPU and
    nothing of an engine runs CPU-only."""
    out: dict[str, Any] = {}
    per_process: dict[str, int] = {}
    for key, value in raw.items():
        if value is None or (
            isinstance(value, (str, int)) and not isinstance(value, bool) and ":" not in str(value)
        ):
            out[key] = value  # a plain GPU set: placement reads it (and says what is wrong)
            continue
        placed = read_placement(key, value, cluster)
        if placed.cpu_only:
            raise _fail(
                key,
                value,
                f"{key} runs on GPUs, but this is a CPU-only placement",
                "place it on a node group with GPUs",
            )
        if placed.mapped:
            for name in (p.strip() for p in key.split(",")):
                per_process[name] = placed.gpus_per_process
                if placed.processes > len(placed.gpus):
                    raise _fail(
                        key,
                        value,
                        f"{name} runs one process per GPU or fewer",
                        f"give it processes 0-{len(placed.gpus) - 1} at most",
                    )
        out[key] = format_gpu_set(placed.gpus)
    return out, per_process


def virtual_slots(placement: Mapping[str, Any]) -> int:
    """The GPU slots a CPU run's plain placements name (the highest index + 1; `all` and
    node-group items name none of their own)."""
    top = 0
    for key, value in placement.items():
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            continue
        left = str(value).partition(":")[0].strip()
        if left.lower() == "all" or not left:
            continue
        gpus = parse_gpu_set(left, UNBOUNDED, key=key)
        top = max(top, gpus[-1] + 1)
    return top
