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
from launcher.memory.infer import STATIC_BUDGET, InferenceOptions
from launcher.spec.errors import ConfigError
from launcher.spec.plan import ProcessSpec, host_placeholder
from launcher.spec.registry import SERVE

if TYPE_CHECKING:
    from launcher.backends.context import LaunchContext
    from launcher.planning.resolve import Engine
    from launcher.spec.plan import ComponentPlan, Plan

NAME = "sglang"
KIND = SERVE
DIMS = "dtp"
HYBRID = False
EXAMPLE = "sglang:d4t2"
ORDER = 0
CLIENT = ServerClient(
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
INSTALL = Install("sglang", "pip install 'areal-launch[sglang]'")
CHECKER = "launcher.backends.checks.check_sglang_argv"
MEMORY_MODEL = STATIC_BUDGET
MEMORY_KEYS = {"mem_fraction": "mem_fraction_static", "context_length": "context_length"}


@dataclass
class Options:
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


MODULE = "sglang.launch_server"
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
REFUSED = {
    **{
        flag: _COUNT
        for flag in (
            "--dp-size",
            "--data-parallel-size",
            "--tp-size",
            "--tensor-parallel-size",
            "--pp-size",
            "--pipeline-parallel-size",
        )
    },
    **launcher_owned(
        (
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
    ),
    "--served-model-name": "duplicates rollout.sglang.served_model_name; set that instead",
}


def servers(
    comp: "ComponentPlan", plan: "Plan", engine: "Engine", ctx: "LaunchContext"
) -> ServerSet:
    """One ProcessSpec per instance and node of the rollout component."""
    opts: Options = engine.options
    flags = user_flags(engine, REFUSED)
    check_options(opts, comp.alloc.tp)
    dp_attention = attention_dp_size(opts, comp.alloc.tp) > 1
    shared = _option_args(engine, comp.alloc.tp) + flags
    out = ServerSet()
    if plan.cluster.device == "cpu":
        out.warnings.append(
            "rollout: SGLang on cpu needs SGLang's CPU kernels built from "
            "source (PyPI has none); use rollout.backend=vllm:... there"
        )
    for inst in comp.instances:
        nodes = sorted(inst.nodes)
        leader = host_placeholder(nodes[0])
        port, nccl_port = ctx.next_port(), ctx.next_port()
        dist_port = ctx.ports_in_a_row(DIST_INIT_PORTS) if len(nodes) > 1 or dp_attention else None
        out.addrs.append(f"{leader}:{port}")
        for rank, node in enumerate(nodes):
            argv = [
                *module_argv(engine, ctx, MODULE),
                "--model-path",
                engine.model_path,
                "--tp-size",
                str(comp.alloc.tp),
            ]
            if comp.alloc.pp > 1:
                argv += ["--pp-size", str(comp.alloc.pp)]
            argv += [*listen_args(node, port), "--nccl-port", str(nccl_port)]
            if dist_port is not None:
                argv += ["--dist-init-addr", f"{leader}:{dist_port}"]
            if len(nodes) > 1:
                argv += ["--nnodes", str(len(nodes)), "--node-rank", str(rank)]
            if plan.cluster.device == "cpu":
                argv += ["--device", "cpu"]
            argv += shared
            ports: tuple[int, ...] = (port,)
            if rank == 0:
                ports += (nccl_port,)
                if dist_port is not None:
                    ports += tuple(range(dist_port, dist_port + DIST_INIT_PORTS))
            gpus = local_gpus(plan, inst, node)
            out.processes.append(
                ProcessSpec(
                    name=process_name(comp, inst, node),
                    component=comp.name,
                    role="server",
                    node=node,
                    argv=tuple(argv),
                    env=server_env(engine, ctx, {}),
                    gpus=gpus,
                    ports=ports,
                    health_url=health_url(node, port, CLIENT),
                )
            )
    return out


def check_options(opts: Options, tp: int) -> None:
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


def attention_dp_size(opts: Options, tp: int) -> int:
    """rollout.sglang.attn_dp_size; enable_dp_attention alone means one attention replica per
    tp rank (SGLang 0.5.23 turned `--dp-size N --enable-dp-attention` into `--attn-dp-size N`;
    the bare switch would resolve to 1, a silent no-op)."""
    if opts.attn_dp_size:
        return int(opts.attn_dp_size)
    return tp if opts.enable_dp_attention else 1


def inference_options(options: Options, release: bool) -> InferenceOptions:
    """rollout.sglang.* as the estimator's inputs."""
    return InferenceOptions(
        mem_fraction=options.mem_fraction_static,
        context_length=options.context_length,
        dtype=options.dtype,
        release=release,
    )


def _option_args(engine: "Engine", tp: int) -> list[str]:
    """rollout.sglang.* and rollout.offload as SGLang flags."""
    opts: Options = engine.options
    args = ["--served-model-name", served_model_name(opts)]
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
        args.append(CLIENT.release_flag)
    return args
