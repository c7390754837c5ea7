"""Building memory inputs for tests: engines on explicit GPU lists, without a Hydra config."""

from __future__ import annotations

from typing import Iterable, Optional, Union

from launcher.memory.estimate import EngineInput, InferenceOptions, TrainOptions
from launcher.memory.model_shape import ModelShape
from launcher.spec.alloc import parse_backend
from launcher.spec.plan import ComponentPlan


def component(
    name: str, spec: str, gpus: Iterable[int], inherited_from: Optional[str] = None
) -> ComponentPlan:
    """A ComponentPlan with only what memory reads: the allocation and the global GPUs."""
    return ComponentPlan(name, parse_backend(spec), inherited_from, tuple(gpus))


def engine(
    name: str,
    spec: str,
    gpus: Iterable[int],
    shape: Optional[ModelShape],
    options: Union[TrainOptions, InferenceOptions, None] = None,
) -> EngineInput:
    return EngineInput(component(name, spec, gpus), shape, options)


def apply_override(engines: list[EngineInput], text: str) -> list[EngineInput]:
    """The engines after the overrides of a fix (`actor.mb_spec.max_tokens_per_mb=8192 ...`),
    mapped back through launcher.memory.fix.KNOBS and the engines' backends' MEMORY_KEYS
    (the lead maps them to config keys)."""
    import dataclasses

    from launcher.memory.fix import KNOBS, _swap
    from launcher.memory.parts import memory_keys
    from launcher.spec.offload import Offload

    out = list(engines)
    for item in text.split():
        key, _, value = item.partition("=")
        name, _, rest = key.partition(".")
        backend = next(e for e in out if e.name == name).component.backend
        knobs = {pattern.format(e=name): k for k, pattern in KNOBS.items()}
        knobs.update(
            {f"{name}.{backend}.{option}": k for k, option in memory_keys(backend).items()}
        )
        knob = knobs[key]
        field = knob.split(".")[0]
        parsed: object = {"true": True, "false": False}.get(value, value)
        if field == "backend":
            out = _swap(out, name, alloc=parse_backend(value))
            continue
        if isinstance(parsed, str):
            parsed = float(parsed) if "." in parsed else int(parsed)
        current = next(e for e in out if e.name == name).options
        if field == "offload" and isinstance(current, TrainOptions):
            parsed = dataclasses.replace(current.offload, **{knob.split(".")[1]: parsed})
        elif field == "release":
            parsed = bool(parsed)
        assert isinstance(parsed, (bool, int, float, Offload))
        out = _swap(out, name, **{field: parsed})
    return out


# the default CPU run's model (launcher.trainer.tiny_model's dims), as a shape
TINY = ModelShape(
    hidden_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=4,
    head_dim=32,
    intermediate_size=256,
    vocab_size=409,
    dtype="float32",
    max_position_embeddings=512,
)


def cpu_run() -> list[EngineInput]:
    """The default CPU run's engines: one vLLM CPU server and two FSDP ranks of the tiny model
    on three process slots."""
    return [
        engine("rollout", "vllm:d1", [0], TINY, InferenceOptions(dtype="float32")),
        engine("actor", "fsdp:d2", [1, 2], TINY, TrainOptions(dtype="float32")),
    ]
