"""What every inference server shares: names, bind address, GPUs per node, environment.

A rollout instance runs one server process per node it spans; the first node's process serves
the HTTP API (its address goes to the trainers), the others join it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from launcher.engines.context import LaunchContext
from launcher.engines.options import layered_env, served_model_name
from launcher.plan import ComponentPlan, Instance, Plan, ProcessSpec

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class ServerSet:
    """The servers of one rollout component and what trainers and the user learn from them."""

    processes: list[ProcessSpec] = field(default_factory=list)
    addrs: list[str] = field(default_factory=list)  # host:port per instance, instance order
    warnings: list[str] = field(default_factory=list)


def process_name(comp: ComponentPlan, inst: Instance, node: int) -> str:
    """`rollout-<i>`, or `rollout-<i>-node<k>` (k: the cluster node) for multi-node instances."""
    base = f"{comp.name}-{inst.index}"
    return base if len(inst.nodes) == 1 else f"{base}-node{node}"


def bind_address(host: str) -> str:
    """Loopback stays loopback (a local run exposes nothing); a real node address listens on
    all interfaces, so trainers on other nodes reach it whatever the name resolves to."""
    return host if host in LOOPBACK else "0.0.0.0"


def local_gpus(plan: Plan, inst: Instance, node: int) -> tuple[int, ...]:
    """The instance's GPUs on `node`, as node-local indices (CUDA_VISIBLE_DEVICES order)."""
    cluster = plan.cluster
    return tuple(cluster.local_of(g) for g in inst.gpus if cluster.node_of(g) == node)


def server_env(plan: Plan, cfg: Any, ctx: LaunchContext, comp: ComponentPlan,
               gpus: tuple[int, ...], defaults: dict[str, str]) -> dict[str, str]:
    """The environment one server process gets (DESIGN §7)."""
    contract = {
        "AREAL_LAUNCH_PLAN": ctx.plan_path,
        "AREAL_RUN_DIR": ctx.run_dir,
        "AREAL_COMPONENT": comp.name,
        "AREAL_SERVED_MODEL_NAME": served_model_name(cfg, comp.backend),
        # cpu: hide any GPU the machine has, the plan put this server on CPU slots
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)) if plan.cluster.device == "cuda" else "",
    }
    return layered_env(defaults, ctx.extra_env, contract)


def health_url(host: str, port: int) -> str:
    """Where the runner polls a server before counting it up (SGLang and vLLM both serve it)."""
    return f"http://{host}:{port}/health"
