"""What every inference backend's servers share as data: the HTTP endpoints the recipe and the
launcher call on a server, the servers of one component, their names and their GPUs per node
(the behaviour they share is launcher.backends.kinds.ServeBackend's).

A rollout instance runs one server process per node it spans; the first node's process serves
the HTTP API (its address goes to the trainers), the others join it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional

from launcher.spec.process import bind_placeholder

if TYPE_CHECKING:
    from launcher.spec.plan import ComponentPlan, Instance, Plan
    from launcher.spec.process import ProcessSpec


@dataclass(frozen=True)
class HttpCall:
    """One HTTP POST of a weight push: its path and JSON body, where the strings "{dir}" and
    "{version}" stand for the weights' folder and label; `success`: what the reply must say
    ("": nothing, "required": {"success": true}, "not-false": not {"success": false})."""

    path: str
    body: Optional[Mapping[str, Any]] = None
    success: str = ""


@dataclass(frozen=True)
class ServerClient:
    """A server's HTTP endpoints, beyond OpenAI's, as the launcher and the recipe call them:
    its health probe; the calls that free its GPU memory between phases (collocated runs) and
    take it back, which need `release_flag` at start; the weight push (`pause`, then `push` in
    order, then `unpause`, also after a failed
    push); the GET endpoints that tell the weights' label, tried in order; what a completion
    request adds to get token ids back; and a native generate endpoint (SGLang's /generate
    form: output ids and meta_info.output_token_logprobs), None: greedy uses completions."""

    health: str
    release: str
    resume: str
    release_flag: str
    push: tuple[HttpCall, ...] = ()
    pause: Optional[str] = None
    unpause: Optional[str] = None
    weight_version: tuple[str, ...] = ()
    completion_extra: Mapping[str, Any] = field(default_factory=dict)
    generate: Optional[str] = None
    cpu_keeps_memory: str = ""  # why its CPU build cannot release memory ("": it can)


@dataclass
class ServerSet:
    """The servers of one rollout component and what trainers and the user learn from them."""

    processes: list["ProcessSpec"] = field(default_factory=list)
    addrs: list[str] = field(default_factory=list)  # host:port per instance, instance order
    warnings: list[str] = field(default_factory=list)


def process_name(comp: "ComponentPlan", inst: "Instance", node: int) -> str:
    """`rollout-<i>`, or `rollout-<i>-node<k>` (k: the cluster node) for multi-node instances."""
    base = f"{comp.name}-{inst.index}"
    return base if len(inst.nodes) == 1 else f"{base}-node{node}"


def local_gpus(plan: "Plan", inst: "Instance", node: int) -> tuple[int, ...]:
    """The instance's GPUs on `node`, as node-local indices (CUDA_VISIBLE_DEVICES order)."""
    cluster = plan.cluster
    return tuple(cluster.local_of(g) for g in inst.gpus if cluster.node_of(g) == node)


def listen_args(node: int, port: int) -> list[str]:
    """`--host <bind address of the node> --port <port>`: both servers spell them so."""
    return ["--host", bind_placeholder(node), "--port", str(port)]
