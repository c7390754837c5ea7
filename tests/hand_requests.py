"""Launch requests built by hand, for tests about runners rather than about engines."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Sequence

from launcher.node.runs import write_private
from launcher.spec.cluster import ClusterSpec, NodeGroup
from launcher.spec.plan import Plan
from launcher.spec.process import ProcessSpec
from launcher.spec.request import LaunchRequest


def request_for(
    run_dir: Path,
    procs: Sequence[ProcessSpec],
    *,
    num_nodes: int = 2,
    gpus_per_node: int = 8,
    device: str = "cuda",
    grace: float = 3.0,
    health: float = 600.0,
    job_name: str = "areal-test",
    console: str = "auto",
    node_groups: Sequence[NodeGroup] = (),
    cpu_nodes: int = 0,
) -> LaunchRequest:
    return LaunchRequest(
        run_id=uuid.uuid4().hex,
        run_dir=str(run_dir),
        job_name=job_name,
        device=device,
        num_nodes=num_nodes,
        gpus_per_node=gpus_per_node,
        processes=tuple(procs),
        grace_period_s=grace,
        health_timeout_s=health,
        console=console,
        node_groups=tuple(node_groups),
        cpu_nodes=cpu_nodes,
    )


def write_plan(request: LaunchRequest) -> None:
    """The plan.json a launch writes beside the request (`logs --engine` reads components)."""
    plan = Plan(
        ClusterSpec(request.num_nodes, request.gpus_per_node, request.device),
        "disaggregated",
        {},
        processes=request.processes,
    )
    Path(request.run_dir).mkdir(parents=True, exist_ok=True)
    write_private(Path(request.run_dir) / "plan.json", plan.to_json(mask_secrets=False))
