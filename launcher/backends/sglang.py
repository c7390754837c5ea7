"""SGLang rollout servers: one `python -m sglang.launch_server` per instance and node.

Never `--dp-size`: SGLang refuses multi-node data-parallel replicas, so the backend string's
`d` becomes d separate servers, each on its own GPUs (CUDA_VISIBLE_DEVICES), each with its own
ports. Attention-DP and expert parallel live *inside* one instance and pass through.

Ports, all drawn from ctx (reserved, so two launches never collide):
- `--port`: HTTP (node 0); followers serve a bare /health on the same port on their node.
- `--nccl-port`: torch.distributed init of a single-node instance (SGLang would pick a random
  free port otherwise, found now and bound later: a race between launches).
- `--dist-init-addr <first node>:D` for multi-node instances and for attention-DP: SGLang then
  derives its ZMQ ports from D as D+1..D+6 (without the flag attention-DP uses port+233.., which
  nobody reserved), so we reserve D..D+6 in a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from launcher.backends.common import launcher_owned
from launcher.backends.kinds import ServeBackend
from launcher.backends.servers import HttpCall, ServerClient, ServerSet, listen_args
from launcher.spec.backend_facts import BUILTIN_BACKENDS
from launcher.spec.errors import ConfigError
from launcher.spec.process import host_placeholder

if TYPE_CHECKING:
    from launcher.backends.context import LaunchContext
    from launcher.planning.resolve import Engine
    from launcher.spec.plan import ComponentPlan, Plan


@dataclass
class SGLangOptions:
    """Flags for `python -m sglang.launch_server` (rollout.sglang.*); None: SGLang's default."""

    mem_fraction_static: Optional[float] = None
    dtype: Optional[str] = None
    context_length: Optional[int] = None
    served_model_name: Optional[str] = None
    # dp attention and expert parallel *inside* one instance: do not change the GPU count
    enable_dp_attention: bool = False
    attn_dp_size: Optional[int] = None
    ep_size: Optional[int] = None
    enable_memory_saver: bool = False
    skip_server_warmup: bool = False
    watchdog_timeout: Optional[float] = None
    log_level: Optional[str] = None


DIST_INIT_PORTS = 7  # the dist-init port and the six SGLang derives from it (+1..+6)
# rollout.sglang.<option> -> flag (None: not passed, SGLang's default)
VALUE_FLAGS = (
    ("mem_fraction_static", "--mem-fraction-static"),
    ("dtype", "--dtype"),
    ("context_length", "--context-length"),
    ("ep_size", "--ep-size"),
    ("watchdog_timeout", "--watchdog-timeout"),
    ("log_level", "--log-level"),
)
SWITCHES = (("skip_server_warmup", "--skip-server-warmup"),)
_COUNT = (
    "would change the GPU count of an instance: set replicas with the backend string's d "
    "and GPUs per replica with t/p (rollout.backend=sglang:d4t2); attention-DP inside an "
    "instance is rollout.sglang.attn_dp_size"
)
COUNT_FLAGS = (
    "--dp-size",
    "--data-parallel-size",
    "--tp-size",
    "--tensor-parallel-size",
    "--pp-size",
    "--pipeline-parallel-size",
)
PLAN_FLAGS = (
    "--model-path",
    "--model",
    "--host",
    "--port",
    "--nccl-port",
    "--nnodes",
    "--node-rank",
    "--dist-init-addr",
    "--nccl-init-addr",
    "--base-gpu-id",
    "--gpu-id-step",
    "--device",
)


@dataclass(frozen=True)
class InstancePorts:
    """The ports of one SGLang instance (see the module's docstring)."""

    http: int
    nccl: int
    dist: Optional[int]  # the first of DIST_INIT_PORTS in a row, when the instance needs them

    def of_rank(self, rank: int) -> tuple[int, ...]:
        """The ports the process of node rank `rank` holds (followers: their bare /health)."""
        if rank > 0:
            return (self.http,)
        dist = () if self.dist is None else tuple(range(self.dist, self.dist + DIST_INIT_PORTS))
        return (self.http, self.nccl, *dist)


class SGLangBackend(ServeBackend[SGLangOptions]):
    """SGLang's servers (see the module's docstring)."""

    facts = BUILTIN_BACKENDS["sglang"]
    Options = SGLangOptions
    module = "sglang.launch_server"
    checker = "launcher.backends.checks.check_sglang_argv"
    client = ServerClient(
        health="/health",
        release="/release_memory_occupation",
        resume="/resume_memory_occupation",
        release_flag="--enable-memory-saver",
        push=(
            HttpCall(
                "/update_weights_from_disk",
                {"model_path": "{dir}", "weight_version": "{version}"},
                success="required",
            ),
        ),
        weight_version=("/model_info", "/get_model_info"),  # /get_model_info before 0.5
        generate="/generate",
    )  # its completions carry no token ids
    refused = {
        **{flag: _COUNT for flag in COUNT_FLAGS},
        **launcher_owned(PLAN_FLAGS),
        "--served-model-name": "duplicates rollout.sglang.served_model_name; set that instead",
    }

    def servers(
        self, comp: ComponentPlan, plan: Plan, engine: Engine, ctx: LaunchContext
    ) -> ServerSet:
        """One process per instance and node; every one answers /health on its HTTP port."""
        opts = self.options_of(engine)
        flags = self.user_flags(engine)
        check_options(opts, comp.alloc.tp)
        dp_attention = attention_dp_size(opts, comp.alloc.tp) > 1
        shared = self._option_args(engine, comp.alloc.tp) + flags
        out = ServerSet()
        if plan.cluster.device == "cpu":
            out.warnings.append(
                "rollout: SGLang on cpu needs SGLang's CPU kernels built from "
                "source (PyPI has none); use rollout.backend=vllm:... there"
            )
        for inst in comp.instances:
            nodes = sorted(inst.nodes)
            http, nccl = ctx.next_port(), ctx.next_port()
            spread = len(nodes) > 1 or dp_attention
            ports = InstancePorts(
                http, nccl, ctx.ports_in_a_row(DIST_INIT_PORTS) if spread else None
            )
            out.addrs.append(f"{host_placeholder(nodes[0])}:{http}")
            for rank, node in enumerate(nodes):
                argv = self._argv(comp, plan, engine, ctx, nodes, rank, ports) + shared
                env = self.env(engine, ctx, {})
                out.processes.append(
                    self.server(plan, comp, inst, node, argv, env, ports.of_rank(rank), http)
                )
        return out

    def _argv(
        self,
        comp: ComponentPlan,
        plan: Plan,
        engine: Engine,
        ctx: LaunchContext,
        nodes: list[int],
        rank: int,
        ports: InstancePorts,
    ) -> list[str]:
        """The plan's flags of the process on `nodes[rank]`."""
        argv = [
            *self.argv_head(engine, ctx),
            "--model-path",
            engine.model_path,
            "--tp-size",
            str(comp.alloc.tp),
        ]
        if comp.alloc.pp > 1:
            argv += ["--pp-size", str(comp.alloc.pp)]
        argv += [*listen_args(nodes[rank], ports.http), "--nccl-port", str(ports.nccl)]
        if ports.dist is not None:
            argv += ["--dist-init-addr", f"{host_placeholder(nodes[0])}:{ports.dist}"]
        if len(nodes) > 1:
            argv += ["--nnodes", str(len(nodes)), "--node-rank", str(rank)]
        if plan.cluster.device == "cpu":
            argv += ["--device", "cpu"]
        return argv

    def _option_args(self, engine: Engine, tp: int) -> list[str]:
        """rollout.sglang.* and rollout.offload as SGLang flags."""
        opts = self.options_of(engine)
        args = ["--served-model-name", self.served_model(engine)]
        if opts.enable_dp_attention:
            args.append("--enable-dp-attention")  # deprecated in 0.5.23, the switch before it
        if opts.enable_dp_attention or opts.attn_dp_size is not None:
            args += ["--attn-dp-size", str(attention_dp_size(opts, tp))]
        for key, flag in VALUE_FLAGS:
            value = getattr(opts, key)
            if value is not None:
                args += [flag, str(value)]
        for key, flag in SWITCHES:
            if getattr(opts, key):
                args.append(flag)
        if opts.enable_memory_saver or engine.offload:  # release/resume need it
            args.append(self.client.release_flag)
        return args


def check_options(opts: SGLangOptions, tp: int) -> None:
    """What SGLang itself lets through or rejects with a bare assert (reference/sglang.md)."""
    fraction = opts.mem_fraction_static
    if fraction is not None and not 0 < fraction <= 1:
        raise ConfigError(
            f"rollout.sglang.mem_fraction_static={fraction}: a fraction of GPU memory, in (0, 1]"
        )
    if opts.attn_dp_size is not None and (opts.attn_dp_size < 1 or tp % opts.attn_dp_size):
        raise ConfigError(
            f"rollout.sglang.attn_dp_size={opts.attn_dp_size} must divide the "
            f"instance's tensor parallel size t={tp} (rollout.backend)"
        )


def attention_dp_size(opts: SGLangOptions, tp: int) -> int:
    """rollout.sglang.attn_dp_size; enable_dp_attention alone means one attention replica per
    tp rank (SGLang 0.5.23 turned `--dp-size N --enable-dp-attention` into `--attn-dp-size N`;
    the bare switch would resolve to 1, a silent no-op)."""
    if opts.attn_dp_size:
        return int(opts.attn_dp_size)
    return tp if opts.enable_dp_attention else 1
