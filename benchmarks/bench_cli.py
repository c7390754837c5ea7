"""`areal-launch plan --json` wall time against what any Hydra app pays, in one run.

A regression guard, not a target to cache towards: plan composes the way a launch does (one
compose path, launcher/config/compose.py).
    .venv/bin/python benchmarks/bench_cli.py [--runs N] [--baseline DIR]

- "import floor": `python -c "import hydra, omegaconf, typer, rich"`, what any launcher built on
  these libraries pays before doing anything;
- "hydra app": the same imports, then Hydra's compose of a one-key config with one override
  (Hydra's own `hydra` config, its plugin scan, the override grammar): the least a Hydra app pays.
Guard: plan within 1.8x of "hydra app" and within 3x of the floor.

The plan runs `launcher.cli.main` of the checkout this file is in (what the `areal-launch`
script runs, whichever copy that script was installed from), and says which copy it imported;
--baseline DIR times another checkout's plan too, interleaved (before/after in one run).
Bytecode is cached as in any install (PYTHONDONTWRITEBYTECODE is dropped; the warm-up run
writes it).

The start-ups the tests no longer time (tests/test_bad_input.py), against plan in the same run:
`--help` and `--hydra-help`, a size past its bound (refused before anything is allocated: a
world of d999999t999999) and a config of one's own with a key we do not have (`defaults:
[config, _self_]`; it once recursed for 20 s). Goal for each: within 2x plan.
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


def env_for(root: Optional[Path]) -> dict[str, str]:
    """The environment of a run: no GPU, bytecode cached, `root`'s launcher first."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    return env


def wall(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds `cmd` takes, run from `/` so `python -c` finds no launcher in its folder; it
    must exit 0, or 2 with one `error:` line (the bad input's promise)."""
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd="/")
    took = time.perf_counter() - t0
    errors = out.stderr.strip().splitlines()
    if out.returncode != 0 and not (out.returncode == 2 and len(errors) == 1):
        raise SystemExit(f"{cmd[3:]} exited {out.returncode}: {out.stderr[-2000:]}")
    return took


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
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as folder:  # this run's own config
        measure(args, Path(folder))


def measure(args: argparse.Namespace, folder: Path) -> None:
    """Time the commands interleaved and print the medians and the ratios."""
    plan_cmd = [sys.executable, "-c", MAIN, *PLAN]
    timed = {
        "import floor": (
            [sys.executable, "-c", "import hydra, omegaconf, typer, rich"],
            env_for(None),
        ),
        "hydra app": ([sys.executable, "-c", HYDRA_APP], env_for(None)),
        "plan --json": (plan_cmd, env_for(ROOT)),
    }
    if args.baseline is not None:
        timed["baseline plan"] = (plan_cmd, env_for(args.baseline.resolve()))
    timed.update(start_ups(folder))
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
    floor, app, plan = median["import floor"], median["hydra app"], median["plan --json"]
    print(f"ratio plan/hydra app: {plan / app:.2f}x (guard <= 1.8x)")
    print(f"ratio plan/floor: {plan / floor:.2f}x (guard <= 3x)")
    print(f"ratio hydra app/floor: {app / floor:.2f}x (Hydra's own share)")
    if args.baseline is not None:
        print(f"ratio baseline/hydra app: {median['baseline plan'] / app:.2f}x")
    for name in start_ups(folder):
        print(f"ratio {name}/plan: {median[name] / plan:.2f}x (goal <= 2x)")


def start_ups(folder: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The start-ups of tests/test_bad_input.py."""
    mine = folder / "mine"
    mine.mkdir(exist_ok=True)
    (mine / "mine.yaml").write_text("defaults: [config, _self_]\nseed: 1\n")
    cmd = [sys.executable, "-c", MAIN]
    return {
        "--help": ([*cmd, "--help"], env_for(ROOT)),
        "--hydra-help": ([*cmd, "--hydra-help"], env_for(ROOT)),
        "size past bound": ([*cmd, "plan", "actor.backend=fsdp:d999999t999999"], env_for(ROOT)),
        "unknown key": ([*cmd, "plan", "-cd", str(mine), "-cn", "mine"], env_for(ROOT)),
    }


if __name__ == "__main__":
    main()
