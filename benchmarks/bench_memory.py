"""What the memory check adds to planning, and how fast `plan --suggest` answers
(docs/benchmarks.md).

1. The five-engine plan of bench_plan.py on 1024 nodes x 8 GPUs (rollout 4096 GPUs, actor and
   critic sharing 2048, ref 1024, teacher 1024; Qwen2.5-72B everywhere): planning (place +
   rank maps + weight sync + Plan.to_dict) against memory_report + its to_dict (a fresh
   estimate cache each time, as in a new CLI process). Target: memory adds <= 10 ms.
2. suggest() for 8 nodes x 8 GPUs of 80 GB, cold cache, for a dense, a large dense and a MoE
   model. Target: <= 1 s.
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

from launcher.memory.estimate import EngineInput, InferenceOptions, Offload, TrainOptions, estimate
from launcher.memory.fix import memory_report
from launcher.memory.suggest import suggest
from launcher.spec.cluster import ClusterSpec
from tests.model_configs import shape

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


if __name__ == "__main__":
    main()
