"""The smallest change that would make a memory problem go away, as a Hydra override.

Candidates are tried in order of how little they change: a memory knob first (gradient
checkpointing, the largest max_tokens_per_mb or memory fraction that fits), then offload, then
a different parallel layout on the same GPUs. Each candidate is checked by evaluating the whole
plan again (pure and fast); the first that removes the problem without adding another wins.
"Fits" means surely, at the estimate's high end, where some candidate does that; else the
first after which the plan is at least not refused (its low end fits). A risk (the plan may not
fit) gets the change after which it surely fits. Knob names live in KNOBS (one home: the lead
maps them to config keys).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Optional, Sequence

from launcher.memory.estimate import MAX_FIXES, EngineInput, MemoryProblem, MemoryReport, evaluate
from launcher.memory.infer import InferenceOptions
from launcher.memory.parts import memory_keys
from launcher.memory.train import TrainOptions
from launcher.planning.placement import offload_option
from launcher.spec import registry
from launcher.spec.alloc import ModelAllocation
from launcher.spec.cluster import ClusterSpec
from launcher.spec.offload import Offload
from launcher.spec.plan import ComponentPlan

# knob -> override key; {e} is the engine (actor, rollout, ...). A knob of the engine's backend
# (mem_fraction, context_length, params_cpu_offload, ...) is `{e}.<backend>.<option>`, the
# option named by the backend's MEMORY_KEYS (one home: the backend module)
KNOBS = {
    "backend": "{e}.backend",
    "max_tokens_per_mb": "{e}.mb_spec.max_tokens_per_mb",
    "gradient_checkpointing": "{e}.gradient_checkpointing",
    "offload.weight": "{e}.offload.weight",
    "offload.optimizer": "{e}.offload.optimizer",
    "offload.grad": "{e}.offload.grad",
    "release": "{e}.offload",
}
TOKEN_STEP = 1024  # suggested token counts are multiples of this
MAX_RISK_FIXES = 1  # risks that get a fix searched, when nothing is refused
FRACTION_MAX = 0.95
Evaluate = Callable[[Sequence[EngineInput]], MemoryReport]
Candidate = tuple[str, list[EngineInput]]


def override(engine: str, knob: str, value: object, backend: str = "") -> str:
    """`actor.mb_spec.max_tokens_per_mb=8192`: what the user pastes (`backend`: the engine's,
    for a knob of its own options)."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    key = (
        KNOBS[knob].format(e=engine)
        if knob in KNOBS
        else f"{engine}.{backend}.{memory_keys(backend)[knob]}"
    )
    return f"{key}={text}"


def _has(inp: EngineInput, knob: str) -> bool:
    """Whether the engine's backend has an option for `knob`."""
    return knob in memory_keys(inp.component.backend)


def _swap(engines: Sequence[EngineInput], name: str, **changes: object) -> list[EngineInput]:
    """The engines with `name`'s options (or allocation, via `alloc`) changed."""
    out = []
    for inp in engines:
        if inp.name == name:
            alloc = changes.pop("alloc", None)
            component = inp.component
            if isinstance(alloc, ModelAllocation):
                component = ComponentPlan(
                    inp.name, alloc, inp.component.inherited_from, inp.component.gpus
                )
            releases = bool(changes.pop("releases", inp.releases))
            options = dataclasses.replace(inp.options, **changes) if changes else inp.options  # type: ignore[type-var]
            inp = dataclasses.replace(inp, component=component, options=options, releases=releases)
        out.append(inp)
    return out


def _worker_release(names: Sequence[str], by_name: dict[str, EngineInput]) -> Iterator[Candidate]:
    """A worker that keeps its memory on shared GPUs releases it while the trainers train."""
    engines = list(by_name.values())
    for other in names:
        inp = by_name[other]
        if inp.process_gib is not None and not inp.releases:
            yield offload_option(other), _swap(engines, other, releases=True)


def _key(p: MemoryProblem) -> tuple[str, str]:
    return p.kind, p.engine


def _issues(report: MemoryReport, sure: bool) -> set[tuple[str, str]]:
    """What is wrong with a plan: its problems, and with `sure` its risks too."""
    return {_key(p) for p in report.problems + (report.risks if sure else ())}


def _solves(
    problem: MemoryProblem, before: MemoryReport, after: MemoryReport, sure: bool = True
) -> bool:
    old, new = _issues(before, sure), _issues(after, sure)
    return _key(problem) not in new and new <= old


def _search_int(low: int, high: int, works: Callable[[int], bool]) -> Optional[int]:
    """The largest multiple of TOKEN_STEP in [low, high] for which works() holds (monotone)."""
    lo, hi = low // TOKEN_STEP, high // TOKEN_STEP
    if hi < max(lo, 1) or not works(max(lo, 1) * TOKEN_STEP):
        return None
    lo = max(lo, 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if works(mid * TOKEN_STEP):
            lo = mid
        else:
            hi = mid - 1
    return lo * TOKEN_STEP


def _reshapes(alloc: ModelAllocation, cluster: ClusterSpec) -> Iterator[ModelAllocation]:
    """Same GPUs, more model parallel: t doubled within a node (a server instance's t*p),
    then p for a trainer whose backend takes it (megatron, archon)."""
    if alloc.hybrid or alloc.dp % 2:
        return
    serving = alloc.is_inference
    span = alloc.tp * 2 * (alloc.pp if serving else 1)
    shapes = [(alloc.tp * 2, alloc.pp)] if span <= cluster.gpus_per_node else []
    if not serving and "p" in (registry.backend_dims(alloc.backend) or ""):
        shapes.append((alloc.tp, alloc.pp * 2))
    for tp, pp in shapes:
        try:
            yield dataclasses.replace(alloc, dp=alloc.dp // 2, tp=tp, pp=pp, edp=0)
        except ValueError:  # AllocationError: e.g. experts no longer divide the world
            continue


def _train_candidates(
    problem: MemoryProblem,
    engines: Sequence[EngineInput],
    cluster: ClusterSpec,
    works: Callable[[list[EngineInput]], bool],
) -> Iterator[Candidate]:
    by_name = {inp.name: inp for inp in engines}
    inp = by_name[problem.engine]
    opts = inp.options
    assert isinstance(opts, TrainOptions)
    name = inp.name
    if opts.trainable and opts.recompute_mode == "none":
        yield (
            override(name, "gradient_checkpointing", True),
            _swap(engines, name, gradient_checkpointing=True),
        )
    tokens = _search_int(
        TOKEN_STEP,
        opts.max_tokens_per_mb - 1,
        lambda n: works(_swap(engines, name, max_tokens_per_mb=n)),
    )
    if tokens:
        yield (
            override(name, "max_tokens_per_mb", tokens),
            _swap(engines, name, max_tokens_per_mb=tokens),
        )
    yield from _worker_release(problem.engines, by_name)
    for other in problem.engines:
        o = by_name[other].options
        if by_name[other].process_gib is not None:
            continue
        if isinstance(o, InferenceOptions) and not o.release:
            yield override(other, "release", True), _swap(engines, other, release=True)
        elif isinstance(o, TrainOptions) and other != name and not o.offload.any:
            full = Offload(True, True, True)
            yield (
                " ".join(
                    override(other, f"offload.{k}", True) for k in ("weight", "optimizer", "grad")
                ),
                _swap(engines, other, offload=full),
            )
    backend = inp.component.backend
    if _has(inp, "optimizer_cpu_offload") and not opts.optimizer_cpu_offload:
        yield (
            override(name, "optimizer_cpu_offload", True, backend),
            _swap(engines, name, optimizer_cpu_offload=True),
        )
    for alloc in _reshapes(inp.component.alloc, cluster):
        yield override(name, "backend", alloc), _swap(engines, name, alloc=alloc)
    if _has(inp, "params_cpu_offload") and not opts.params_cpu_offload:
        yield (
            override(name, "params_cpu_offload", True, backend),
            _swap(engines, name, params_cpu_offload=True),
        )


def _rollout_candidates(
    problem: MemoryProblem,
    engines: Sequence[EngineInput],
    cluster: ClusterSpec,
    works: Callable[[list[EngineInput]], bool],
    report: MemoryReport,
) -> Iterator[Candidate]:
    by_name = {inp.name: inp for inp in engines}
    for other in problem.engines:
        o = by_name[other].options
        if by_name[other].process_gib is not None:
            continue
        if isinstance(o, TrainOptions) and not (
            o.offload.weight and o.offload.optimizer and o.offload.grad
        ):
            for knob in ("optimizer", "weight", "grad"):
                if not getattr(o.offload, knob):
                    yield (
                        override(other, f"offload.{knob}", True),
                        _swap(
                            engines, other, offload=dataclasses.replace(o.offload, **{knob: True})
                        ),
                    )
            yield (
                " ".join(
                    override(other, f"offload.{k}", True) for k in ("weight", "optimizer", "grad")
                ),
                _swap(engines, other, offload=Offload(True, True, True)),
            )
    servers = [
        n
        for n in problem.engines
        if isinstance(by_name[n].options, InferenceOptions) and by_name[n].process_gib is None
    ]
    if by_name[problem.engine].process_gib is not None:  # a worker is the largest: a server
        if not servers:  # beside it gives way, or nothing of ours can
            return
        problem = dataclasses.replace(problem, engine=servers[0])
    inp = _resolved(by_name[problem.engine], report)
    yield from _fraction(inp, engines, works, lower=True)
    for alloc in _reshapes(inp.component.alloc, cluster):
        yield override(inp.name, "backend", alloc), _swap(engines, inp.name, alloc=alloc)


def _resolved(inp: EngineInput, report: MemoryReport) -> EngineInput:
    """The engine with the memory fraction it runs with written out (SGLang's auto value)."""
    opts = inp.options
    memory = report.engines.get(inp.name)
    if (
        isinstance(opts, InferenceOptions)
        and opts.mem_fraction is None
        and memory is not None
        and memory.mem_fraction is not None
    ):
        return dataclasses.replace(
            inp, options=dataclasses.replace(opts, mem_fraction=memory.mem_fraction)
        )
    return inp


def _fraction(
    inp: EngineInput,
    engines: Sequence[EngineInput],
    works: Callable[[list[EngineInput]], bool],
    lower: bool,
) -> Iterator[Candidate]:
    """The memory fraction closest to the current one (2 decimals) that fits."""
    opts = inp.options
    assert isinstance(opts, InferenceOptions)
    if opts.mem_fraction is None or not _has(inp, "mem_fraction"):
        return
    now = int(round(opts.mem_fraction * 100))
    steps = range(now - 1, 4, -1) if lower else range(now + 1, int(FRACTION_MAX * 100) + 1)
    for pct in steps:
        changed = _swap(engines, inp.name, mem_fraction=pct / 100)
        if works(changed):
            yield override(inp.name, "mem_fraction", pct / 100, inp.component.backend), changed
            return


def _engine_candidates(
    problem: MemoryProblem,
    engines: Sequence[EngineInput],
    cluster: ClusterSpec,
    works: Callable[[list[EngineInput]], bool],
    report: MemoryReport,
) -> Iterator[Candidate]:
    inp = _resolved({i.name: i for i in engines}[problem.engine], report)
    yield from _fraction(inp, engines, works, lower=False)
    for alloc in _reshapes(inp.component.alloc, cluster):
        yield override(inp.name, "backend", alloc), _swap(engines, inp.name, alloc=alloc)
    memory = report.engines.get(problem.engine)
    if (
        problem.kind == "kv"
        and memory is not None
        and memory.kv_tokens
        and _has(inp, "context_length")
    ):
        tokens = (memory.kv_tokens // TOKEN_STEP) * TOKEN_STEP
        if tokens:
            yield (
                override(inp.name, "context_length", tokens, inp.component.backend),
                _swap(engines, inp.name, context_length=tokens),
            )


def find_fix(
    problem: MemoryProblem,
    engines: Sequence[EngineInput],
    cluster: ClusterSpec,
    evaluate: Evaluate,
    before: MemoryReport,
) -> Optional[str]:
    """The first candidate change (as override text) after which `problem` is gone and no new
    problem appears, surely (at the estimate's high end) where one does that, else at its low
    end (a refusal only); None when no single knob or layout on these GPUs does it."""
    refused = problem in before.problems
    for sure in (True, False) if refused else (True,):
        found = _first_fix(problem, engines, cluster, evaluate, before, sure)
        if found is not None:
            return found
    return None


def _first_fix(
    problem: MemoryProblem,
    engines: Sequence[EngineInput],
    cluster: ClusterSpec,
    evaluate: Evaluate,
    before: MemoryReport,
    sure: bool,
) -> Optional[str]:
    def works(changed: list[EngineInput]) -> bool:
        return _solves(problem, before, evaluate(changed), sure)

    if problem.kind == "train":
        candidates = _train_candidates(problem, engines, cluster, works)
    elif problem.kind == "rollout":
        candidates = _rollout_candidates(problem, engines, cluster, works, before)
    elif problem.kind in ("kv", "weights"):
        candidates = _engine_candidates(problem, engines, cluster, works, before)
    else:
        return None
    for text, changed in candidates:
        if works(changed):
            return text
    return None


def memory_report(
    engines: Sequence[EngineInput], cluster: ClusterSpec, capacity_gib: Optional[float]
) -> MemoryReport:
    """Every GPU's need against `capacity_gib` (None: unknown), each problem (and the first
    risks) with the smallest change that would fit, as a copy-pasteable override."""
    report = evaluate(engines, cluster, capacity_gib)
    if not report.problems and not report.risks:
        return report

    def again(changed: Sequence[EngineInput]) -> MemoryReport:
        return evaluate(changed, cluster, capacity_gib)

    def fixed(found: tuple[MemoryProblem, ...], most: int) -> tuple[MemoryProblem, ...]:
        return tuple(
            dataclasses.replace(p, fix=find_fix(p, engines, cluster, again, report))
            if i < most
            else p
            for i, p in enumerate(found)
        )

    return dataclasses.replace(
        report,
        problems=fixed(report.problems, MAX_FIXES),
        risks=fixed(report.risks, MAX_RISK_FIXES if not report.problems else 0),
    )
