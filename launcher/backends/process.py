"""Worker processes: a declared component's plain processes (env simulators, reward functions,
agents), one per instance of its plan entry (docs/architecture.md §12).

Each runs the component's entry with its interpreter: `python ENTRY ARGS` or `python -m MODULE
ARGS`. It is told what a trainer is told of the run (the plan, the run folder, its component,
the servers' addresses) plus its index among the component's processes and, when the component
has a health path, the port it must answer on; the supervisor polls that URL like a server's
and restarts a failed worker alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from launcher.backends.common import layered_env
from launcher.backends.kinds import NoOptions, WorkerBackend
from launcher.backends.servers import local_gpus
from launcher.backends.torchrun import entry_argv
from launcher.spec.backend_facts import BUILTIN_BACKENDS
from launcher.spec.process import (
    ENV_COMPONENT,
    ENV_PLAN,
    ENV_RUN_DIR,
    ENV_SERVER_ADDRS,
    MAX_ENV_ADDRS,
    ProcessSpec,
    bind_placeholder,
    host_placeholder,
)

if TYPE_CHECKING:
    from launcher.backends.context import LaunchContext
    from launcher.planning.components import Worker
    from launcher.spec.plan import ComponentPlan, Instance, Plan

ENV_INDEX = "AREAL_WORKER_INDEX"  # this process's index among its component's
ENV_COUNT = "AREAL_WORKER_COUNT"  # how many the component has
ENV_PORT = "AREAL_WORKER_PORT"  # where it answers its health path (when it has one)
ENV_HOST = "AREAL_WORKER_HOST"  # the address to listen on


class ProcessBackend(WorkerBackend[NoOptions]):
    """A worker's options are its component's own keys (launcher.config.schema
    ComponentConfig); the backend adds none."""

    facts = BUILTIN_BACKENDS["process"]
    Options = NoOptions

    def workers(
        self,
        comp: ComponentPlan,
        plan: Plan,
        worker: Worker,
        ctx: LaunchContext,
        server_addrs: Sequence[str],
    ) -> list[ProcessSpec]:
        """One ProcessSpec per instance of the worker component."""
        addrs = ",".join(server_addrs)
        return [self._worker(comp, plan, worker, ctx, addrs, inst) for inst in comp.instances]

    def _worker(
        self,
        comp: ComponentPlan,
        plan: Plan,
        worker: Worker,
        ctx: LaunchContext,
        addrs: str,
        inst: Instance,
    ) -> ProcessSpec:
        node = inst.nodes[0]
        contract = {
            ENV_PLAN: ctx.plan_path,
            ENV_RUN_DIR: ctx.run_dir,
            ENV_COMPONENT: comp.name,
            ENV_INDEX: str(inst.index),
            ENV_COUNT: str(len(comp.instances)),
        }
        if addrs and len(addrs) <= MAX_ENV_ADDRS:
            contract[ENV_SERVER_ADDRS] = addrs
        port: Optional[int] = None
        health = None
        if worker.health_path is not None:
            port = ctx.next_port()
            contract.update({ENV_PORT: str(port), ENV_HOST: bind_placeholder(node)})
            health = f"http://{host_placeholder(node)}:{port}/{worker.health_path.lstrip('/')}"
        return ProcessSpec(
            name=f"{comp.name}-{inst.index}",
            component=comp.name,
            role="worker",
            node=node,
            argv=(ctx.python, *entry_argv(worker.entry), *worker.args),
            env=layered_env({}, {**ctx.extra_env, **worker.env}, contract),
            gpus=local_gpus(plan, inst, node),
            ports=(port,) if port is not None else (),
            health_url=health,
        )
