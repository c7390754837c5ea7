"""Ray runner costs on a running Ray cluster, measured in one run (docs/benchmarks.md).

1. Command -> first process of the run started (the kernel's start time of the first process
   carrying the run's tag): `areal-launch launcher=ray` (attached, a trivial trainer on one Ray
   node) against `ray job submit` of the same trivial script, interleaved. Goal: no slower.
   The detached launch (`launcher.detach=true`: a Ray job whose entrypoint is our driver) is
   shown too, and a bare Ray driver (connect, one bundle, one actor, one child): the floor.
2. A rank failure (tests/gloo_trainer.py FAIL_RANK=1 writes time.time() just before raising; the
   two ranks on two Ray nodes) -> nothing of the run left on any node: no process with the
   run's tag, no node supervisor, keeper or holder of the run. Goal <= 5 s (as locally).
3. Ray's own cost while idle: the cluster's processes (every process in its nodes' sessions)
   with no run, and what a run adds on top (its node actors and the driver) while the run's
   processes sleep: PSS and CPU over 10 s.

Usage: python benchmarks/bench_ray.py [--repeat N]
Uses the cluster RAY_ADDRESS and RAY_TMPDIR name (scripts/ray/start-ray-cluster.sh's env); else
starts one with that script and stops it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Optional

from bench_launch import TICKS, boot_clock, tagged  # beside this file: one home for each

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
BIN = Path(PY).parent
SCRIPTS = ROOT / "scripts" / "ray"
TRAINER = str(ROOT / "tests" / "gloo_trainer.py")


def stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def with_cmdline(word: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if word.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def first_tagged_start(proc: subprocess.Popen, tag: str, within_s: float = 120) -> float:
    """Boot-clock start time of the first process carrying `tag` (polled every few ms)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        starts = []
        for pid in tagged(tag):
            try:
                starts.append(int(stat(pid)[19]) / TICKS)
            except OSError:
                continue
        if starts:
            return min(starts)
        time.sleep(0.003)
    raise RuntimeError(f"no process tagged {tag} within {within_s} s (exit {proc.poll()})")


# ----------------------------------------------------------------------------- 1. start
def launch_argv(run_dir: Path, tag: str, trivial: Path, detach: bool) -> list[str]:
    return [
        str(BIN / "areal-launch"),
        "launcher=ray",
        f"launcher.detach={str(detach).lower()}",
        "rollout=none",
        "actor.backend=fsdp:d1",
        "cluster.device=cpu",
        "cluster.num_nodes=1",
        "cluster.gpus_per_node=1",
        f"trainer.entry={trivial}",
        f"hydra.run.dir={run_dir}",
        f"+launcher.env.BENCH_TAG={tag}",
    ]


BARE_DRIVER = """
import os, subprocess, sys, ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
ray.init(logging_level="ERROR")
pg = placement_group([{"CPU": 1}], strategy="STRICT_SPREAD")
@ray.remote
class Node:
    def run(self, argv, tag):
        return subprocess.run(argv, env={**os.environ, "BENCH_TAG": tag}).returncode
strategy = PlacementGroupSchedulingStrategy(pg, 0)
node = Node.options(num_cpus=1, scheduling_strategy=strategy).remote()
sys.exit(ray.get(node.run.remote([sys.executable, sys.argv[1]], sys.argv[2])))
"""


def bare_driver_argv(tag: str, trivial: Path) -> list[str]:
    """The floor of any Ray launcher: connect, place one bundle, one actor, one child."""
    return [PY, "-c", BARE_DRIVER, str(trivial), tag]


def job_submit_argv(tag: str, trivial: Path) -> list[str]:
    return [
        str(BIN / "ray"),
        "job",
        "submit",
        "--submission-id",
        f"bench-{tag}",
        "--runtime-env-json",
        json.dumps({"env_vars": {"BENCH_TAG": tag}}),
        "--",
        PY,
        str(trivial),
    ]


MARKS = {"connected": "areal-launch: run ", "placed": "areal-launch: placed: "}


def to_first_process(
    argv: list[str], tag: str, env: dict, marks: Optional[dict[str, list[float]]] = None
) -> float:
    """Seconds from the command to the first process of the run. With `marks`, also when the
    attached driver said it was connected and placed (its stdout lines, as they arrive)."""
    begun = boot_clock()
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
        text=True,
        stdout=subprocess.PIPE if marks is not None else subprocess.DEVNULL,
    )
    seen: dict[str, float] = {}

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            for name, prefix in MARKS.items():
                if line.startswith(prefix) and name not in seen:
                    seen[name] = boot_clock() - begun

    reader = threading.Thread(target=read, daemon=True)
    if marks is not None:
        reader.start()
    started = first_tagged_start(proc, tag)
    proc.wait(timeout=300)
    while tagged(tag):  # a detached run goes on after its command returned
        time.sleep(0.05)
    if marks is not None:
        reader.join(timeout=10)
        for name in MARKS:
            marks.setdefault(name, []).append(seen.get(name, float("nan")))
    return started - begun


# ----------------------------------------------------------------------------- 2. failure
def failure_to_nothing_left(work: Path, env: dict) -> float:
    tag, stamp, run_dir = uuid.uuid4().hex, work / f"stamp-{uuid.uuid4().hex}", work / "fail"
    argv = [
        str(BIN / "areal-launch"),
        "launcher=ray",
        "rollout=none",
        "actor.backend=fsdp:d2",
        "cluster.device=cpu",
        "cluster.num_nodes=2",
        "cluster.gpus_per_node=1",
        f"trainer.entry={TRAINER}",
        f"hydra.run.dir={run_dir}-{tag}",
        "+launcher.env.FAIL_RANK=1",
        f"+launcher.env.FAIL_STAMP={stamp}",
        f"+launcher.env.BENCH_TAG={tag}",
        "+launcher.env.OMP_NUM_THREADS=1",
    ]
    proc = subprocess.Popen(
        argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    while tagged(tag) or with_cmdline(f"{run_dir}-{tag}/request.json") or proc.poll() is None:
        time.sleep(0.01)
    gone = time.time()
    return gone - float(stamp.read_text())


# ----------------------------------------------------------------------------- 3. idle
def pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = stat(pid)
            total += int(fields[11]) + int(fields[12])
        except OSError:
            continue
    return total / TICKS


def idle_cost(pids: list[int], seconds: float = 10.0) -> tuple[int, float, float]:
    """(processes, PSS MiB, % of one core over `seconds`)."""
    before = cpu_s(pids)
    time.sleep(seconds)
    used = cpu_s(pids) - before
    return len(pids), sum(pss_kb(p) for p in pids) / 1024, 100 * used / seconds


def cluster_pids(state_dir: Path) -> list[int]:
    sessions = {int(p.read_text()) for p in state_dir.glob("node*.pid")}
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(stat(int(pid))[3]) in sessions:
                out.append(int(pid))
        except OSError:
            continue
    return out


def run_overhead(work: Path, env: dict) -> tuple[tuple, tuple]:
    """A run whose ranks sleep, on two Ray nodes: (its node actors, its driver) while idle."""
    tag, sleeper = uuid.uuid4().hex, work / "sleep.py"
    sleeper.write_text("import time\ntime.sleep(120)\n")
    run_dir = work / f"idle-{tag}"
    argv = [
        str(BIN / "areal-launch"),
        "launcher=ray",
        "rollout=none",
        "actor.backend=fsdp:d2",
        "cluster.device=cpu",
        "cluster.num_nodes=2",
        "cluster.gpus_per_node=1",
        f"trainer.entry={sleeper}",
        f"hydra.run.dir={run_dir}",
        f"+launcher.env.BENCH_TAG={tag}",
    ]
    proc = subprocess.Popen(
        argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while len(tagged(tag)) < 4:  # torchrun and its worker on each node
            time.sleep(0.1)
        time.sleep(3)
        holders = [p for p in with_cmdline(f"{run_dir}/request.json")]
        actors = sorted({int(stat(p)[1]) for p in holders} - set(holders))
        return idle_cost(actors), idle_cost([proc.pid])
    finally:
        proc.terminate()
        proc.wait(timeout=60)


# ----------------------------------------------------------------------------- main
def cluster() -> tuple[dict, Optional[Path]]:
    """The cluster's environment, and its state folder if this script started it."""
    if os.environ.get("RAY_ADDRESS") and os.environ.get("RAY_TMPDIR"):
        return {}, None
    out = subprocess.run(
        ["bash", str(SCRIPTS / "start-ray-cluster.sh")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "RAY_BIN": str(BIN / "ray")},
    )
    env = dict(re.findall(r"export (\w+)=(\S+)", out.stdout))
    return env, Path(env["RAY_TMPDIR"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    extra, started = cluster()
    env = {**os.environ, **extra, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    state_dir = Path(env["RAY_TMPDIR"])
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
            work = Path(tmp)
            trivial = work / "trivial.py"
            # it lingers a second so the /proc scan sees it; its kernel start time is what counts
            trivial.write_text("import time\nprint('hello', flush=True)\ntime.sleep(1)\n")
            ours: list[float] = []
            detached: list[float] = []
            submit: list[float] = []
            bare: list[float] = []
            marks: dict[str, list[float]] = {}
            fails: list[float] = []
            for i in range(args.repeat):  # interleaved: load changes hit every kind alike
                tag = uuid.uuid4().hex
                ours.append(
                    to_first_process(
                        launch_argv(work / f"a{i}", tag, trivial, False), tag, env, marks
                    )
                )
                tag = uuid.uuid4().hex
                submit.append(to_first_process(job_submit_argv(tag, trivial), tag, env))
                tag = uuid.uuid4().hex
                bare.append(to_first_process(bare_driver_argv(tag, trivial), tag, env))
                tag = uuid.uuid4().hex
                detached.append(
                    to_first_process(launch_argv(work / f"d{i}", tag, trivial, True), tag, env)
                )
                fails.append(failure_to_nothing_left(work, env))
            idle = idle_cost(cluster_pids(state_dir))
            actors, driver = run_overhead(work, env)
    finally:
        if started is not None:
            subprocess.run(
                ["bash", str(SCRIPTS / "stop-ray-cluster.sh"), str(started)], capture_output=True
            )
    med = statistics.median
    pairs = [a / b for a, b in zip(ours, submit)]
    print(f"repeat={args.repeat}, medians (min-max)")
    for name, values in (
        ("areal-launch launcher=ray (attached)", ours),
        ("ray job submit (same script)", submit),
        ("a bare Ray driver (ray.init, 1 bundle, 1 actor, Popen)", bare),
        ("areal-launch launcher.detach=true", detached),
    ):
        print(
            f"command -> first process: {name}: {med(values):.2f} s "
            f"({min(values):.2f}-{max(values):.2f})"
        )
    print(f"attached / ray job submit, run beside it: {med(pairs):.2f}x (goal <= 1.0x)")
    steps = [med(marks["connected"]), med(marks["placed"]), med(ours)]
    print(
        f"attached, where the time goes (medians): command -> driver connected and plan "
        f"checked {steps[0]:.2f} s (Hydra, plan, import ray, ray.init, the cluster's nodes); "
        f"-> placed {steps[1] - steps[0]:.2f} s (placement group, node actors started); "
        f"-> first process {steps[2] - steps[1]:.2f} s (node supervisor, keeper, Popen)"
    )
    print(
        f"rank failure -> nothing left on any node: {med(fails):.2f} s (max {max(fails):.2f};"
        " goal <= 5 s)"
    )
    print(
        "idle cluster (2 nodes, dashboard on): {} processes, PSS {:.0f} MiB, {:.1f} % of one "
        "core".format(*idle)
    )
    print(
        "a run's node actors (2) while it idles: {} processes, PSS {:.0f} MiB, {:.1f} % of one "
        "core".format(*actors)
    )
    print(
        "a run's driver (areal-launch, attached) while it idles: {} process, PSS {:.0f} MiB, "
        "{:.1f} % of one core".format(*driver)
    )


if __name__ == "__main__":
    main()
