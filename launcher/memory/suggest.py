"""`plan --suggest`: layouts that fit, best first, as overrides to paste (pure).

Lays out the policy (launcher.spec.builtins POLICY, the trainer) and the primary server it
feeds (PRIMARY). Enumerates, for a model on N nodes x G GPUs: placements (collocated on every
GPU with offload on both sides, and disaggregated splits: the servers on the first k nodes, or
on 1/4, 1/2, 3/4 of a single node), serving backends (every one registered; t a power of two
within a node, whole-node instances with p when one node is not enough) and training backends
(every one registered, over the dims its record says --suggest varies: d*t*p with e for MoE,
or d*t*c). For each trainer layout it finds the largest max_tokens_per_mb (a multiple of 1024,
at most the requested one, at least the servers' context_length when set: one sample must fit
a micro-batch) that fits, turning gradient checkpointing on when that fits more (said in the
overrides).

Throughput proxy, stated: generation = server instances x KV tokens per instance, each
instance counted up to KV_USEFUL_TOKENS (more KV than a server can decode at once does not
help, so many small instances beat one large one); training = tokens per micro-step over the
trainer's data-parallel replicas (max_tokens_per_mb x d). Score = sqrt(generation x training);
collocated layouts count half, since their phases alternate on the same GPUs while
disaggregated engines run at the same time (asynchronous RL). Ties go to less model
parallelism, then to the first backend listed; a layout that differs from a better one only
by its backends is left out.

By the estimate's high end: a layout fits surely when its range's high end fits (its micro-batch
the largest that does); one that fits only at the low end (the plan would be warned, not
refused) ranks below every one that surely fits.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from dataclasses import dataclass, field
from typing import Iterator, Optional

from launcher.memory.estimate import EngineInput, estimate, evaluate, margin_gib
from launcher.memory.fix import TOKEN_STEP, override
from launcher.memory.infer import InferenceOptions
from launcher.memory.model_shape import ModelShape
from launcher.memory.parts import GIB, EngineNeed
from launcher.memory.train import TrainOptions
from launcher.spec import registry
from launcher.spec.alloc import ModelAllocation
from launcher.spec.builtins import POLICY, PRIMARY
from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import UserError
from launcher.spec.offload import Offload
from launcher.spec.plan import ComponentPlan

POWERS = (1, 2, 4, 8, 16, 32, 64)
MAX_SPLITS = 32  # disaggregated node splits tried on a cluster of more nodes than this
BUDGET_S = 10.0  # the search stops here and says so (plan --suggest is interactive)
MAX_PIPELINE = 16  # deeper pipelines than this are not worth suggesting
LOW, HIGH = 0, 1  # the ends of an estimate's range (EngineNeed.peak_range)
COLLOCATED_SHARE = 0.5  # each phase has the GPUs about half of the time
# KV tokens an instance can put to use: a server decodes a few hundred sequences at a time
# (SGLang's cuda-graph batch reaches 256-512 on big cards), of 1-2K tokens each on average
KV_USEFUL_TOKENS = 512 * 1024


@dataclass(frozen=True)
class SuggestOptions:
    """What the user already chose: the trainer's and the servers' knobs, and which backends."""

    train: TrainOptions = field(default_factory=TrainOptions)
    infer: InferenceOptions = field(default_factory=InferenceOptions)
    # every registered backend of the kind, in the registry's order
    server_backends: tuple[str, ...] = field(
        default_factory=lambda: registry.backend_names(registry.SERVE)
    )
    trainer_backends: tuple[str, ...] = field(
        default_factory=lambda: registry.backend_names(registry.TRAIN)
    )
    top: int = 5
    budget_s: float = BUDGET_S  # seconds of search; the layouts found by then are ranked


@dataclass(frozen=True)
class Suggestion:
    """One layout that fits, with the numbers it was ranked by."""

    mode: str  # "collocated" | "disaggregated"
    server: ModelAllocation  # the primary server's (PRIMARY)
    trainer: ModelAllocation  # the policy's (POLICY)
    server_gpus: int
    trainer_gpus: int
    max_tokens_per_mb: int
    kv_tokens: int  # over all server instances
    train_tokens: int  # per micro-step over the trainer's data-parallel replicas
    score: float
    requested_tokens: int  # the user's max_tokens_per_mb: no override when it fits as it is
    checkpointing: bool = False  # gradient checkpointing turned on for it (an override)
    sure: bool = True  # it fits at the estimate's high end (else at its low end only)

    @property
    def overrides(self) -> tuple[str, ...]:
        """What to type: backends, collocated placement with offload, the micro-batch size."""
        out = [override(PRIMARY, "backend", self.server), override(POLICY, "backend", self.trainer)]
        if self.mode == "collocated":
            out += [
                f"cluster.component_placement.{PRIMARY}=all",
                f"cluster.component_placement.{POLICY}=all",
                override(PRIMARY, "release", True),
            ]
            out += [override(POLICY, f"offload.{k}", True) for k in ("weight", "optimizer", "grad")]
        if self.checkpointing:
            out.append(override(POLICY, "gradient_checkpointing", True))
        if self.max_tokens_per_mb != self.requested_tokens:
            out.append(override(POLICY, "max_tokens_per_mb", self.max_tokens_per_mb))
        return tuple(out)

    def command(self, program: str = "areal-launch") -> str:
        """The copy-pasteable command line."""
        return " ".join([program] + [shlex.quote(o) for o in self.overrides])

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            PRIMARY: str(self.server),
            POLICY: str(self.trainer),
            "max_tokens_per_mb": self.max_tokens_per_mb,
            "kv_tokens": self.kv_tokens,
            "train_tokens": self.train_tokens,
            "score": round(self.score),
            "sure": self.sure,
            "overrides": list(self.overrides),
        }


def _alloc(
    backend: str, dp: int, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1
) -> Optional[ModelAllocation]:
    try:
        return ModelAllocation(backend, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep)
    except ValueError:  # AllocationError: sizes that do not divide
        return None


def server_layouts(
    shape: ModelShape, gpus: int, per_node: int, backends: tuple[str, ...]
) -> Iterator[ModelAllocation]:
    """Inference layouts on `gpus` GPUs: t within a node, p for whole-node instances."""
    for backend in backends:
        dims = registry.backend_facts(backend).searched_dims
        for t in POWERS if "t" in dims else (1,):
            if t > per_node or gpus % t or shape.num_heads % t:
                continue
            for p in POWERS if "p" in dims else (1,):
                if (p > 1 and t != per_node) or gpus % (t * p):
                    continue
                found = _alloc(backend, dp=gpus // (t * p), tp=t, pp=p)
                if found:
                    yield found


def trainer_layouts(
    shape: ModelShape, gpus: int, per_node: int, backends: tuple[str, ...]
) -> Iterator[ModelAllocation]:
    """Training layouts on `gpus` GPUs (t within a node and dividing the heads), over the
    dims each backend's record says to vary."""
    ts = [t for t in POWERS if t <= per_node and gpus % t == 0 and shape.num_heads % t == 0]
    experts = [e for e in POWERS if shape.is_moe and e > 1 and shape.num_experts % e == 0]
    for backend in backends:
        dims = registry.backend_facts(backend).searched_dims
        tps = ts if "t" in dims else [1]
        cs = (1, 2, 4) if "c" in dims else (1,)
        ps = (
            [p for p in POWERS if p <= MAX_PIPELINE and 2 * p <= shape.num_layers]
            if "p" in dims
            else [1]
        )
        es = [1] + experts if "e" in dims else [1]
        for t in tps:
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
    """(mode, server GPUs, trainer GPUs). On many nodes, MAX_SPLITS server node counts spread
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
    end: int = HIGH,
) -> Optional[tuple[int, bool]]:
    """(max_tokens_per_mb, checkpointing turned on) for this trainer layout: the user's options
    when the requested micro-batch fits with them, else the variant that fits more tokens
    (gradient checkpointing on, when the user has no recompute). `end`: which end of the
    estimate's range must fit."""
    mine = _largest_tokens(shape, alloc, opts, budget, least, cache, end)
    if mine == max(opts.max_tokens_per_mb, least) or opts.recompute_mode != "none":
        return None if mine is None else (mine, False)
    checkpointed = dataclasses.replace(opts, gradient_checkpointing=True)
    other = _largest_tokens(shape, alloc, checkpointed, budget, least, cache, end)
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
    end: int = HIGH,
) -> Optional[int]:
    """Largest max_tokens_per_mb (multiple of TOKEN_STEP, in [least, requested]) whose train
    peak (at `end` of its range) fits `budget` bytes. The peak is linear in the tokens
    (activations and logits), so two estimates give the line and a third checks the rounded
    answer."""
    key = (alloc, opts, round(budget), end)
    if key in cache:
        return cache[key]

    def peak(tokens: int) -> float:
        changed = dataclasses.replace(opts, max_tokens_per_mb=tokens)
        return estimate(shape, alloc, changed, None, "cuda").peak_range()[end]

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

    if capacity_gib is None:
        raise UserError(
            "plan --suggest needs the GPU memory: set cluster.gpu_memory_gib "
            "(an 80 GB card reports about 79.1)"
        )
    found, cut = _search(shape, cluster, capacity_gib, options, time.monotonic() + options.budget_s)
    order = {b: i for i, b in enumerate(options.server_backends + options.trainer_backends)}
    found.sort(  # sure first, best first; ties: less model parallel, then the backends' order
        key=lambda s: (
            not s.sure,
            -round(s.score),
            s.server.tp * s.server.pp,
            s.trainer.tp * s.trainer.pp * s.trainer.cp * s.trainer.ep,
            order[s.server.backend],
            order[s.trainer.backend],
        )
    )
    best: list[Suggestion] = []
    seen = set()
    for s in found:
        # the same layout with another backend of the same kind says nothing new
        a, b = s.server, s.trainer
        same = (s.mode, a.dp, a.tp, a.pp, b.dp, b.tp, b.pp, b.cp, b.ep)
        if same in seen:
            continue
        sure = _confirmed(s, shape, cluster, capacity_gib, options)
        if sure is None:
            continue
        seen.add(same)
        best.append(dataclasses.replace(s, sure=sure))
        if len(best) == options.top:
            break
    best.sort(key=lambda s: not s.sure)  # stable: the plan check's word on each is the last
    return Search(best, cut, options.budget_s)


def _search(
    shape: ModelShape,
    cluster: ClusterSpec,
    capacity_gib: float,
    options: SuggestOptions,
    deadline: float,
) -> tuple[list[Suggestion], bool]:
    """Every pair of layouts that fits, per split of the cluster, until `deadline` (True: cut
    short there)."""
    import time

    limit = (capacity_gib - margin_gib(capacity_gib)) * GIB
    least = options.infer.context_length or TOKEN_STEP  # one sample must fit a micro-batch
    cache: dict = {}
    found: list[Suggestion] = []
    for mode, s_gpus, t_gpus in _splits(cluster):
        if time.monotonic() > deadline:
            return found, True
        together = mode == "collocated"
        infer, train = options.infer, options.train
        if together:
            infer = dataclasses.replace(infer, release=True)
            train = dataclasses.replace(train, offload=Offload(True, True, True))
        servers = []
        for alloc in server_layouts(shape, s_gpus, cluster.gpus_per_node, options.server_backends):
            need = estimate(shape, alloc, infer, capacity_gib, "cuda")
            if not need.notes and need.kv_tokens is not None:
                servers.append((alloc, need))
        if not servers:
            continue
        per = cluster.gpus_per_node
        for trainer in trainer_layouts(shape, t_gpus, per, options.trainer_backends):
            if time.monotonic() > deadline:
                return found, True
            for end in (HIGH, LOW):  # surely, else at the low end only
                residue = max(n.residue_range()[end] for _, n in servers) if together else 0.0
                fitted = _fitted(shape, trainer, train, limit - residue, least, cache, end)
                if fitted is not None:
                    split = (mode, s_gpus, t_gpus)
                    paired = _paired(shape, split, servers, trainer, train, fitted, limit, end)
                    asked = options.train.max_tokens_per_mb
                    found += [dataclasses.replace(p, requested_tokens=asked) for p in paired]
                    break
    return found, False


def _paired(
    shape: ModelShape,
    split: tuple[str, int, int],
    servers: list[tuple[ModelAllocation, EngineNeed]],
    trainer: ModelAllocation,
    train: TrainOptions,
    fitted: tuple[int, bool],
    limit: float,
    end: int,
) -> list[Suggestion]:
    """The trainer layout with every server layout that fits beside it (at `end` of the
    estimate's range: HIGH, surely), scored."""
    mode, s_gpus, t_gpus = split
    together = mode == "collocated"
    tokens, checkpointing = fitted
    need = estimate(
        shape,
        trainer,
        dataclasses.replace(
            train,
            max_tokens_per_mb=tokens,
            gradient_checkpointing=checkpointing or train.gradient_checkpointing,
        ),
        None,
        "cuda",
    )
    train_tokens = tokens * trainer.dp
    kept = need.residue_range()[end] if together else 0.0
    out = []
    for alloc, served in servers:
        if served.peak_range()[end] + kept > limit:
            continue
        kv = served.kv_tokens or 0
        generation = alloc.dp * min(kv, KV_USEFUL_TOKENS)
        score = math.sqrt(generation * train_tokens) * (COLLOCATED_SHARE if together else 1.0)
        out.append(
            Suggestion(
                mode,
                alloc,
                trainer,
                s_gpus,
                t_gpus,
                tokens,
                kv * alloc.dp,
                train_tokens,
                score,
                0,  # the requested micro-batch: _search fills it in
                checkpointing,
                sure=end == HIGH,
            )
        )
    return out


def _confirmed(
    s: Suggestion,
    shape: ModelShape,
    cluster: ClusterSpec,
    capacity_gib: float,
    options: SuggestOptions,
) -> Optional[bool]:
    """Whether the whole plan's memory check agrees that the suggestion fits: None when it
    does not (refused), else whether it surely fits (its fixes are not searched)."""
    together = s.mode == "collocated"
    server_gpus = tuple(range(s.server_gpus))
    trainer_gpus = (
        server_gpus if together else tuple(range(s.server_gpus, s.server_gpus + s.trainer_gpus))
    )
    infer = dataclasses.replace(options.infer, release=together or options.infer.release)
    train = dataclasses.replace(
        options.train,
        max_tokens_per_mb=s.max_tokens_per_mb,
        gradient_checkpointing=s.checkpointing or options.train.gradient_checkpointing,
        offload=Offload(True, True, True) if together else options.train.offload,
    )
    engines = [
        EngineInput(ComponentPlan(PRIMARY, s.server, None, server_gpus), shape, infer),
        EngineInput(ComponentPlan(POLICY, s.trainer, None, trainer_gpus), shape, train),
    ]
    report = evaluate(engines, cluster, capacity_gib)
    return report.sure if report.fits is True else None
