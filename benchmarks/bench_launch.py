"""Local launch costs, measured in one run as ratios against bare torchrun (docs/benchmarks.md).

1. Wall time of a 2-rank gloo trainer-only run (tests/gloo_trainer.py) started through the real
   CLI (`areal-launch rollout=none actor.backend=fsdp:d2 cluster.device=cpu ...`) over a bare
   `torchrun` of the same script with the same arguments. Target <= 1.15x.
   Also through tests/launch_driver.py (supervise() alone, no Hydra), to show the runner's share.
2. Time from the command to the first process started (the kernel's start time of the
   launcher's first run process, past its own forks). Target <= 0.6 s.
3. Time from a rank's failure (FAIL_RANK=1 writes time.time() just before raising) to the last
   process of the run gone (the launcher has exited and no process carries the run's tag), with
   the default 10 s grace. Target <= 5 s. Bare torchrun's own failure-to-exit time is shown too.

Usage: python benchmarks/bench_launch.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from launcher.node.ports import PortReserver

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
CLI = Path(PY).parent / "areal-launch"
TRAINER = str(ROOT / "tests" / "gloo_trainer.py")
DRIVER = str(ROOT / "tests" / "launch_driver.py")
TICKS = os.sysconf("SC_CLK_TCK")


def boot_clock() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def stat_of(pid: str) -> tuple[int, float]:
    """(ppid, start time in seconds since boot) from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[19]) / TICKS


def descendants(pid: int) -> list[int]:
    """pid's descendants, breadth first (the runner forks holder, keeper and supervisor)."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop(0)
        try:
            kids = [
                int(k) for k in Path(f"/proc/{current}/task/{current}/children").read_text().split()
            ]
        except OSError:
            kids = []
        found.extend(kids)
        queue.extend(kids)
    return found


def first_child(parent: subprocess.Popen) -> tuple[int, float]:
    """(pid, boot-clock start) of the first run process: the first descendant whose command
    line is not the launcher's own (its holder, keeper and supervisor are forks of it)."""
    own = Path(f"/proc/{parent.pid}/cmdline").read_bytes()
    while parent.poll() is None:
        for pid in descendants(parent.pid):
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() not in (own, b""):
                    return pid, stat_of(str(pid))[1]
            except OSError:
                continue
        time.sleep(0.002)
    return -1, float("nan")


def wait_exited(pid: int) -> float:
    """Boot-clock time (within 5 ms) at which pid exited (zombie or reaped)."""
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return boot_clock()
        if state in ("Z", "X"):
            return boot_clock()
        time.sleep(0.005)


def tagged(tag: str) -> list[int]:
    needle = f"\0BENCH_TAG={tag}\0".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if needle in b"\0" + Path(f"/proc/{pid}/environ").read_bytes() + b"\0":
                found.append(int(pid))
        except OSError:
            continue
    return found


def free_port() -> int:
    with PortReserver() as r:
        return r.take()


def torchrun_argv(port: int) -> list[str]:
    return [
        PY,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--node-rank",
        "0",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        "--rdzv-backend",
        "static",
        TRAINER,
    ]


def cli_argv(run_dir: Path) -> list[str]:
    return [
        str(CLI),
        "rollout=none",
        "actor.backend=fsdp:d2",
        "cluster.device=cpu",
        f"trainer.entry={TRAINER}",
        f"hydra.run.dir={run_dir}",
    ]


def driver_argv(work: Path) -> list[str]:
    """supervise() alone: the same torchrun, its master port reserved by the driver."""
    work.mkdir(parents=True)
    argv = torchrun_argv(0)
    argv[argv.index("--master-port") + 1] = "{port0}"
    specs = work / "specs.json"
    specs.write_text(json.dumps([{"name": "actor", "role": "trainer", "argv": argv}]))
    return [PY, DRIVER, str(specs), str(work / "run"), "--ports", "1"]


def timed(argv: list[str], env: dict, watch: bool = False) -> dict:
    """Run argv. wall; with watch, also the launcher's own share, measured inside this run:
    before = command -> trainer started, after = trainer exited -> launcher exited."""
    begun_boot, begun = boot_clock(), time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    before = after = float("nan")
    if watch:
        pid, started = first_child(proc)
        before = started - begun_boot
        if pid > 0:
            ended = wait_exited(pid)
    code = proc.wait()
    if watch and pid > 0:
        after = boot_clock() - ended
    return {"wall": time.perf_counter() - begun, "code": code, "before": before, "after": after}


def failure_to_gone(argv: list[str], env: dict, tag: str, stamp: Path) -> float:
    proc = subprocess.Popen(
        argv,
        env={**env, "FAIL_RANK": "1", "FAIL_STAMP": str(stamp), "BENCH_TAG": tag},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    proc.wait()
    while tagged(tag):
        time.sleep(0.01)
    gone = time.time()
    return gone - float(stamp.read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    has_cli = CLI.exists()
    rows: dict[str, list[dict]] = {"torchrun": [], "cli": [], "driver": []}
    fails: dict[str, list[float]] = {"torchrun": [], "cli": [], "driver": []}
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp:
        work = Path(tmp)
        for i in range(args.repeat):  # interleaved, so drift on a shared machine hits all alike
            rows["torchrun"].append(timed(torchrun_argv(free_port()), env))
            if has_cli:
                rows["cli"].append(timed(cli_argv(work / f"cli{i}"), env, watch=True))
            rows["driver"].append(timed(driver_argv(work / f"drv{i}"), env, watch=True))
            for kind, argv in (
                ("torchrun", torchrun_argv(free_port())),
                ("cli", cli_argv(work / f"clifail{i}") if has_cli else None),
                ("driver", driver_argv(work / f"drvfail{i}")),
            ):
                if argv:
                    fails[kind].append(
                        failure_to_gone(argv, env, uuid.uuid4().hex, work / f"stamp-{kind}-{i}")
                    )
    med = {k: statistics.median(r["wall"] for r in v) for k, v in rows.items() if v}
    bad = {k: [r["code"] for r in v if r["code"] != 0] for k, v in rows.items()}
    print(f"repeat={args.repeat}, medians; exit codes != 0: {bad}")
    print(f"bare torchrun wall {med['torchrun']:.2f} s")
    for kind in ("cli", "driver"):
        if not rows[kind]:
            continue
        pairs = [r["wall"] / b["wall"] for r, b in zip(rows[kind], rows["torchrun"])]
        inside = [r["wall"] / (r["wall"] - r["before"] - r["after"]) for r in rows[kind]]
        print(
            f"{kind}: wall {med[kind]:.2f} s; over the bare torchrun run beside it "
            f"{statistics.median(pairs):.3f}x; over its own trainer's lifetime "
            f"{statistics.median(inside):.3f}x (target <= 1.15x)"
        )
        print(
            f"{kind}: command -> first process started "
            f"{statistics.median(r['before'] for r in rows[kind]):.3f} s (target <= 0.6 s); "
            f"trainer exit -> launcher exit "
            f"{statistics.median(r['after'] for r in rows[kind]):.3f} s"
        )
    for kind, values in fails.items():
        if values:
            print(
                f"{kind}: rank failure -> last process gone "
                f"{statistics.median(values):.2f} s (max {max(values):.2f}; target <= 5 s)"
            )


if __name__ == "__main__":
    main()
