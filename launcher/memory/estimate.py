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
offloaded; activations are freed). The margin is max(5 % of the card, 3 GiB) on GPUs
(allocator fragmentation and caching), 5 % of the host's memory on cpu.

Every term carries its measured error (launcher.memory.error_table), so every total is an
estimate within a range. A phase whose low end plus the margin does not fit its GPUs is a
problem (the plan is refused); one whose high end plus the margin does not fit, but whose low
end does, is a risk (said, naming the term whose range decides); the plan surely fits when
every high end does.

On cpu every "GPU" is a process slot on the host: the check is the sum of all processes (plus
a torchrun agent per trainer job and node) against the host's memory, since the local
runner runs every virtual node on this machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Sequence, Union

from launcher.memory.error_table import HOST, term_error
from launcher.memory.infer import InferenceOptions, estimate_inference
from launcher.memory.model_shape import ModelShape
from launcher.memory.parts import CPU_TORCHRUN_AGENT_GIB, GIB, EngineNeed, gib
from launcher.memory.phases import Overflow, phases_on
from launcher.memory.report import EngineMemory, GPUGroup, MemoryProblem, MemoryReport
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


def _engine_memory(inp: EngineInput, need: EngineNeed) -> EngineMemory:
    low, high = need.peak_range()
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
        range_gib=(gib(low), gib(high)),
        parts_range={k: (gib(lo), gib(hi)) for k, (lo, hi) in need.part_ranges().items()},
    )


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
    groups, overflows, risks = _gpu_groups_report(
        engines, needs, specs, cluster, capacity_gib, margin
    )
    problems += overflows
    host_need = host_range = None
    if device == "cpu":
        host_need, host_range = _host_need(engines, needs, cluster)
        if capacity_gib is not None:
            host = Host(host_need, host_range, margin, capacity_gib)
            problems += host.problems(needs)
            risks += host.risks(needs)
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
        risks=tuple(risks),
        host_range=host_range,
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
) -> tuple[list[GPUGroup], list[MemoryProblem], list[MemoryProblem]]:
    """Each set of GPUs holding the same engines, by phase; every phase that overflows its
    GPUs even at the estimate's low end (problems), and every other that overflows them at its
    high end (risks). Not on cpu: there the host is checked as a whole."""
    groups, problems, risks = [], [], []
    limit = None if capacity_gib is None else (capacity_gib - margin) * GIB
    for names, gpus in _gpu_groups([inp for inp in engines if inp.name in needs]).items():
        phases = phases_on(names, needs)
        phase = max(phases, key=lambda k: phases[k].total)
        load = phases[phase]
        groups.append(
            GPUGroup(
                gpus=gpus,
                total_gib=gib(load.total),
                phase=phase,
                engines={n: gib(v) for n, v in load.held.items()},
                phases={k: gib(v.total) for k, v in phases.items()},
                low_gib=gib(max(v.low for v in phases.values())),
                high_gib=gib(max(v.high for v in phases.values())),
            )
        )
        if limit is None or capacity_gib is None or cluster.device == "cpu":
            continue
        for name, each in phases.items():
            if each.high > limit:
                said = Overflow(name, each, gpus, names, margin, capacity_gib)
                if each.low > limit:
                    problems.append(said.problem(needs, specs, cluster))
                else:
                    risks.append(said.risk(needs, specs, cluster))
    groups.sort(key=lambda grp: grp.gpus[0])
    return groups, problems, risks


@dataclass(frozen=True)
class Host:
    """cpu: every process of the run on this machine, against its memory."""

    need_gib: float
    need_range: tuple[float, float]
    margin: float
    capacity_gib: float

    def _problem(
        self, needs: dict[str, EngineNeed], message: str, risk: bool = False
    ) -> MemoryProblem:
        low, high = self.need_range
        return MemoryProblem(
            kind="host",
            engine=max(needs, key=lambda n: needs[n].peak),
            gpu=None,
            node=None,
            need_gib=round(self.need_gib + self.margin, 2),
            have_gib=self.capacity_gib,
            engines=tuple(needs),
            message=message,
            low_gib=round(low + self.margin, 2),
            high_gib=round(high + self.margin, 2),
            risk=risk,
        )

    def problems(self, needs: dict[str, EngineNeed]) -> list[MemoryProblem]:
        """The run's processes do not fit even at the estimate's low end."""
        low = self.need_range[0]
        if low + self.margin <= self.capacity_gib:
            return []
        return [
            self._problem(
                needs,
                f"this machine's memory does not fit the run: processes "
                f"{self.need_gib:.1f} GiB ({low:.1f} at the estimate's low end) + margin "
                f"{self.margin} GiB > {self.capacity_gib} GiB",
            )
        ]

    def risks(self, needs: dict[str, EngineNeed]) -> list[MemoryProblem]:
        """The low end fits, the high end does not."""
        low, high = self.need_range
        if high + self.margin <= self.capacity_gib or low + self.margin > self.capacity_gib:
            return []
        return [
            self._problem(
                needs,
                f"this machine's memory may not fit the run: processes {low:.1f}-"
                f"{high:.1f} GiB by the estimate's range + margin {self.margin} GiB, against "
                f"{self.capacity_gib} GiB",
                risk=True,
            )
        ]


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
) -> tuple[float, tuple[float, float]]:
    """GiB of every process of the run on the host (cpu), and its low and high end: each
    slot's peak, plus one torchrun agent per trainer job and node. No release on cpu (vLLM's
    sleep mode is refused there)."""
    total = low = high = 0.0
    jobs = set()
    for inp in engines:
        if inp.name not in needs:
            continue
        if inp.process_gib is not None:  # every process of a worker, on GPU slots or not
            held = inp.process_gib * GIB * len(inp.component.instances)
            total, low, high = total + held, low + held, high + held
            continue
        slots = len(inp.component.gpus)
        lo, hi = needs[inp.name].peak_range()
        total += needs[inp.name].peak * slots
        low, high = low + lo * slots, high + hi * slots
        if not inp.component.is_inference:
            jobs.add((inp.component.alloc, inp.component.gpus))
    agent = term_error(HOST, "torchrun_agent", "cpu")
    for _, gpus in jobs:
        agents = CPU_TORCHRUN_AGENT_GIB * GIB * len({g // cluster.gpus_per_node for g in gpus})
        total, low, high = total + agents, low + agents * agent.low, high + agents * agent.high
    return total / GIB, (round(low / GIB, 2), round(high / GIB, 2))
