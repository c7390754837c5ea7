"""The plan's memory: the typed engines of a plan turned into the memory model's inputs (pure).

One home for how config keys map onto the estimator's knobs: dtype, gradient_checkpointing
and mb_spec.max_tokens_per_mb of each trainer; its offload (between phases) and the during-
compute offloads (fsdp.offload_params, megatron.optimizer_cpu_offload); megatron's own
options; a server's memory fraction, context length, dtype and whether it releases memory
between phases. ref and teacher only run forwards; the critic has a value head.
"""
from __future__ import annotations

from typing import Optional

from launcher.memory.estimate import EngineInput, MemoryReport
from launcher.memory.fix import memory_report
from launcher.memory.infer import InferenceOptions
from launcher.memory.model_shape import ModelShape
from launcher.memory.train import Offload, TrainOptions
from launcher.planning.resolve import Engine
from launcher.spec.plan import Plan

FORWARD_ONLY = ("ref", "teacher")


def inference_options(engine: Engine) -> InferenceOptions:
    opts = engine.options
    if engine.backend == "sglang":
        return InferenceOptions(mem_fraction=opts.mem_fraction_static,
                                context_length=opts.context_length, dtype=opts.dtype,
                                release=engine.offload)
    return InferenceOptions(mem_fraction=opts.gpu_memory_utilization,
                            context_length=opts.max_model_len, dtype=opts.dtype,
                            release=engine.offload,
                            cpu_kvcache_space_gib=float(opts.cpu_kvcache_space_gb))


def train_options(engine: Engine) -> TrainOptions:
    assert engine.training is not None and engine.offload_parts is not None
    opts, parts = engine.options, engine.offload_parts
    megatron = engine.backend == "megatron"
    return TrainOptions(
        dtype=engine.training.dtype,
        max_tokens_per_mb=engine.training.max_tokens_per_mb,
        gradient_checkpointing=engine.training.gradient_checkpointing,
        trainable=engine.name not in FORWARD_ONLY, value_head=engine.name == "critic",
        offload=Offload(parts.weight, parts.optimizer, parts.grad),
        params_cpu_offload=bool(getattr(opts, "offload_params", False)),
        optimizer_cpu_offload=bool(getattr(opts, "optimizer_cpu_offload", False)),
        sequence_parallel=bool(getattr(opts, "sequence_parallel", False)),
        use_distributed_optimizer=bool(getattr(opts, "use_distributed_optimizer", True))
        if megatron else True,
        recompute=getattr(opts, "recompute_granularity", None) if megatron else None)


def engine_inputs(plan: Plan, engines: dict[str, Engine],
                  shape: Optional[ModelShape]) -> list[EngineInput]:
    """The memory model's view of every engine of the plan (shape None: memory unknown)."""
    out = []
    for name, comp in plan.components.items():
        engine = engines[name]
        options = inference_options(engine) if comp.is_inference else train_options(engine)
        out.append(EngineInput(comp, shape, options))
    return out


def plan_memory(plan: Plan, engines: dict[str, Engine], shape: Optional[ModelShape],
                capacity_gib: Optional[float]) -> MemoryReport:
    """The memory report of the plan (pure: the shape and capacity come from the edge)."""
    return memory_report(engine_inputs(plan, engines, shape), plan.cluster, capacity_gib)

