"""What each phase holds on a set of GPUs, and what to say when it does not fit there.

A phase's load is each engine's bytes (the running ones at their peak, the others what they
keep between phases) and its sum's low and high end (launcher.memory.error_table). An
overflow at the low end is a problem (refused), at the high end only a risk (said, naming the
term whose range decides).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from launcher.memory.parts import GIB, EngineNeed, gib
from launcher.memory.report import MemoryProblem
from launcher.spec.cluster import ClusterSpec


@dataclass(frozen=True)
class PhaseLoad:
    """One phase on a set of GPUs: each engine's bytes (the running ones at their peak, the
    others what they keep), their sum, and the sum's low and high end."""

    held: dict[str, float]
    running: tuple[str, ...]
    low: float
    high: float

    @property
    def total(self) -> float:
        return sum(self.held.values())


def _load(needs: dict[str, EngineNeed], names: Sequence[str], running: Sequence[str]) -> PhaseLoad:
    held: dict[str, float] = {}
    low = high = 0.0
    for n in names:
        need = needs[n]
        held[n] = need.peak if n in running else need.residue
        lo, hi = need.peak_range() if n in running else need.residue_range()
        low, high = low + lo, high + hi
    return PhaseLoad(held, tuple(running), low, high)


def phases_on(names: Sequence[str], needs: dict[str, EngineNeed]) -> dict[str, PhaseLoad]:
    """phase -> its load on a GPU holding `names`. Trainers take turns: the train phase is the
    turn that needs the most (at each end of the range, the turn that needs the most there)."""
    servers = [n for n in names if needs[n].phase == "rollout"]
    trainers = [n for n in names if needs[n].phase == "train"]
    out: dict[str, PhaseLoad] = {}
    if servers:
        out["rollout"] = _load(needs, servers + trainers, servers)
    if trainers:
        turns = [_load(needs, [n for n in names if n != t] + [t], [t]) for t in trainers]
        best = max(turns, key=lambda load: load.total)  # the first of equals
        low, high = max(t.low for t in turns), max(t.high for t in turns)
        out["train"] = PhaseLoad(best.held, best.running, low, high)
    return out


def _describe(
    phase: str, held: dict[str, float], running: str, specs: dict[str, str], terms: dict[str, float]
) -> str:
    """`train phase: actor (fsdp:d8) 60.1 [largest: logits 27.8] + rollout keeps 2.0`: the
    running engine with its largest term, and what the others keep."""
    top = max(terms, key=lambda k: terms[k])
    parts = [
        f"{running} ({specs[running]}) {held[running] / GIB:.1f} "
        f"[largest: {top} {terms[top] / GIB:.1f}]"
    ]
    parts += [
        f"{n} keeps {v / GIB:.1f}" for n, v in held.items() if n != running and v >= 0.05 * GIB
    ]
    return f"{phase} phase: " + " + ".join(parts)


@dataclass(frozen=True)
class Overflow:
    """One phase of one set of GPUs that does not fit at the high end of the estimate (and
    perhaps not at its low end either), against the card and the margin."""

    phase: str
    load: PhaseLoad
    gpus: tuple[int, ...]
    names: tuple[str, ...]
    margin: float
    capacity_gib: float

    def _fields(
        self, needs: dict[str, EngineNeed], specs: dict[str, str], cluster: ClusterSpec
    ) -> tuple[str, dict]:
        """The start of the message (where, what runs, what the others keep) and the
        problem's fields, named after the engine that runs the phase."""
        held = self.load.held
        running = max(self.load.running, key=lambda n: held[n])
        g, per = self.gpus[0], cluster.gpus_per_node
        said = _describe(self.phase, held, running, specs, needs[running].parts)
        fields = dict(
            kind=self.phase,
            engine=running,
            gpu=g,
            node=g // per,
            need_gib=gib(self.load.total + self.margin * GIB),
            have_gib=self.capacity_gib,
            engines=self.names,
            low_gib=gib(self.load.low + self.margin * GIB),
            high_gib=gib(self.load.high + self.margin * GIB),
        )
        return f"GPU {g} (node {g // per}) {{}}: {said} GiB + margin {self.margin} GiB", fields

    @property
    def _alike(self) -> str:
        more = len(self.gpus) - 1
        return f" (and {more} more GPUs with the same engines)" if more else ""

    def problem(
        self, needs: dict[str, EngineNeed], specs: dict[str, str], cluster: ClusterSpec
    ) -> MemoryProblem:
        """Refused: even the low end does not fit."""
        start, f = self._fields(needs, specs, cluster)
        return MemoryProblem(
            **f,
            message=(
                f"{start.format('does not fit')} = {f['need_gib']:.1f} GiB > "
                f"{self.capacity_gib} GiB, {f['low_gib']:.1f} GiB even at the estimate's low "
                f"end{self._alike}"
            ),
        )

    def risk(
        self, needs: dict[str, EngineNeed], specs: dict[str, str], cluster: ClusterSpec
    ) -> MemoryProblem:
        """Said: the low end fits, the high end does not; the term whose range decides."""
        start, f = self._fields(needs, specs, cluster)
        engine, term, (lo, hi) = deciding_term(self.load, needs)
        return MemoryProblem(
            **f,
            term=term,
            risk=True,
            message=(
                f"{start.format('may not fit')} = {f['need_gib']:.1f} GiB "
                f"({f['low_gib']:.1f}-{f['high_gib']:.1f} by the estimate's range) against "
                f"{self.capacity_gib} GiB: the range of {engine}'s {term} decides "
                f"({lo / GIB:.1f}-{hi / GIB:.1f} GiB){self._alike}"
            ),
        )


def deciding_term(
    load: PhaseLoad, needs: dict[str, EngineNeed]
) -> tuple[str, str, tuple[float, float]]:
    """(engine, term, its (low, high) bytes): the term of the phase whose range is widest,
    the one that decides whether a phase between its ends fits."""
    best: tuple[str, str, tuple[float, float]] = ("", "", (0.0, 0.0))
    for name in load.held:
        need = needs[name]
        held = need.parts if name in load.running else need.released
        for term, (lo, hi) in need.part_ranges(held).items():
            if hi - lo > best[2][1] - best[2][0]:
                best = (name, term, (lo, hi))
    return best
