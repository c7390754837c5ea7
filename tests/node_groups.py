"""The node groups of the end-to-end runs on the Slurm and Ray test clusters' CPU-only nodes
(tests/test_slurm.py, tests/test_ray.py): the overrides, and what the workers reported."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def group_overrides(tmp_path: Path, cpu_options: str) -> tuple[list[str], Path]:
    """The end-to-end runs' node groups: plan nodes 0-1 with GPUs, plan node 2 CPU-only with an
    environment variable and an interpreter of its own (a link to this one, by another path),
    two reward workers there (tests/node_report_worker.py: where it ran, what it got)."""
    python = tmp_path / "groupbin" / "python3"
    python.parent.mkdir()
    python.symlink_to(sys.executable)
    return [
        "cluster.num_nodes=3",
        "cluster.node_groups=[{label: gpu, node_ranks: 0-1}, {label: cpu, node_ranks: 2, "
        f"gpus_per_node: 0, python: {python}, env: {{GROUP_ROLE: reward}}}}]",
        "cluster.component_placement.reward={node_group: cpu, placement: '0:0-1'}",
        f"reward.entry={ROOT / 'tests' / 'node_report_worker.py'}",
        "reward.health_path=/health",
        cpu_options,
    ], python


def node_reports(run_dir: Path) -> dict:
    return {p.stem: json.loads(p.read_text()) for p in (run_dir / "node-report").glob("*.json")}
