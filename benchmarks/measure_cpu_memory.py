"""Measure the host memory of the default CPU run: the source of launcher/memory/capacity.py's
constants.

Runs `areal-launch recipe.steps=N` (vLLM CPU server + 2 FSDP2 ranks on gloo), samples the
resident set (VmRSS) of every process it starts, and prints each process's peak with its role,
so the per-process overheads in launcher/memory/capacity.py can be checked again on another machine.
Not run by `make bench` (it starts a real vLLM server: about a minute on 2 cores).
    .venv/bin/python benchmarks/measure_cpu_memory.py [--steps 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except OSError:
            continue
        out.setdefault(ppid, []).append(int(entry))
    return out


def _tree(root: int) -> dict[int, int]:
    """Every process under `root` -> its parent."""
    kids, todo, parent = _children(), [root], {root: 0}
    while todo:
        pid = todo.pop()
        for kid in kids.get(pid, []):
            parent[kid] = pid
            todo.append(kid)
    return parent


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
    except OSError:
        return ""


def _own_role(cmd: str) -> str:
    if "vllm.entrypoints" in cmd:
        return "vllm server"
    if "torch.distributed.run" in cmd:
        return "torchrun agent"
    if "train.py" in cmd:
        return "trainer rank"
    return ""


def _role(pid: int, parent: dict[int, int], cmds: dict[int, str]) -> str:
    """A process's own role, else the role of its nearest ancestor that has one (vLLM's
    spawned engine core and compiler runs count as the server's)."""
    while pid:
        role = _own_role(cmds.get(pid, ""))
        if role:
            return role
        pid = parent.get(pid, 0)
    return "launcher"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2)
    steps = ap.parse_args().steps
    bin_dir = Path(sys.executable).parent
    proc = subprocess.Popen(
        [str(bin_dir / "areal-launch"), f"recipe.steps={steps}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    peak: dict[int, int] = {}
    cmds: dict[int, str] = {}
    roles: dict[int, str] = {}
    peak_total: dict[str, int] = {}
    try:
        while proc.poll() is None:
            parent = _tree(proc.pid)
            sums: dict[str, int] = {}
            for pid in parent:
                rss = _rss_kib(pid)
                if not cmds.get(pid):
                    cmds[pid] = _cmdline(pid)
                roles[pid] = _role(pid, parent, cmds)
                peak[pid] = max(peak.get(pid, 0), rss)
                sums[roles[pid]] = sums.get(roles[pid], 0) + rss
            for role, value in sums.items():
                peak_total[role] = max(peak_total.get(role, 0), value)
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
    print(f"areal-launch exit code {proc.returncode}")
    for pid, kib in sorted(peak.items(), key=lambda kv: -kv[1]):
        if kib:
            print(f"{kib / 1024:8.1f} MiB  {roles[pid]:14s} pid {pid}  {cmds[pid][:90]}")
    for role, kib in sorted(peak_total.items()):
        print(f"peak of the sum at one sample, {role}: {kib / 1024:.1f} MiB")
    return proc.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
