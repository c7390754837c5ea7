"""`cluster.node_groups` read into NodeGroups (docs/architecture.md §15).

A group labels node ranks and says what its processes get: `env` and `python` for every node
of the group. A group is CPU-only when `gpus_per_node: 0`; `hardware` names what its nodes
drive (a robot's type). CPU-only nodes must be the last node ranks, so every GPU keeps its
global number. Pure.
"""

from __future__ import annotations

from typing import Any, Optional

from launcher.config.schema import NodeGroupConfig, typed
from launcher.spec.cluster import ANY_NODE, ClusterSpec, NodeGroup
from launcher.spec.errors import ConfigError, PlacementError
from launcher.spec.gpuset import format_gpu_set, parse_gpu_set
from launcher.spec.limits import MAX_NODES

MAX_GROUPS = 256


def node_groups(
    raw: list[Any], num_nodes: Optional[int], gpus_per_node: Optional[int]
) -> tuple[tuple[NodeGroup, ...], int, int]:
    """(the groups, how many trailing nodes are CPU-only, the node count) from what the user
    wrote; num_nodes None: the highest node rank + 1."""
    if len(raw) > MAX_GROUPS:
        raise ConfigError(f"cluster.node_groups has {len(raw)} groups; at most {MAX_GROUPS}")
    groups: list[NodeGroup] = []
    for i, item in enumerate(raw):
        where = f"cluster.node_groups[{i}]"
        cfg: NodeGroupConfig = typed(
            where, NodeGroupConfig, item, "a node group ({label: ..., node_ranks: 0-1})"
        )
        label = str(cfg.label)
        if label == ANY_NODE or not label.strip():
            raise ConfigError(
                f"{where}.label={label!r}: {ANY_NODE!r} is reserved (any node "
                "by rank) and a label is not empty; choose another"
            )
        if any(g.label == label for g in groups):
            raise ConfigError(f"{where}.label={label!r}: two groups have this label")
        nodes = _ranks(f"{where}.node_ranks", cfg.node_ranks)
        gpus = cfg.gpus_per_node
        if gpus is not None and gpus not in (0, gpus_per_node) and gpus_per_node is not None:
            raise ConfigError(
                f"{where}.gpus_per_node={gpus}: node groups with "
                f"{gpus} GPUs beside nodes with {gpus_per_node} are not supported "
                "yet (one GPU count per cluster, or 0: CPU-only)"
            )
        env = {str(k): str(v) for k, v in dict(cfg.env).items()}
        python = None if cfg.python is None else str(cfg.python)
        hardware = None if cfg.hardware is None else str(cfg.hardware)
        groups.append(NodeGroup(label, nodes, gpus != 0, env, python, hardware))
    top = max((n for g in groups for n in g.nodes), default=-1) + 1
    total = top if num_nodes is None else num_nodes
    if top > total:
        bad = next(g for g in groups if max(g.nodes) >= total)
        raise ConfigError(
            f"cluster.node_groups {bad.label!r}: node rank {max(bad.nodes)} is "
            f"outside the cluster's {total} node(s) (raise cluster.num_nodes or "
            "renumber node_ranks)"
        )
    cpu = sorted({n for g in groups if not g.gpus for n in g.nodes})
    gpu = {n for g in groups if g.gpus for n in g.nodes}
    both = sorted(gpu.intersection(cpu))
    if both:
        raise ConfigError(
            f"cluster.node_groups: node {both[0]} is in a CPU-only group and in a "
            "GPU group; a node has GPUs or not"
        )
    if cpu and cpu != list(range(total - len(cpu), total)):
        raise ConfigError(
            f"cluster.node_groups: CPU-only nodes {format_gpu_set(cpu)} must be the "
            f"last node ranks (here {format_gpu_set(range(total - len(cpu), total))}"
            "), so every GPU keeps its number: renumber node_ranks"
        )
    return tuple(groups), len(cpu), total


def _ranks(where: str, value: Any) -> tuple[int, ...]:
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value
    try:
        return parse_gpu_set(text, ClusterSpec(1, MAX_NODES, "cpu"))
    except PlacementError as exc:
        raise ConfigError(
            f"{where}={value!r}: not node ranks ({str(exc).partition(': ')[2]})"
        ) from None
