"""Resolution: backend strings -> allocations per active engine, fallbacks and legacy input.

critic/ref/teacher with an empty backend take the actor's here, in code (never by YAML
interpolation), and the result records `inherited_from`. The deprecated top-level
`allocation_mode` is translated to per-engine backends and placement.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from launcher.alloc import AllocationError, ModelAllocation, parse_backend
from launcher.config import ENGINE_NAMES, INHERITING, rollout_offload
from launcher.errors import ConfigError
from launcher.plan import INFERENCE_BACKENDS, TRAINING_BACKENDS



@dataclass(frozen=True)
class EngineChoice:
    """One active engine as the user asked for it."""

    name: str
    alloc: ModelAllocation
    inherited_from: Optional[str] = None
    offload: bool = False


@dataclass(frozen=True)
class Resolution:
    engines: dict[str, EngineChoice]  # active engines, in ENGINE_NAMES order
    placement: dict[str, Any]  # cluster.component_placement, legacy translation merged in
    warnings: tuple[str, ...] = ()


def resolve(cfg: Any, explicit: frozenset[str] = frozenset()) -> Resolution:
    """Parse every engine's backend; `explicit` holds the keys the user set (`rollout.backend`)."""
    warnings: list[str] = []
    backends: dict[str, Optional[str]] = {name: getattr(cfg, name).backend for name in ENGINE_NAMES}
    placement = {str(k): v for k, v in dict(cfg.cluster.component_placement or {}).items()}
    if cfg.allocation_mode:
        backends, placement = _apply_legacy(str(cfg.allocation_mode), backends, placement, explicit, warnings)

    engines: dict[str, EngineChoice] = {}
    for name in ENGINE_NAMES:
        spec = backends[name]
        if spec is None:
            continue
        inherited = None
        if name in INHERITING and not str(spec).strip():
            if backends.get("actor") is None:
                raise ConfigError(f"{name}.backend is empty, which means the actor's backend, but actor "
                                  f"is off: set {name}.backend=fsdp:d2 (for example) or actor.backend")
            spec, inherited = backends["actor"], "actor"
        alloc = _parse_for(name, str(spec))
        engines[name] = EngineChoice(name, alloc, inherited, _offload(cfg, name))
    if not engines:
        raise ConfigError("every engine is off: set rollout.backend and/or actor.backend (e.g. "
                          "rollout.backend=vllm:d1 actor.backend=fsdp:d2)")
    return Resolution(engines, placement, tuple(warnings))


def _parse_for(name: str, spec: str) -> ModelAllocation:
    field = f"{name}.backend"
    try:
        alloc = parse_backend(spec)
    except AllocationError as exc:
        raise ConfigError(f"{field}: {exc}") from None
    wanted = INFERENCE_BACKENDS if name == "rollout" else TRAINING_BACKENDS
    if alloc.backend not in wanted:
        kind = "an inference" if name == "rollout" else "a training"
        example = "vllm:d1 or sglang:d4t2" if name == "rollout" else "fsdp:d2 or megatron:d2p2"
        raise ConfigError(f"{field}={spec!r}: {name} needs {kind} backend ({', '.join(wanted)}), "
                          f"e.g. {name}.backend={example}")
    return alloc


def _offload(cfg: Any, name: str) -> bool:
    if name == "rollout":
        return rollout_offload(cfg)
    off = getattr(cfg, name).offload
    return bool(off.optimizer or off.weight or off.grad)


def _apply_legacy(text: str, backends: dict, placement: dict, explicit: frozenset[str],
                  warnings: list[str]) -> tuple[dict, dict]:
    """Translate `allocation_mode` (deprecated) into per-engine backends and placement."""
    from launcher.legacy import parse_allocation_mode

    try:
        parts = parse_allocation_mode(text)
    except AllocationError as exc:
        raise ConfigError(f"allocation_mode: {exc}") from None
    warnings.append("allocation_mode is deprecated: write "
                    + " ".join(f"{p.name}.backend={p.alloc}" for p in parts)
                    + " (and cluster.component_placement for shared GPUs)")
    backends = dict(backends)
    for part in parts:
        key = f"{part.name}.backend"
        if key in explicit or part.name in explicit:
            warnings.append(f"{key}={backends[part.name]} wins over allocation_mode's {part.alloc}")
            continue
        backends[part.name] = str(part.alloc)
    placed = {n.strip() for k, v in placement.items() if v is not None for n in k.split(",")}
    groups: dict[int, list] = {}
    for part in parts:
        groups.setdefault(part.group, []).append(part)
    start, legacy_placement = 0, {}
    for group in (groups[g] for g in sorted(groups)):
        size = _parse_for(group[0].name, backends[group[0].name]).world_size  # a winning override counts
        names = [p.name for p in group if p.name not in placed]
        if names:  # `+` groups take consecutive GPU sets; `|` members share one
            legacy_placement[",".join(names)] = f"{start}-{start + size - 1}"
        start += size
    return backends, {**placement, **legacy_placement}
