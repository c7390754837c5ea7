"""The cluster as the pure core sees it: nodes, GPUs per node, device kind, node groups.

GPUs are numbered globally over the nodes that have them: g = node * gpus_per_node + local.
Node groups (RLinf's `cluster.node_groups`, docs/architecture.md §15) label sets of nodes, may
carry their own environment and Python, and may have no GPUs: CPU-only nodes come after every
GPU node (`cpu_nodes` of the `num_nodes`), so the numbering above holds unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar, Mapping, Optional

from launcher.spec.codec import JsonRecord, json_key

ANY_NODE = "node"  # RLinf's reserved label: every node, by node rank


@dataclass(frozen=True)
class NodeGroup(JsonRecord):
    """A labelled set of nodes: its ranks, whether they have GPUs, what processes there get."""

    label: str
    nodes: tuple[int, ...]
    gpus: bool = True  # False: CPU-only nodes (reward, agent, simulator workers)
    env: Mapping[str, str] = field(default_factory=dict)  # added to every process there
    python: Optional[str] = None  # the interpreter processes there run (None: the launcher's)
    hardware: Optional[str] = None  # what the nodes are (H100, Franka, ...), for people


@dataclass(frozen=True)
class ClusterSpec(JsonRecord):
    num_nodes: int  # every node, CPU-only ones included
    gpus_per_node: int  # on each node that has GPUs
    device: str = "cuda"  # "cuda" or "cpu" (cpu: GPU slots are virtual)
    cpu_nodes: int = 0  # the last `cpu_nodes` nodes have no GPUs
    # declared node groups (none: one group of all nodes)
    groups: tuple[NodeGroup, ...] = field(default=(), metadata=json_key("node_groups"))
    JSON_OPTIONAL: ClassVar = (("cpu_nodes", "groups"),)  # written when the plan has groups

    @property
    def gpu_nodes(self) -> int:
        return self.num_nodes - self.cpu_nodes

    @property
    def total_gpus(self) -> int:
        return self.gpu_nodes * self.gpus_per_node

    def node_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_node

    def local_of(self, gpu: int) -> int:
        return gpu % self.gpus_per_node

    def group(self, label: str) -> Optional[NodeGroup]:
        return next((g for g in self.groups if g.label == label), None)

    def group_of(self, node: int) -> Optional[NodeGroup]:
        """The first declared group holding `node` (None: no group does)."""
        return next((g for g in self.groups if node in g.nodes), None)


UNBOUNDED = ClusterSpec(1, 1 << 16, "cpu")  # more virtual slots than any machine runs


@dataclass(frozen=True)
class OfferedNode:
    """One node a scheduler can give the job, as it describes the node (Slurm: its gres)."""

    name: str
    gpus: int  # 0: CPU-only
    gpu_type: Optional[str] = None  # the gres type (h100, nvidia_h100_80gb_hbm3); None: untyped


@dataclass(frozen=True)
class NodeOffer:
    """What the nodes a job may land on have, read from the scheduler (launcher.runners.
    slurmnodes: sinfo of the job's partition) so that cluster.device=auto plans for them, not
    for the machine that plans (a login node without GPUs)."""

    where: str  # for messages: "Slurm partition debug"
    nodes: tuple[OfferedNode, ...]
    unread: Optional[str] = None  # why the nodes could not be read: the plan is for this machine

    def holding(self, gpus: int) -> tuple[OfferedNode, ...]:
        """The nodes with at least `gpus` GPUs."""
        return tuple(n for n in self.nodes if n.gpus >= gpus)


def gpu_name_key(name: Optional[str]) -> str:
    """A GPU type name as compared and looked up everywhere (the memory table, a partition's
    gres type against cluster.gpu_type): lower case, separators as spaces, `80g`/`80 GB` as
    `80gb` (`NVIDIA H100 80GB HBM3`, `h100_80g`, `H100-80GB` all read `... h100 80gb ...`)."""
    text = re.sub(r"[-_/,()]", " ", (name or "").lower())
    text = re.sub(r"\b(\d+)\s*g(b)?\b", r"\1gb", text)
    return " ".join(text.split())
