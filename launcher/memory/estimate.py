"""Will it fit? Per-GPU memory of every engine in a plan, against the card (docs/architecture.md
§10).

Pure: engines come in as the plan's ComponentPlans (allocation + global GPU list) with a
ModelShape and typed options; nothing here reads a file, the environment or the Hydra config.

Phases. Rollout engines (sglang, vllm) serve in the rollout phase; trainers (fsdp, megatron,
archon) run in the train phase. On a GPU shared by both, each phase holds its own engines at
their peak plus what the others keep when released (memory saver / sleep for servers,
`offload` for trainers); an engine that does not release keeps everything, so engines that
share a GPU without release are summed. Trainers on one GPU (actor and ref) take turns: one
runs at its peak while the others keep what they keep between phases (their states, unless
offloaded; activations are freed). A GPU fits when its larger phase
plus the margin fits the card. The margin is max(5 % of the card, 3 GiB) on GPUs (allocator
fragmentation and caching), 5 % of the host's memory on cpu.

On cpu every "GPU" is a process slot on the host: the check is the sum of all processes (plus
a torchrun agent per trainer job and node) against the host's memory, since the local
runner runs every virtual node on this machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Sequence, Union

from launcher.memory.infer import InferenceOptions, estimate_inference
from launcher.memory.model_shape import ModelShape
from launcher.memory.parts import CPU_TORCHRUN_AGENT_GIB, GIB, EngineNeed, gib
from launcher.memory.train import TrainOptions, estimate_training
from launcher.spec.alloc import ModelAllocation
from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import LaunchError
from launcher.spec.offload import Offload
from launcher.spec.plan import ComponentPlan

__all__ = [
    "EngineInput",
    "EngineMemory",
    "GPUGroup",
    "MemoryProblem",
    "MemoryReport",
    "margin_gib",
    "TrainOptions",
    "InferenceOptions",
    "Offload",
]

EngineOptions = Union[TrainOptions, InferenceOptions]
MARGIN_FRACTION = 0.05
MARGIN_MIN_GIB = 3.0
MAX_FIXES = 4  # problems that get a fix searched (the first ones; the rest are the same cause)


@dataclass(frozen=True)
class EngineInput:
    """One engine of the plan, as the estimator needs it. shape None: memory unknown."""

    component: ComponentPlan
    shape: Optional[ModelShape]
    options: Optional[EngineOptions] = None  # None: the defaults of its kind
    # a worker component's GiB per process (its `mem_gib`) and whether it releases its GPU
    # memory while the trainers train (`offload`): no model, a fixed need
    process_gib: Optional[float] = None
    releases: bool = False

    def __post_init__(self) -> None:
        want = InferenceOptions if self.component.is_inference else TrainOptions
        if self.options is None:
            object.__setattr__(self, "options", want())
        elif not isinstance(self.options, want):
            raise LaunchError(
                f"{self.component.name} ({self.component.alloc}) takes "
                f"{want.__name__}, not {type(self.options).__name__}"
            )

    @property
    def name(self) -> str:
        return self.component.name


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
        }

    def line(self) -> str:
        """One line for the user: what, where, need vs have, and the override to try."""
        fix = f"; smallest change that fits: {self.fix}" if self.fix else ""
        return self.message + fix


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

    def gpus(self) -> list[dict]:
        """One entry per GPU, ascending: node, gpu, total_gib, engines {name: GiB} (the GiB
        of the larger phase; `groups` say which phase that is)."""
        per = self.gpus_per_node
        group_of: dict[int, int] = {}
        for k, group in enumerate(self.groups):
            group_of.update(dict.fromkeys(group.gpus, k))
        total = [g.total_gib for g in self.groups]
        engines = [dict(g.engines) for g in self.groups]  # one dict per group, shared by rows
        return [
            {"node": g // per, "gpu": g, "total_gib": total[k], "engines": engines[k]}
            for g, k in sorted(group_of.items())
        ]

    def to_dict(self) -> dict:
        out = {
            "gpu_capacity_gib": self.capacity_gib,
            "fits": self.fits,
            "device": self.device,
            "margin_gib": self.margin_gib,
            "gpus": self.gpus(),
            "engines": {n: e.to_dict() for n, e in self.engines.items()},
            "problems": [p.to_dict() for p in self.problems],
            "warnings": list(self.warnings),
        }
        if self.device == "cpu":
            out["host_need_gib"] = self.host_need_gib
        return out

    def error(self) -> Optional[str]:
        """The message that refuses the plan (None when it fits or memory is unknown)."""
        if not self.problems:
            return None
        more = len(self.problems) - 1
        tail = f" (and {more} more: see the plan's memory section)" if more else ""
        return self.problems[0].line() + tail


def margin_gib(capacity_gib: float, device: str = "cuda") -> float:
    """What stays free on purpose: max(5 % of the card, 3 GiB); cpu: 5 % of the host."""
    if device == "cpu":
        return round(MARGIN_FRACTION * capacity_gib, 2)
    return round(max(MARGIN_FRACTION * capacity_gib, MARGIN_MIN_GIB), 2)


@lru_cache(maxsize=4096)
def estimate(
    shape: ModelShape,
    alloc: ModelAllocation,
    options: EngineOptions,
    capacity_gib: Optional[float],
    device: str,
) -> EngineNeed:
    """One engine's need per GPU (cached: plans and suggestions ask for the same ones often)."""
    if isinstance(options, InferenceOptions):
        return estimate_inference(shape, alloc, options, capacity_gib, device)
    return estimate_training(shape, alloc, options, device)


def _phases(names: Sequence[str], needs: dict[str, EngineNeed]) -> dict[str, tuple[float, dict]]:
    """phase -> (bytes, {engine: bytes}) on a GPU holding `names`."""
    servers = [n for n in names if needs[n].phase == "rollout"]
    trainers = [n for n in names if needs[n].phase == "train"]
    out: dict[str, tuple[float, dict]] = {}
    if servers:
        held = {n: needs[n].peak for n in servers}
        held.update({n: needs[n].residue for n in trainers})
        out["rollout"] = (sum(held.values()), held)
    if trainers:
        best: Optional[dict] = None
        for running in trainers:
            held = {n: needs[n].residue for n in names if n != running}
            held[running] = needs[running].peak
            if best is None or sum(held.values()) > sum(best.values()):
                best = held
        assert best is not None
        out["train"] = (sum(best.values()), best)
    return out


def _engine_memory(inp: EngineInput, need: EngineNeed) -> EngineMemory:
    return EngineMemory(
        name=inp.name,
        spec=str(inp.component.alloc),
        phase=need.phase,
        per_gpu_gib=gib(need.peak),
        released_gib=gib(need.residue),
        parts={k: gib(v) for k, v in need.parts.items()},
        kv_tokens=need.kv_tokens,
        context_tokens=need.context_tokens,
        mem_fraction=need.mem_fraction,
    )


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


def evaluate(
    engines: Sequence[EngineInput], cluster: ClusterSpec, capacity_gib: Optional[float]
) -> MemoryReport:
    """The report without the fix search (memory_report adds fixes)."""
    device = cluster.device
    margin = margin_gib(capacity_gib, device) if capacity_gib is not None else 0.0
    needs, warnings = _engine_needs(engines, capacity_gib, device)
    specs = {inp.name: str(inp.component.alloc) for inp in engines}
    memories = {
        inp.name: _engine_memory(inp, needs[inp.name]) for inp in engines if inp.name in needs
    }
    problems = [
        problem
        for inp in engines
        if inp.name in needs and inp.process_gib is None
        for problem in _engine_problems(inp, needs[inp.name], specs, cluster.gpus_per_node)
    ]
    groups, overflows = _gpu_groups_report(engines, needs, specs, cluster, capacity_gib, margin)
    problems += overflows
    host_need = None
    if device == "cpu":
        host_need = _host_need(engines, needs, cluster)
        if capacity_gib is not None and host_need + margin > capacity_gib:
            problems.append(_host_problem(needs, host_need, margin, capacity_gib))
    if capacity_gib is None:
        warnings.append(
            "GPU memory unknown: set cluster.gpu_memory_gib to check that the plan fits"
        )
    unknown = capacity_gib is None or len(needs) < len(engines)
    return MemoryReport(
        device=device,
        capacity_gib=capacity_gib,
        margin_gib=margin,
        fits=False if problems else (None if unknown else True),
        engines=memories,
        groups=tuple(groups),
        problems=tuple(problems),
        warnings=tuple(warnings),
        gpus_per_node=cluster.gpus_per_node,
        host_need_gib=host_need,
    )


def _engine_needs(
    engines: Sequence[EngineInput], capacity_gib: Optional[float], device: str
) -> tuple[dict[str, EngineNeed], list[str]]:
    """Each engine's need per GPU (one that runs inside an earlier engine's trainer job
    counts no process overhead of its own), and a warning per engine of unknown memory."""
    needs: dict[str, EngineNeed] = {}
    warnings: list[str] = []
    for inp in engines:
        if inp.process_gib is not None:
            needs[inp.name] = worker_need(inp)
        elif inp.shape is None:
            warnings.append(
                f"memory of {inp.name} unknown: no config.json for its model, so "
                "its GPUs are not checked"
            )
        else:
            need = estimate(inp.shape, inp.component.alloc, inp.options, capacity_gib, device)
            if _joins_a_trainer_job(inp, engines, needs):
                need = need.in_shared_process()
            needs[inp.name] = need
    return needs, warnings


def _engine_problems(
    inp: EngineInput, need: EngineNeed, specs: dict[str, str], per: int
) -> list[MemoryProblem]:
    """What does not fit inside one engine whatever shares its GPUs (weights over its
    budget, a KV cache short of one context), as problems on its first GPU."""
    first = inp.component.gpus[0] if inp.component.gpus else None
    return [
        MemoryProblem(
            kind="weights" if note.startswith("weights") else "kv",
            engine=inp.name,
            gpu=first,
            node=None if first is None else first // per,
            need_gib=gib(
                need.parts["weights"] + need.kv_bytes_per_token * (need.context_tokens or 0)
            ),
            have_gib=gib(need.parts["weights"] + need.parts["kv_cache"]),
            message=f"{inp.name} ({specs[inp.name]}) on GPU {first}: {note}",
        )
        for note in need.notes
    ]


def _gpu_groups_report(
    engines: Sequence[EngineInput],
    needs: dict[str, EngineNeed],
    specs: dict[str, str],
    cluster: ClusterSpec,
    capacity_gib: Optional[float],
    margin: float,
) -> tuple[list[GPUGroup], list[MemoryProblem]]:
    """Each set of GPUs holding the same engines, by phase, and every phase that overflows
    its GPUs (not on cpu: there the host is checked as a whole)."""
    groups, problems = [], []
    limit = None if capacity_gib is None else (capacity_gib - margin) * GIB
    for names, gpus in _gpu_groups([inp for inp in engines if inp.name in needs]).items():
        phases = _phases(names, needs)
        phase = max(phases, key=lambda k: phases[k][0])
        total, held = phases[phase]
        groups.append(
            GPUGroup(
                gpus=gpus,
                total_gib=gib(total),
                phase=phase,
                engines={n: gib(v) for n, v in held.items()},
                phases={k: gib(v[0]) for k, v in phases.items()},
            )
        )
        if limit is None or capacity_gib is None or cluster.device == "cpu":
            continue
        for name, (value, parts) in phases.items():
            if value > limit:
                overflow = Overflow(name, value, parts, gpus, names)
                problems.append(overflow.problem(needs, specs, margin, capacity_gib, cluster))
    groups.sort(key=lambda grp: grp.gpus[0])
    return groups, problems


@dataclass(frozen=True)
class Overflow:
    """One phase of one set of GPUs that does not fit: its bytes and each engine's."""

    phase: str
    value: float
    parts: dict[str, float]
    gpus: tuple[int, ...]
    names: tuple[str, ...]

    def problem(
        self,
        needs: dict[str, EngineNeed],
        specs: dict[str, str],
        margin: float,
        capacity_gib: float,
        cluster: ClusterSpec,
    ) -> MemoryProblem:
        """The problem on the set's first GPU, named after the engine that runs the phase."""
        running = max(
            (n for n in self.parts if needs[n].phase == self.phase), key=lambda n: self.parts[n]
        )
        g, per = self.gpus[0], cluster.gpus_per_node
        alike = (
            f" (and {len(self.gpus) - 1} more GPUs with the same engines)"
            if len(self.gpus) > 1
            else ""
        )
        said = _describe(self.phase, self.parts, running, specs, needs[running].parts)
        return MemoryProblem(
            kind=self.phase,
            engine=running,
            gpu=g,
            node=g // per,
            need_gib=gib(self.value + margin * GIB),
            have_gib=capacity_gib,
            engines=self.names,
            message=(
                f"GPU {g} (node {g // per}) does not fit: {said} GiB + margin {margin} GiB "
                f"= {(self.value / GIB + margin):.1f} GiB > {capacity_gib} GiB{alike}"
            ),
        )


def _host_problem(
    needs: dict[str, EngineNeed], host_need: float, margin: float, capacity_gib: float
) -> MemoryProblem:
    """cpu: the run's processes together do not fit this machine's memory."""
    return MemoryProblem(
        kind="host",
        engine=max(needs, key=lambda n: needs[n].peak),
        gpu=None,
        node=None,
        need_gib=round(host_need + margin, 2),
        have_gib=capacity_gib,
        engines=tuple(needs),
        message=(
            f"this machine's memory does not fit the run: processes "
            f"{host_need:.1f} GiB + margin {margin} GiB > {capacity_gib} GiB"
        ),
    )


def worker_need(inp: EngineInput) -> EngineNeed:
    """A worker's bytes on its fullest GPU: `mem_gib` per process times the processes there
    (on the host when it has no GPU). It runs beside the servers (the rollout phase) and keeps
    its memory while the trainers train unless it offloads."""
    per_gpu: dict[int, int] = {}
    for inst in inp.component.instances:
        for g in inst.gpus:
            per_gpu[g] = per_gpu.get(g, 0) + 1
    count = max(per_gpu.values(), default=len(inp.component.instances))
    held = (inp.process_gib or 0.0) * GIB * count
    return EngineNeed(
        phase="rollout",
        parts={"processes": held},
        released={"processes": 0.0 if inp.releases else held},
    )


def _gpu_groups(engines: Sequence[EngineInput]) -> dict[tuple[str, ...], tuple[int, ...]]:
    """The GPUs that hold exactly the same engines, keyed by those engines (in input order).

    Refines one part per engine with set operations, so a plan of thousands of GPUs costs a
    few set operations per engine rather than a Python step per GPU and engine."""
    parts: list[tuple[frozenset[int], tuple[str, ...]]] = []
    for inp in engines:
        mine = frozenset(inp.component.gpus)
        rest = mine
        refined = []
        for part, names in parts:
            inside, outside = part & mine, part - mine
            if inside:
                refined.append((inside, names + (inp.name,)))
            if outside:
                refined.append((outside, names))
            rest = rest - part
        if rest:
            refined.append((rest, (inp.name,)))
        parts = refined
    return {names: tuple(sorted(part)) for part, names in parts}


def _joins_a_trainer_job(
    inp: EngineInput, engines: Sequence[EngineInput], done: dict[str, EngineNeed]
) -> bool:
    """Whether a training engine runs inside an earlier one's processes: same GPUs and the
    same allocation make one torchrun job (launcher.engines.torchrun, when their flags agree),
    which builds both models in the same workers."""
    comp = inp.component
    return not comp.is_inference and any(
        other.name in done
        and not other.component.is_inference
        and other.component.alloc == comp.alloc
        and other.component.gpus == comp.gpus
        for other in engines
        if other is not inp
    )


def _host_need(
    engines: Sequence[EngineInput], needs: dict[str, EngineNeed], cluster: ClusterSpec
) -> float:
    """GiB of every process of the run on the host (cpu): each slot's peak, plus one torchrun
    agent per trainer job and node. No release on cpu (vLLM's sleep mode is refused there)."""
    total = 0.0
    jobs = set()
    for inp in engines:
        if inp.name not in needs:
            continue
        if inp.process_gib is not None:  # every process of a worker, on GPU slots or not
            total += inp.process_gib * GIB * len(inp.component.instances)
            continue
        total += needs[inp.name].peak * len(inp.component.gpus)
        if not inp.component.is_inference:
            jobs.add((inp.component.alloc, inp.component.gpus))
    for _, gpus in jobs:
        total += CPU_TORCHRUN_AGENT_GIB * GIB * len({g // cluster.gpus_per_node for g in gpus})
    return total / GIB
