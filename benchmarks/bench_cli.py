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

The start-ups the tests no longer time (tests/test_bad_input.py), Hydra whole like "plan, no
cache", against it in the same run: `--help` and `--hydra-help` (each group's options from one
copy of the config repository: they took 2 s each when every ask copied it), a size past its
bound (refused before anything is allocated: a world of d999999t999999) and a config of one's own
with a key we do not have (`defaults: [config, _self_]`: the closest-key search composes once
more; it once recursed for 20 s). Goal for each: within 2x "plan, no cache".
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
    timed.update(start_ups(Path(cache)))
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
    whole = median["plan, no cache"]
    for name in start_ups(Path(cache)):
        print(
            f"ratio {name}/plan without the cache: {median[name] / whole:.2f}x (target <= 2x); "
            f"/floor {median[name] / floor:.2f}x"
        )


def start_ups(cache: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The start-ups of tests/test_bad_input.py, Hydra whole (help and errors take no cache)."""
    mine = cache / "mine"
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
