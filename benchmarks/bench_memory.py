"""What the memory check adds to planning, and how fast `plan --suggest` answers
(docs/benchmarks.md).

1. The five-engine plan of bench_plan.py on 1024 nodes x 8 GPUs (rollout 4096 GPUs, actor and
   critic sharing 2048, ref 1024, teacher 1024; Qwen2.5-72B everywhere): planning (place +
   rank maps + weight sync + Plan.to_dict) against memory_report + its to_dict (a fresh
   estimate cache each time, as in a new CLI process). Target: memory adds <= 10 ms.
2. suggest() for 8 nodes x 8 GPUs of 80 GB, cold cache, for a dense, a large dense and a MoE
   model. Target: <= 1 s.
3. What the tests no longer time (tests/test_suggest.py, test_memory.py, test_model_shape.py,
   test_memory_corpus.py): the split search at 1024, 4096 and 16384 nodes against 8 nodes
   (at most MAX_SPLITS splits: every split tried took minutes at 16384; target <= 5 s each);
   refusing options out of range and a config of 10**30 layers against accepting valid ones
   (a size taken as it comes computed for minutes; target: the same order, <= 10x); the peers'
   corpus (tests/peer_corpus.py), a plan and its memory report per case (target: <= 1 s a
   case, plan-level, nothing started).
Everything is measured in this one run, interleaved, medians.
    .venv/bin/python benchmarks/bench_memory.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_plan import plan, reference_loop, timed  # (this folder)

from launcher.memory.estimate import EngineInput, InferenceOptions, TrainOptions, estimate
from launcher.memory.fix import memory_report
from launcher.memory.model_shape import ModelShapeError, shape_from_config
from launcher.memory.suggest import suggest, suggest_within
from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import ConfigError
from launcher.spec.offload import Offload
from tests.model_configs import MODELS, shape

H100 = 79.11


def engines(p) -> list[EngineInput]:
    model = shape("Qwen2.5-72B")
    train = TrainOptions(
        gradient_checkpointing=True,
        max_tokens_per_mb=8192,
        offload=Offload(True, True, True),
        sequence_parallel=True,
    )
    options = {
        "rollout": InferenceOptions(mem_fraction=0.85),
        "actor": train,
        "critic": train,
        "ref": TrainOptions(trainable=False, offload=Offload(weight=True)),
        "teacher": TrainOptions(trainable=False),
    }
    return [EngineInput(c, model, options[n]) for n, c in p.components.items()]


def check(p, inputs):
    estimate.cache_clear()
    report = memory_report(inputs, p.cluster, H100)
    assert report.fits is True, report.error()
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    runs = ap.parse_args().runs
    big = plan(1024)
    inputs = engines(big)
    report = check(big, inputs)  # warm up imports
    planning, checking, rows, loop = [], [], [], []
    for _ in range(runs):
        planning += timed(lambda: plan(1024).to_dict(), 1)
        checking += timed(lambda: check(big, inputs), 1)
        rows += timed(report.to_dict, 1)
        loop += timed(reference_loop, 1)

    def ms(values: list[float]) -> str:
        return f"median {statistics.median(values) * 1000:6.1f} ms (min {min(values) * 1000:.1f})"

    both = statistics.median(checking) + statistics.median(rows)
    print(f"plan 1024 nodes x 8, 5 engines     {ms(planning)}")
    print(f"memory_report (estimates, check)   {ms(checking)}  {len(report.groups)} GPU groups")
    print(f"report.to_dict (8192 GPU rows)     {ms(rows)}")
    print(
        f"memory adds {both * 1000:.1f} ms (medians) = {both / statistics.median(planning):.0%} "
        f"of planning; target <= 10 ms"
    )
    models = ("Qwen3-8B", "Qwen2.5-72B", "Qwen3-30B-A3B")
    times: dict[str, list[float]] = {m: [] for m in models}
    found: dict[str, str] = {}
    for _ in range(max(3, runs // 3)):
        for m in models:

            def run(model=m):
                estimate.cache_clear()
                out = suggest(shape(model), ClusterSpec(8, 8), H100)
                found[model] = f"{len(out)} found, best: {out[0].command()}" if out else "none"

            times[m] += timed(run, 1)
    for m in models:
        print(
            f"suggest 8x8 {m:14s} median {statistics.median(times[m]) * 1000:6.0f} ms "
            f"(max {max(times[m]) * 1000:.0f})  target <= 1000 ms; {found[m]}"
        )
    print(f"reference loop (machine load) median {statistics.median(loop) * 1000:.1f} ms")
    searches(max(3, runs // 3))
    refusals(runs)
    corpus()


def searches(runs: int) -> None:
    """suggest_within on many nodes against 8 nodes, in turn (tests/test_suggest.py)."""
    sizes = (8, 1024, 4096, 16384)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(runs):
        for n in sizes:
            estimate.cache_clear()
            cluster = ClusterSpec(n, 8)
            times[n] += timed(lambda: suggest_within(shape("Qwen3-8B"), cluster, H100), 1)
    small = statistics.median(times[8])
    for n in sizes[1:]:
        t = statistics.median(times[n])
        print(
            f"suggest_within {n:5d} nodes x 8  median {t * 1000:6.0f} ms = {t / small:.1f}x "
            "8 nodes; target <= 5000 ms"
        )


def refused(make, error) -> None:
    try:
        make()
    except error:
        return
    raise AssertionError(f"{make} was not refused")


def refusals(runs: int) -> None:
    """Refusing sizes past their bounds against accepting valid ones (test_memory.py,
    test_model_shape.py), 100 calls a sample."""
    config = MODELS["Llama-3-8B"]["config"]
    huge = {**config, "num_hidden_layers": 10**30}
    bad = [
        lambda: TrainOptions(max_tokens_per_mb=10**12),
        lambda: InferenceOptions(mem_fraction=1.5),
        lambda: InferenceOptions(context_length=10**30),
        lambda: TrainOptions(optimizer="lion"),
    ]
    pairs = {  # what: (valid, past its bounds)
        "options": (
            lambda: [TrainOptions(max_tokens_per_mb=8192), InferenceOptions(mem_fraction=0.8)] * 2,
            lambda: [refused(b, ConfigError) for b in bad],
        ),
        "shape": (
            lambda: shape_from_config(config),
            lambda: refused(lambda: shape_from_config(huge), ModelShapeError),
        ),
    }
    times: dict[tuple[str, int], list[float]] = {(w, k): [] for w in pairs for k in (0, 1)}
    for _ in range(runs):
        for (what, k), t in times.items():
            t.append(statistics.median(timed(pairs[what][k], 100)))
    for what in pairs:
        valid, past = (statistics.median(times[what, k]) for k in (0, 1))
        print(
            f"{what:<8} valid {valid * 1e6:7.1f} us, past its bounds refused {past * 1e6:7.1f} us"
            f" = {past / valid:.1f}x (target <= 10x)"
        )


def corpus() -> None:
    """The peers' corpus, a plan and a memory report a case (tests/test_memory_corpus.py)."""
    from tests.corpus_check import report
    from tests.peer_corpus import CASES

    report(next(iter(CASES.values())))  # imports and caches warm, as in a running CLI
    took = timed(lambda: [report(c) for c in CASES.values()], 1)[0]
    print(
        f"corpus: {len(CASES)} cases, {took / len(CASES) * 1000:.0f} ms a case (target <= 1000 ms)"
    )


if __name__ == "__main__":
    main()
