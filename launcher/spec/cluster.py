"""The cluster as the pure core sees it: node count, GPUs per node, device kind.

GPUs are numbered globally: g = node * gpus_per_node + local.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterSpec:
    num_nodes: int
    gpus_per_node: int
    device: str = "cuda"  # "cuda" or "cpu" (cpu: GPU slots are virtual)

    @property
    def total_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def node_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_node

    def local_of(self, gpu: int) -> int:
        return gpu % self.gpus_per_node

    def to_dict(self) -> dict:
        return {"num_nodes": self.num_nodes, "gpus_per_node": self.gpus_per_node, "device": self.device}
