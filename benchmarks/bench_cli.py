"""`areal-launch plan --json` wall time against the bare import floor, in one run.

The floor is `python -c "import hydra, omegaconf, typer, rich"`: what any launcher built on
these libraries pays before doing anything. Target: plan <= 2.0x the floor.
    .venv/bin/python benchmarks/bench_cli.py [--runs N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    runs = ap.parse_args().runs
    floor_cmd = [sys.executable, "-c", "import hydra, omegaconf, typer, rich"]
    plan_cmd = [str(BIN / "areal-launch"), "plan", "--json", "rollout.backend=sglang:d4t2",
                "actor.backend=fsdp:d8", "cluster.device=cuda", "cluster.gpus_per_node=8",
                "cluster.num_nodes=2", "ref=inherit"]
    wall(floor_cmd), wall(plan_cmd)  # warm the page cache
    floor, plan = [], []
    for _ in range(runs):  # interleaved so load changes hit both alike
        floor.append(wall(floor_cmd))
        plan.append(wall(plan_cmd))
    f, p = statistics.median(floor), statistics.median(plan)
    print(f"import floor  median {f * 1000:7.1f} ms  (min {min(floor) * 1000:.1f})")
    print(f"plan --json   median {p * 1000:7.1f} ms  (min {min(plan) * 1000:.1f})")
    print(f"ratio plan/floor: {p / f:.2f}x (target <= 2.0x)")


if __name__ == "__main__":
    main()
