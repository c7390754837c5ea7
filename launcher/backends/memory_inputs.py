"""The memory model's inputs, built from a plan and its typed engines (pure).

Here because this layer has both: the engines' backends map their own options onto the
estimator's knobs (`inference_options`, `train_options`: memory fraction, context length,
offloads during compute, Megatron's layout options), and memory/ below is pure arithmetic
over what it is handed, which never calls a backend.
"""

from __future__ import annotations

from typing import Mapping, Optional

from launcher.backends.kinds import serve_backend, train_backend
from launcher.memory.estimate import EngineInput, MemoryReport
from launcher.memory.fix import memory_report
from launcher.memory.infer import InferenceOptions
from launcher.memory.model_shape import ModelShape
from launcher.memory.train import TrainOptions
from launcher.planning.resolve import Engine
from launcher.spec.plan import Plan


def inference_options(engine: Engine) -> InferenceOptions:
    """A serving engine as the inference estimator's inputs (its backend maps its options)."""
    return serve_backend(engine.backend).inference_options(engine)


def train_options(engine: Engine) -> TrainOptions:
    """A training engine as the training estimator's inputs (its generic knobs, then its
    backend's options applied by the backend)."""
    return train_backend(engine.backend).train_options(engine)


def engine_inputs(
    plan: Plan,
    engines: dict[str, Engine],
    shape: Optional[ModelShape],
    own: Mapping[str, Optional[ModelShape]] = {},
) -> list[EngineInput]:
    """The memory model's view of every engine of the plan (shape None: memory unknown);
    `own`: the shape of an engine that loads a model of its own (a teacher's, None: unknown).
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
        out.append(EngineInput(comp, own[name] if name in own else shape, options))
    return out


def plan_memory(
    plan: Plan,
    engines: dict[str, Engine],
    shape: Optional[ModelShape],
    capacity_gib: Optional[float],
    own: Mapping[str, Optional[ModelShape]] = {},
) -> MemoryReport:
    """The memory report of the plan (pure: the shapes and capacity come from the edge)."""
    return memory_report(engine_inputs(plan, engines, shape, own), plan.cluster, capacity_gib)
