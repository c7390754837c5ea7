"""`plan --suggest`: layouts that fit, best first, as overrides to paste (pure).

Enumerates, for a model on N nodes x G GPUs: placements (collocated on every GPU with offload
on both sides, and disaggregated splits: rollout on the first k nodes, or on 1/4, 1/2, 3/4 of a
single node), rollout backends (every serving backend registered; t a power of two within a
node, whole-node instances with p when one node is not enough) and actor backends (every
training backend, over the dims it takes: d*t*p with e for MoE, c only without p: fsdp
d*t*c, megatron and archon d*t*p*e). For each actor layout it finds the largest max_tokens_per_mb
(a multiple of 1024, at most the requested one, at least the rollout's context_length when
set: one sample must fit a micro-batch) that fits, turning gradient checkpointing on when
that fits more (said in the overrides).

Throughput proxy, stated: generation = rollout instances x KV tokens per instance, each
instance counted up to KV_USEFUL_TOKENS (more KV than a server can decode at once does not
help, so many small instances beat one large one); training = tokens per micro-step over the
actor's data-parallel replicas (max_tokens_per_mb x d). Score = sqrt(generation x training);
collocated layouts count half, since their phases alternate on the same GPUs while
disaggregated engines run at the same time (AReaL's asynchronous RL). Ties go to less model
parallelism, then to the first backend listed; a layout that differs from a better one only
by its backends is left out.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from dataclasses import dataclass, field
from typing import Iterator, Optional

from launcher.memory.estimate import EngineInput, estimate, margin_gib
from launcher.memory.fix import TOKEN_STEP, memory_report, override
from launcher.memory.infer import InferenceOptions
from launcher.memory.model_shape import ModelShape
from launcher.memory.parts import GIB
from launcher.memory.train import Offload, TrainOptions
from launcher.spec import registry
from launcher.spec.alloc import ModelAllocation
from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import UserError
from launcher.spec.plan import ComponentPlan

POWERS = (1, 2, 4, 8, 16, 32, 64)
MAX_SPLITS = 32  # disaggregated node splits tried on a cluster of more nodes than this
BUDGET_S = 10.0  # the search stops here and says so (plan --suggest is interactive)
MAX_PIPELINE = 16  # deeper pipelines than this are not worth suggesting
COLLOCATED_SHARE = 0.5  # each phase has the GPUs about half of the time
# KV tokens an instance can put to use: a server decodes a few hundred sequences at a time
# (SGLang's cuda-graph batch reaches 256-512 on big cards), of 1-2K tokens each on average
KV_USEFUL_TOKENS = 512 * 1024


@dataclass(frozen=True)
class SuggestOptions:
    """What the user already chose: the actor's and the rollout's knobs, and which backends."""

    train: TrainOptions = field(default_factory=TrainOptions)
    infer: InferenceOptions = field(default_factory=InferenceOptions)
    # every registered backend of the kind, in the registry's order
    rollout_backends: tuple[str, ...] = field(
        default_factory=lambda: registry.backend_names(registry.SERVE)
    )
    actor_backends: tuple[str, ...] = field(
        default_factory=lambda: registry.backend_names(registry.TRAIN)
    )
    top: int = 5
    budget_s: float = BUDGET_S  # seconds of search; the layouts found by then are ranked


@dataclass(frozen=True)
class Suggestion:
    """One layout that fits, with the numbers it was ranked by."""

    mode: str  # "collocated" | "disaggregated"
    rollout: ModelAllocation
    actor: ModelAllocation
    rollout_gpus: int
    actor_gpus: int
    max_tokens_per_mb: int
    kv_tokens: int  # over all rollout instances
    train_tokens: int  # per micro-step over the actor's data-parallel replicas
    score: float
    requested_tokens: int  # the user's max_tokens_per_mb: no override when it fits as it is
    checkpointing: bool = False  # gradient checkpointing turned on for it (an override)

    @property
    def overrides(self) -> tuple[str, ...]:
        """What to type: backends, collocated placement with offload, the micro-batch size."""
        out = [
            override("rollout", "backend", self.rollout),
            override("actor", "backend", self.actor),
        ]
        if self.mode == "collocated":
            out += [
                "cluster.component_placement.rollout=all",
                "cluster.component_placement.actor=all",
                override("rollout", "release", True),
            ]
            out += [
                override("actor", f"offload.{k}", True) for k in ("weight", "optimizer", "grad")
            ]
        if self.checkpointing:
            out.append(override("actor", "gradient_checkpointing", True))
        if self.max_tokens_per_mb != self.requested_tokens:
            out.append(override("actor", "max_tokens_per_mb", self.max_tokens_per_mb))
        return tuple(out)

    def command(self, program: str = "areal-launch") -> str:
        """The copy-pasteable command line."""
        return " ".join([program] + [shlex.quote(o) for o in self.overrides])

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "rollout": str(self.rollout),
            "actor": str(self.actor),
            "max_tokens_per_mb": self.max_tokens_per_mb,
            "kv_tokens": self.kv_tokens,
            "train_tokens": self.train_tokens,
            "score": round(self.score),
            "overrides": list(self.overrides),
        }


def _alloc(
    backend: str, dp: int, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1
) -> Optional[ModelAllocation]:
    try:
        return ModelAllocation(backend, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep)
    except ValueError:  # AllocationError: sizes that do not divide
        return None


def rollout_layouts(
    shape: ModelShape, gpus: int, per_node: int, backends: tuple[str, ...]
) -> Iterator[ModelAllocation]:
    """Inference layouts on `gpus` GPUs: t within a node, p for whole-node instances."""
    for backend in backends:
        for t in POWERS:
            if t > per_node or gpus % t or shape.num_heads % t:
                continue
            for p in POWERS:
                if (p > 1 and t != per_node) or gpus % (t * p):
                    continue
                found = _alloc(backend, dp=gpus // (t * p), tp=t, pp=p)
                if found:
                    yield found


def actor_layouts(
    shape: ModelShape, gpus: int, per_node: int, backends: tuple[str, ...]
) -> Iterator[ModelAllocation]:
    """Training layouts on `gpus` GPUs (t within a node and dividing the heads)."""
    ts = [t for t in POWERS if t <= per_node and gpus % t == 0 and shape.num_heads % t == 0]
    experts = [e for e in POWERS if shape.is_moe and e > 1 and shape.num_experts % e == 0]
    for backend in backends:
        dims = registry.backend_dims(backend) or ""
        # c where there is no p: a pipelined trainer splits its layers instead (a smaller search)
        cs = (1, 2, 4) if "c" in dims and "p" not in dims else (1,)
        ps = (
            [p for p in POWERS if p <= MAX_PIPELINE and 2 * p <= shape.num_layers]
            if "p" in dims
            else [1]
        )
        es = [1] + experts if "e" in dims else [1]
        for t in ts:
            for p in ps:
                for c in cs:
                    if gpus % (t * p * c):
                        continue
                    for e in es:
                        if (gpus // p) % e:
                            continue
                        found = _alloc(backend, dp=gpus // (t * p * c), tp=t, pp=p, cp=c, ep=e)
                        if found:
                            yield found


def _splits(cluster: ClusterSpec) -> Iterator[tuple[str, int, int]]:
    """(mode, rollout GPUs, actor GPUs). On many nodes, MAX_SPLITS rollout node counts spread
    evenly (every one of 16384 took minutes; neighbours score alike)."""
    total, per = cluster.total_gpus, cluster.gpus_per_node
    yield "collocated", total, total
    if cluster.num_nodes > 1:
        n = cluster.num_nodes
        ks = (
            range(1, n)
            if n - 1 <= MAX_SPLITS
            else sorted(
                {max(1, min(n - 1, round(i * n / MAX_SPLITS))) for i in range(MAX_SPLITS + 1)}
            )
        )
        for k in ks:
            yield "disaggregated", k * per, total - k * per
    else:
        for r in sorted({per // 4, per // 2, 3 * per // 4} - {0}):
            yield "disaggregated", r, per - r


def _fitted(
    shape: ModelShape,
    alloc: ModelAllocation,
    opts: TrainOptions,
    budget: float,
    least: int,
    cache: dict,
) -> Optional[tuple[int, bool]]:
    """(max_tokens_per_mb, checkpointing turned on) for this actor layout: the user's options
    when the requested micro-batch fits with them, else the variant that fits more tokens
    (gradient checkpointing on, when the user has no recompute)."""
    mine = _largest_tokens(shape, alloc, opts, budget, least, cache)
    if mine == max(opts.max_tokens_per_mb, least) or opts.recompute_mode != "none":
        return None if mine is None else (mine, False)
    other = _largest_tokens(
        shape, alloc, dataclasses.replace(opts, gradient_checkpointing=True), budget, least, cache
    )
    if other is not None and (mine is None or other > mine):
        return other, True
    return None if mine is None else (mine, False)


def _largest_tokens(
    shape: ModelShape,
    alloc: ModelAllocation,
    opts: TrainOptions,
    budget: float,
    least: int,
    cache: dict,
) -> Optional[int]:
    """Largest max_tokens_per_mb (multiple of TOKEN_STEP, in [least, requested]) whose train
    peak fits `budget` bytes. The peak is linear in the tokens (activations and logits), so
    two estimates give the line and a third checks the rounded answer."""
    key = (alloc, opts, round(budget))
    if key in cache:
        return cache[key]

    def peak(tokens: int) -> float:
        return estimate(
            shape, alloc, dataclasses.replace(opts, max_tokens_per_mb=tokens), None, "cuda"
        ).peak

    lo = max(1, math.ceil(least / TOKEN_STEP))
    hi = max(opts.max_tokens_per_mb, least) // TOKEN_STEP
    found = None
    if lo <= hi:
        low, high = peak(lo * TOKEN_STEP), peak(hi * TOKEN_STEP)
        slope = (high - low) / max(1, hi - lo)
        steps = hi if high <= budget else lo + int((budget - low) // slope) if slope > 0 else lo
        steps = min(steps, hi)
        while steps >= lo and peak(steps * TOKEN_STEP) > budget:
            steps -= 1
        found = steps * TOKEN_STEP if steps >= lo else None
    cache[key] = found
    return found


@dataclass(frozen=True)
class Search:
    """What suggest_within found, and whether its time budget cut the search short."""

    found: list[Suggestion]
    cut: bool = False
    budget_s: float = BUDGET_S  # the search's budget


def suggest(
    shape: ModelShape,
    cluster: ClusterSpec,
    capacity_gib: Optional[float],
    options: SuggestOptions = SuggestOptions(),
) -> list[Suggestion]:
    """The best layouts that fit (at most options.top), each checked by memory_report."""
    return suggest_within(shape, cluster, capacity_gib, options).found


def suggest_within(
    shape: ModelShape,
    cluster: ClusterSpec,
    capacity_gib: Optional[float],
    options: SuggestOptions = SuggestOptions(),
) -> Search:
    """suggest(), searching for at most options.budget_s seconds (Search.cut when stopped)."""
    import time

    deadline = time.monotonic() + options.budget_s
    cut = False
    if capacity_gib is None:
        raise UserError(
            "plan --suggest needs the GPU memory: set cluster.gpu_memory_gib "
            "(an 80 GB card reports about 79.1)"
        )
    limit = (capacity_gib - margin_gib(capacity_gib)) * GIB
    # one sample must fit a micro-batch: the rollout's context when the user set one
    least = options.infer.context_length or TOKEN_STEP
    cache: dict = {}
    found: list[tuple] = []
    order = {b: i for i, b in enumerate(options.rollout_backends + options.actor_backends)}
    per = cluster.gpus_per_node
    for mode, r_gpus, a_gpus in _splits(cluster):
        if time.monotonic() > deadline:
            cut = True
            break
        together = mode == "collocated"
        infer = dataclasses.replace(options.infer, release=True) if together else options.infer
        train = (
            dataclasses.replace(options.train, offload=Offload(True, True, True))
            if together
            else options.train
        )
        servers = []
        for alloc in rollout_layouts(shape, r_gpus, per, options.rollout_backends):
            need = estimate(shape, alloc, infer, capacity_gib, "cuda")
            if need.notes or need.kv_tokens is None:
                continue
            servers.append((alloc, need))
        if not servers:
            continue
        residue = max(n.residue for _, n in servers) if together else 0.0
        for actor in actor_layouts(shape, a_gpus, per, options.actor_backends):
            if time.monotonic() > deadline:
                cut = True
                break
            fitted = _fitted(shape, actor, train, limit - residue, least, cache)
            if fitted is None:
                continue
            tokens, checkpointing = fitted
            trainer = estimate(
                shape,
                actor,
                dataclasses.replace(
                    train,
                    max_tokens_per_mb=tokens,
                    gradient_checkpointing=checkpointing or train.gradient_checkpointing,
                ),
                None,
                "cuda",
            )
            train_tokens = tokens * actor.dp
            for alloc, need in servers:
                if need.peak + (trainer.residue if together else 0.0) > limit:
                    continue
                kv = need.kv_tokens or 0
                generation = alloc.dp * min(kv, KV_USEFUL_TOKENS)
                score = math.sqrt(generation * train_tokens) * (
                    COLLOCATED_SHARE if together else 1.0
                )
                found.append(
                    (
                        -round(score),
                        alloc.tp * alloc.pp,
                        actor.tp * actor.pp * actor.cp * actor.ep,
                        order[alloc.backend],
                        order[actor.backend],
                        len(found),
                        (
                            mode,
                            alloc,
                            actor,
                            r_gpus,
                            a_gpus,
                            tokens,
                            kv * alloc.dp,
                            train_tokens,
                            score,
                            checkpointing,
                        ),
                    )
                )
    found.sort()  # best first; the index keeps the sort from comparing allocations
    best: list[Suggestion] = []
    seen = set()
    for *_, (
        mode,
        alloc,
        actor,
        r_gpus,
        a_gpus,
        tokens,
        kv,
        train_tokens,
        score,
        checkpointing,
    ) in found:
        s = Suggestion(
            mode,
            alloc,
            actor,
            r_gpus,
            a_gpus,
            tokens,
            kv,
            train_tokens,
            score,
            options.train.max_tokens_per_mb,
            checkpointing,
        )
        # the same layout with another backend of the same kind says nothing new
        same = (
            s.mode,
            s.rollout.dp,
            s.rollout.tp,
            s.rollout.pp,
            s.actor.dp,
            s.actor.tp,
            s.actor.pp,
            s.actor.cp,
            s.actor.ep,
        )
        if same in seen or not _confirmed(s, shape, cluster, capacity_gib, options):
            continue
        seen.add(same)
        best.append(s)
        if len(best) == options.top:
            break
    return Search(best, cut, options.budget_s)


def _confirmed(
    s: Suggestion,
    shape: ModelShape,
    cluster: ClusterSpec,
    capacity_gib: float,
    options: SuggestOptions,
) -> bool:
    """The whole plan's memory check agrees that the suggestion fits."""
    together = s.mode == "collocated"
    rollout_gpus = tuple(range(s.rollout_gpus))
    actor_gpus = (
        rollout_gpus if together else tuple(range(s.rollout_gpus, s.rollout_gpus + s.actor_gpus))
    )
    infer = dataclasses.replace(options.infer, release=together or options.infer.release)
    train = dataclasses.replace(
        options.train,
        max_tokens_per_mb=s.max_tokens_per_mb,
        gradient_checkpointing=s.checkpointing or options.train.gradient_checkpointing,
        offload=Offload(True, True, True) if together else options.train.offload,
    )
    engines = [
        EngineInput(ComponentPlan("rollout", s.rollout, None, rollout_gpus), shape, infer),
        EngineInput(ComponentPlan("actor", s.actor, None, actor_gpus), shape, train),
    ]
    return memory_report(engines, cluster, capacity_gib).fits is True
