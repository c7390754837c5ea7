"""What the memory check says of a plan: every engine's need per GPU by named term, every set
of GPUs holding the same engines by phase, what does not fit (problems: the plan is refused)
and what may not (risks: said), each with the estimate's range (docs/architecture.md §10).
Pure data and its JSON (the plan's `memory` section); launcher.memory.estimate computes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class EngineMemory:
    """One engine's need per GPU, by named part (GiB)."""

    name: str
    spec: str
    phase: str
    per_gpu_gib: float
    released_gib: float
    parts: dict[str, float]
    kv_tokens: Optional[int] = None
    context_tokens: Optional[int] = None
    mem_fraction: Optional[float] = None
    range_gib: tuple[float, float] = (0.0, 0.0)  # per_gpu_gib's low and high end
    parts_range: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def largest_part(self) -> str:
        """The term that dominates this engine's peak (what to change first)."""
        return max(self.parts, key=lambda k: self.parts[k])

    def to_dict(self) -> dict:
        out = {
            "spec": self.spec,
            "phase": self.phase,
            "per_gpu_gib": self.per_gpu_gib,
            "released_gib": self.released_gib,
            "parts": dict(self.parts),
            "largest_part": self.largest_part,
            "range_gib": list(self.range_gib),
            "parts_range": {k: list(v) for k, v in self.parts_range.items()},
        }
        if self.phase == "rollout":
            out.update(
                kv_tokens=self.kv_tokens,
                context_tokens=self.context_tokens,
                mem_fraction=self.mem_fraction,
            )
        return out


@dataclass(frozen=True)
class GPUGroup:
    """GPUs that hold the same engines, and so the same bytes (one row per GPU in the JSON)."""

    gpus: tuple[int, ...]
    total_gib: float  # the larger phase
    phase: str  # which phase that is
    engines: dict[str, float]  # each engine's GiB in that phase
    phases: dict[str, float]  # every phase's total
    low_gib: float = 0.0  # the larger phase at the estimate's low end
    high_gib: float = 0.0  # and at its high end


@dataclass(frozen=True)
class MemoryProblem:
    """One thing that does not fit, with the smallest change that would (an override)."""

    kind: str  # "train" | "rollout" (a phase overflows a GPU), "kv", "weights", "host"
    engine: str
    gpu: Optional[int]
    node: Optional[int]
    need_gib: float
    have_gib: float
    message: str
    engines: tuple[str, ...] = ()  # the engines on that GPU
    fix: Optional[str] = None
    # need_gib at the estimate's low and high end (the margin included), and for a risk the
    # term whose range decides whether it fits
    low_gib: Optional[float] = None
    high_gib: Optional[float] = None
    term: Optional[str] = None
    risk: bool = False  # it may not fit (a warning), not that it does not (a refusal)

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "engine": self.engine,
            "gpu": self.gpu,
            "node": self.node,
            "need_gib": self.need_gib,
            "have_gib": self.have_gib,
            "message": self.message,
            "fix": self.fix,
            "low_gib": self.low_gib,
            "high_gib": self.high_gib,
            "term": self.term,
        }

    def line(self) -> str:
        """One line for the user: what, where, need vs have, and the override to try."""
        said = "to be sure it fits" if self.risk else "smallest change that fits"
        return self.message + (f"; {said}: {self.fix}" if self.fix else "")


@dataclass(frozen=True)
class MemoryReport:
    """The plan's `memory` key: every GPU, every engine, and whether it all fits."""

    device: str
    capacity_gib: Optional[float]
    margin_gib: float
    fits: Optional[bool]  # None: unknown (no capacity, or an engine without config.json)
    engines: dict[str, EngineMemory]
    groups: tuple[GPUGroup, ...]
    problems: tuple[MemoryProblem, ...] = ()
    warnings: tuple[str, ...] = ()
    gpus_per_node: int = 1
    host_need_gib: Optional[float] = None  # cpu: all processes on the host
    risks: tuple[MemoryProblem, ...] = ()  # fits at the low end, not at the high end
    host_range: Optional[tuple[float, float]] = None  # cpu: host_need_gib's low and high end

    @property
    def sure(self) -> Optional[bool]:
        """Whether it fits even at the estimate's high end (None: unknown)."""
        if self.fits is None:
            return None
        return self.fits and not self.risks

    def gpus(self) -> list[dict]:
        """One entry per GPU, ascending: node, gpu, total_gib, engines {name: GiB} (the GiB
        of the larger phase; `groups` say which phase that is)."""
        per = self.gpus_per_node
        group_of: dict[int, int] = {}
        for k, group in enumerate(self.groups):
            group_of.update(dict.fromkeys(group.gpus, k))
        total = [g.total_gib for g in self.groups]
        engines = [dict(g.engines) for g in self.groups]  # one dict per group, shared by rows
        ranges = [[g.low_gib, g.high_gib] for g in self.groups]
        return [
            {
                "node": g // per,
                "gpu": g,
                "total_gib": total[k],
                "engines": engines[k],
                "range_gib": ranges[k],
            }
            for g, k in sorted(group_of.items())
        ]

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "gpu_capacity_gib": self.capacity_gib,
            "fits": self.fits,
            "device": self.device,
            "margin_gib": self.margin_gib,
            "gpus": self.gpus(),
            "engines": {n: e.to_dict() for n, e in self.engines.items()},
            "problems": [p.to_dict() for p in self.problems],
            "warnings": list(self.warnings),
            "sure": self.sure,
            "risks": [p.to_dict() for p in self.risks],
        }
        if self.device == "cpu":
            out["host_need_gib"] = self.host_need_gib
            out["host_need_range_gib"] = list(self.host_range) if self.host_range else None
        return out

    def error(self) -> Optional[str]:
        """The message that refuses the plan (None when it fits or memory is unknown)."""
        if not self.problems:
            return None
        more = len(self.problems) - 1
        tail = f" (and {more} more: see the plan's memory section)" if more else ""
        return self.problems[0].line() + tail
