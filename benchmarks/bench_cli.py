"""`areal-launch plan --json` wall time against the bare import floor, in one run.

The floor is `python -c "import hydra, omegaconf, typer, rich"`: what any launcher built on
these libraries pays before doing anything. Target: plan <= 1.6x the floor.
    .venv/bin/python benchmarks/bench_cli.py [--runs N] [--baseline DIR]

The plan runs `launcher.cli.main` of the checkout this file is in (what the `areal-launch`
script runs, whichever copy that script was installed from), and says which copy it imported;
--baseline DIR times another checkout's plan too, interleaved (before/after in one run).
Bytecode is cached as in any install (PYTHONDONTWRITEBYTECODE is dropped; the warm-up run
writes it).

"plan --json" composes by the compose cache (launcher.config.compose_cache) in a folder of this
run's, kept by the warm-up run: the usual case, a command line whose group choices were seen
before; "plan, no cache" is the same command with AREAL_LAUNCH_COMPOSE_CACHE=off (Hydra whole).

A fourth line, "hydra app", is the least any Hydra app pays: the same imports, then Hydra's
compose of a one-key config with one override (Hydra's own `hydra` config, its plugin scan, the
override grammar). It says how much of the goal is left to the launcher's own code.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
MAIN = "import sys; from launcher.cli.main import main; sys.argv[0] = 'areal-launch'; main()"
HYDRA_APP = """
import sys, tempfile, pathlib
import hydra, omegaconf, typer, rich
from hydra import compose, initialize_config_dir
d = tempfile.mkdtemp()
pathlib.Path(d, "config.yaml").write_text("a: 1\\n")
with initialize_config_dir(config_dir=d, version_base=None):
    compose(config_name="config", overrides=["a=2"])
"""
PLAN = [
    "plan",
    "--json",
    "rollout.backend=sglang:d4t2",
    "actor.backend=fsdp:d8",
    "cluster.device=cuda",
    "cluster.gpus_per_node=8",
    "cluster.num_nodes=2",
    "ref=inherit",
]


def env_for(root: Optional[Path], cache: str = "off") -> dict[str, str]:
    """The environment of a run: no GPU, bytecode cached, `root`'s launcher first, the compose
    cache in `cache` (a folder, or off)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["AREAL_LAUNCH_COMPOSE_CACHE"] = cache
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    return env


def wall(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds `cmd` takes, run from `/` so `python -c` finds no launcher in its folder."""
    t0 = time.perf_counter()
    subprocess.run(
        cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd="/"
    )
    return time.perf_counter() - t0


def imported_from(env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-c", "import launcher; print(launcher.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
    ).stdout
    return str(Path(out.strip()).parent)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--baseline", type=Path, help="another checkout, timed the same way")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-compose-") as cache:  # this run's
        measure(args, cache)


def measure(args: argparse.Namespace, cache: str) -> None:
    """Time the commands, the plans with the compose cache in `cache`, and print the medians."""
    plan_cmd = [sys.executable, "-c", MAIN, *PLAN]
    timed = {
        "import floor": (
            [sys.executable, "-c", "import hydra, omegaconf, typer, rich"],
            env_for(None),
        ),
        "hydra app": ([sys.executable, "-c", HYDRA_APP], env_for(None)),
        "plan --json": (plan_cmd, env_for(ROOT, cache)),
        "plan, no cache": (plan_cmd, env_for(ROOT)),
    }
    if args.baseline is not None:
        timed["baseline plan"] = (plan_cmd, env_for(args.baseline.resolve(), cache))
    for name, (_, env) in timed.items():
        if name in ("plan --json", "baseline plan"):
            print(f"{name}: launcher from {imported_from(env)}")
    for cmd, env in timed.values():
        wall(cmd, env)  # warm the page cache, write the bytecode
    times: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(args.runs):  # interleaved so load changes hit all alike
        for name, (cmd, env) in timed.items():
            times[name].append(wall(cmd, env))
    median = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:<15} median {median[name] * 1000:7.1f} ms  (min {min(t) * 1000:.1f})")
    floor = median["import floor"]
    print(f"ratio plan/floor: {median['plan --json'] / floor:.2f}x (target <= 1.6x)")
    print(f"ratio plan without the cache/floor: {median['plan, no cache'] / floor:.2f}x")
    print(f"ratio hydra app/floor: {median['hydra app'] / floor:.2f}x (Hydra's own share)")
    if args.baseline is not None:
        print(f"ratio baseline/floor: {median['baseline plan'] / floor:.2f}x")


if __name__ == "__main__":
    main()
