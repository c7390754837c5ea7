"""Trainer jobs: training engines -> one `python -m torch.distributed.run` per node of each job.

Engines placed on the same GPU set whose command lines would be identical (same backend, same
engine flags and extra_args) share ONE torchrun job (AREAL_COMPONENT=actor,ref): the entry point
builds both models in the same workers. Any other engine gets a job of its own.

Rendezvous is static (`--rdzv-backend static`, torchrun's default, said explicitly): the
launcher knows each node's rank, and c10d would order nodes by join time and ignore
--node-rank (reference/torch-cpu.md). The master is the job's first node; its port is reserved.
Each node's workers see that node's GPUs of the job in rank order (CUDA_VISIBLE_DEVICES), so
torchrun's local rank i is the plan's i-th rank on that node.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from launcher.backends.common import layered_env
from launcher.backends.kinds import train_backend
from launcher.spec.process import (
    ENV_COMPONENT,
    ENV_PLAN,
    ENV_RUN_DIR,
    ENV_SERVED_MODEL,
    ENV_SERVER_ADDRS,
    MAX_ENV_ADDRS,
    ProcessSpec,
    host_placeholder,
)
from launcher.spec.registry import TRAIN

if TYPE_CHECKING:
    from launcher.backends.context import LaunchContext
    from launcher.planning.resolve import Engine
    from launcher.spec.plan import ComponentPlan, Plan

MODULE = "torch.distributed.run"


@dataclass(frozen=True)
class TrainerJob:
    """One torchrun job: the engines it serves and, per node, the local GPUs in rank order."""

    components: tuple[str, ...]
    backend: str
    nodes: tuple[tuple[int, tuple[int, ...]], ...]  # (cluster node, local GPUs in rank order)
    args: tuple[str, ...]  # the engine's flags and extra_args, after the entry's own args

    @property
    def label(self) -> str:
        return "+".join(self.components)


def trainer_jobs(plan: "Plan", engines: Mapping[str, "Engine"]) -> list[TrainerJob]:
    """Training engines grouped into torchrun jobs, in engine order (actor first)."""
    jobs: dict[tuple, TrainerJob] = {}
    for comp in plan.components.values():
        if comp.kind != TRAIN:
            continue
        engine = engines[comp.name]
        backend = train_backend(comp.backend)
        args = tuple(backend.engine_args(comp, engine) + backend.user_flags(engine))
        key = (tuple(comp.gpus), comp.backend, args)
        if key in jobs:
            job = jobs[key]
            jobs[key] = dataclasses.replace(job, components=job.components + (comp.name,))
        else:
            jobs[key] = TrainerJob((comp.name,), comp.backend, rank_layout(plan, comp), args)
    return list(jobs.values())


def rank_layout(plan: "Plan", comp: "ComponentPlan") -> tuple[tuple[int, tuple[int, ...]], ...]:
    """(node, local GPUs) in rank order; torchrun gives each node one block of ranks."""
    if comp.ranks:
        placed = [(r.node, r.local_gpu) for r in sorted(comp.ranks, key=lambda r: r.rank)]
    else:
        placed = [(plan.cluster.node_of(g), plan.cluster.local_of(g)) for g in comp.gpus]
    layout: list[tuple[int, list[int]]] = []
    seen: set[int] = set()
    for node, gpu in placed:
        if layout and layout[-1][0] == node:
            layout[-1][1].append(gpu)
        elif node in seen:  # ranks.py keeps ranks node-contiguous
            raise AssertionError(f"{comp.name}: ranks on node {node} are not contiguous")
        else:
            seen.add(node)
            layout.append((node, [gpu]))
    return tuple((node, tuple(gpus)) for node, gpus in layout)


def entry_argv(entry: str) -> list[str]:
    """trainer.entry: a script path, or `-m package.module` (torchrun's own -m)."""
    entry = str(entry).strip()
    return entry.split() if entry.startswith("-m ") else [entry]


def entry_in(argv: Sequence[str]) -> tuple[str, ...]:
    """What a process's argv runs: `("-m", module)` or `(script,)`; a trainer's, its entry
    after torchrun's own flags (each `--flag value`, as trainer_processes writes them)."""
    rest = list(argv[1:])
    if rest[:2] == ["-m", MODULE]:
        rest = rest[2:]
        while len(rest) > 1 and rest[0].startswith("--"):
            rest = rest[2:]
    if rest[:1] == ["-m"]:
        return tuple(rest[:2]) if len(rest) > 1 else ()
    return tuple(rest[:1])


def trainer_processes(
    plan: "Plan",
    engines: Mapping[str, "Engine"],
    entry: str,
    entry_args: Sequence[str],
    ctx: "LaunchContext",
    server_addrs: Mapping[str, Sequence[str]],
    served_model: Optional[str],
) -> list[ProcessSpec]:
    """One ProcessSpec per node of each trainer job, told the servers it pushes weights to
    (AREAL_LLM_SERVER_ADDRS; every server where it feeds none). `server_addrs`: serving
    component -> its addresses. `served_model` is None without servers."""
    out: list[ProcessSpec] = []
    for job in trainer_jobs(plan, engines):
        fed = [w.dst for w in plan.weight_sync if w.src in job.components]
        # longer lists: trainers read them from the plan (runtime)
        addrs = ",".join(
            a for name in (fed or list(server_addrs)) for a in server_addrs.get(name, ())
        )
        contract = {
            **ctx.trainer_env,
            ENV_PLAN: ctx.plan_path,
            ENV_RUN_DIR: ctx.run_dir,
            ENV_COMPONENT: ",".join(job.components),
        }
        if served_model is not None:
            if len(addrs) <= MAX_ENV_ADDRS:
                contract[ENV_SERVER_ADDRS] = addrs
            contract[ENV_SERVED_MODEL] = served_model
        tail = entry_argv(entry) + list(entry_args) + list(job.args)
        out += job_processes(job, plan.cluster.device, ctx, tail, contract)
    return out


def job_processes(
    job: TrainerJob,
    device: str,
    ctx: "LaunchContext",
    tail: Sequence[str],
    contract: Mapping[str, str],
) -> list[ProcessSpec]:
    """The torchrun of each node of `job`, `tail` (the entry, its args, the engine's flags)
    after torchrun's own flags, the launcher's `contract` above the user's environment."""
    master = host_placeholder(job.nodes[0][0])
    port = ctx.next_port()
    defaults = {"OMP_NUM_THREADS": "1"} if device == "cpu" else {}
    defaults.update(train_backend(job.backend).engine_env(device))
    env = layered_env(defaults, ctx.env_for(*job.components), contract)
    out = []
    for rank, (node, gpus) in enumerate(job.nodes):
        log_dir = f"{ctx.run_dir}/torchrun/{job.label}-node{node}"  # error files per rank
        argv = [
            ctx.python,
            "-m",
            MODULE,
            "--nnodes",
            str(len(job.nodes)),
            "--node-rank",
            str(rank),
            "--nproc-per-node",
            str(len(gpus)),
            "--master-addr",
            master,
            "--master-port",
            str(port),
            "--rdzv-backend",
            "static",
            "--log-dir",
            log_dir,
            *tail,
        ]
        out.append(
            ProcessSpec(
                name=f"{job.label}-node{node}",
                component=",".join(job.components),
                role="trainer",
                node=node,
                argv=tuple(argv),
                env=dict(env),
                gpus=gpus,
                ports=(port,) if rank == 0 else (),
                health_url=None,
            )
        )
    return out
