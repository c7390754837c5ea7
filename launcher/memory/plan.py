"""The plan's memory: the typed engines of a plan turned into the memory model's inputs (pure).

The generic config keys map here: dtype, gradient_checkpointing, mb_spec.max_tokens_per_mb
and offload (between phases) of each trainer, a server's release between phases. Each
backend maps its own options (memory fraction, context length, during-compute offloads,
Megatron's layout options) in its module (`inference_options`, `train_options`). ref and
teacher only run forwards; the critic has a value head.
"""

from __future__ import annotations

from typing import Optional

from launcher.memory.estimate import EngineInput, MemoryReport
from launcher.memory.fix import memory_report
from launcher.memory.infer import InferenceOptions
from launcher.memory.model_shape import ModelShape
from launcher.memory.train import Offload, TrainOptions
from launcher.planning.resolve import Engine
from launcher.spec import registry
from launcher.spec.plan import Plan


def inference_options(engine: Engine) -> InferenceOptions:
    """The server's options as the estimator's inputs: its backend maps them (by name through
    the registry, memory/ being below backends/)."""
    found: InferenceOptions = registry.backend(engine.backend).inference_options(
        engine.options, engine.offload
    )
    return found


def train_options(engine: Engine) -> TrainOptions:
    """The trainer's generic knobs, then its backend's options applied by the backend."""
    assert engine.training is not None and engine.offload_parts is not None
    parts = engine.offload_parts
    base = TrainOptions(
        dtype=engine.training.dtype,
        max_tokens_per_mb=engine.training.max_tokens_per_mb,
        gradient_checkpointing=engine.training.gradient_checkpointing,
        trainable=engine.training.trainable,
        value_head=engine.training.value_head,
        offload=Offload(parts.weight, parts.optimizer, parts.grad),
    )
    found: TrainOptions = registry.backend(engine.backend).train_options(engine.options, base)
    return found


def engine_inputs(
    plan: Plan, engines: dict[str, Engine], shape: Optional[ModelShape]
) -> list[EngineInput]:
    """The memory model's view of every engine of the plan (shape None: memory unknown).
    Worker components hold no model: one with `mem_gib` counts that much a process."""
    out = []
    given = plan.meta.get("engine_options", {})
    for name, comp in plan.components.items():
        if comp.is_worker:
            mine = given.get(name, {})
            if mine.get("mem_gib") is not None:
                out.append(
                    EngineInput(
                        comp,
                        None,
                        process_gib=float(mine["mem_gib"]),
                        releases=bool(mine.get("offload")),
                    )
                )
            continue
        engine = engines[name]
        options = inference_options(engine) if comp.is_inference else train_options(engine)
        out.append(EngineInput(comp, shape, options))
    return out


def plan_memory(
    plan: Plan,
    engines: dict[str, Engine],
    shape: Optional[ModelShape],
    capacity_gib: Optional[float],
) -> MemoryReport:
    """The memory report of the plan (pure: the shape and capacity come from the edge)."""
    return memory_report(engine_inputs(plan, engines, shape), plan.cluster, capacity_gib)
