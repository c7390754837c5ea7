"""Launch, failure, cancel and requeue at 2 to 32 Slurm nodes and 2 to 8 Ray nodes, on this
one machine (docs/benchmarks.md, "Thirty-two nodes on one machine").

Each run is real: `areal-launch launcher=slurm|ray` on a cluster of the script's own (Slurm's
multiple-slurmd, scripts/slurm/start-slurm.sh, 8 fake GPUs a node; Ray, one raylet per
loopback address, scripts/ray/start-ray-cluster.sh), of stand-ins (tests/scale_standin.py,
stdlib only): a worker component of PER_NODE heartbeating processes on every node and one
torchrun job of one rank a node on the first min(N, 8) nodes (the rendezvous; its ranks are
stand-ins too, but torchrun itself imports torch). Measured, each the median of --repeat runs,
taken in rounds (every size and floor once a round, so that a shared machine's drifting load
falls on all sizes alike), the ratios between sizes with how sure they are (resampled runs):

- start: the command to every process running (the last stand-in's own start stamp);
- kill: one stand-in on the last node SIGKILLed to nothing of the run left on any node (no
  process carrying the run's AREAL_LAUNCH_RUN, no node agent, keeper or supervisor);
- cancel: `areal-launch cancel` to nothing left;
- requeue (Slurm): USR1 to the batch shell (what --signal=B:USR1 sends before the time limit)
  to every process running again (rank 0 answers the checkpoint request at once);
- the launcher's own CPU time per node (the CLI, every node agent, keeper and supervisor,
  sampled every SAMPLE_S from /proc; the CLI's from wait4) and peak memory per node (the
  largest sum, over nodes, of the RSS high-water marks of a node's agent, keeper and
  supervisor: forks, so shared pages count in each).

Beside each, what Slurm alone takes on the same nodes: an sbatch whose srun runs one task a
node (`true` that writes its start stamp) to every task running; SIGKILL of one task of an
`srun --kill-on-bad-exit` to no task left; scancel to no task left; `scontrol requeue` to
every task running again. Beside Ray's start, what Ray alone takes: a driver that places the
launcher's bundles (STRICT_SPREAD, one a node) and starts an actor on each that starts one
process writing its start stamp, to every such process running. The launcher's share is the
difference. And Slurm or Ray alone starting the same processes (same_task: bash on each node,
in an srun task or in an actor on the launcher's bundle, starts the stand-ins and the torchrun
job as the launcher would): on one machine the work's own start (torchrun's torch import)
grows with the nodes, which `true` does not show; the share beyond it is the launcher's own.

Bytecode is cached as in any install (a pip install compiles it): PYTHONDONTWRITEBYTECODE is
dropped for everything the script starts and the launcher compiled before the first run, or
every node agent would compile the launcher from source (0.06-0.16 s of CPU each, times the
nodes).

Usage: python benchmarks/bench_scale.py [--slurm 2,4,8,16,32] [--ray 2,4,8] [--repeat 3]
    [--per-node 4] [--doc]   (--doc writes the table into docs/benchmarks.md)
Needs root for Slurm (it starts its own cluster beside the usual test cluster and stops it
when done; --slurm '' skips it) and Ray installed for Ray (--ray '' skips it).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the stand-in's module (tests/scale_standin.py), the keeper's
from launcher.node.keeper import descendants  # noqa: E402  (the keeper's own walk)
from tests.scale_standin import GPUS  # noqa: E402  (one home: how a run of stand-ins launches)
from tests.scale_standin import overrides as standin_overrides  # noqa: E402

STANDIN = "tests/scale_standin.py"
PY = sys.executable
CLI = str(Path(PY).parent / "areal-launch")
TICKS = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.2
HOLD_S = 3.0  # every process running this long before the kill, cancel or requeue
RANK_NODES = 8  # the torchrun job spans this many nodes (fewer on smaller runs)
SLURM_ENV = {  # the script's own Slurm cluster, beside the usual test cluster
    "SLURM_BASE": "/tmp/areal-scale",
    "SLURM_ETC": "/tmp/areal-scale/etc",
    "SLURM_CTLD_PORT": "6917",
    "SLURMD_PORT": "17101",
    "SLURM_NODE_PREFIX": "scale",
    "SLURM_CPU_NODES": "0",
    "SLURM_ACCOUNTING": "0",
}
RAY_PREFIX = "127.0.1"  # the script's own Ray cluster's addresses (the test cluster: 127.0.0)
SECTION = "## Thirty-two nodes on one machine"


# ----------------------------------------------------------------------------- /proc
def read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def cpu_of(pid: int) -> Optional[float]:
    """Its CPU time in seconds, the scheduler's count in ns (/proc/PID/schedstat: stat's utime
    and stime come in whole ticks and read ~10 ms low a process); None when gone."""
    text = read(f"/proc/{pid}/stat")
    if not text or text.rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
        return None
    ran = read(f"/proc/{pid}/schedstat").split()
    return int(ran[0]) / 1e9 if ran else None


def hwm_kib(pid: int) -> int:
    m = re.search(rb"VmHWM:\s+(\d+)", read(f"/proc/{pid}/status"))
    return int(m.group(1)) if m else 0


@dataclass
class RunProcs:
    """What the script sees of one run on every node: its launcher processes (by the request
    path in their command line: agent, keeper and supervisor share it, being forks) and the
    processes it started (AREAL_LAUNCH_RUN in their environment)."""

    request: str
    marker: bytes
    cpu: dict[int, float] = field(default_factory=dict)  # launcher pid -> last CPU seen
    hwm: dict[int, int] = field(default_factory=dict)
    node: dict[int, str] = field(default_factory=dict)
    born: dict[int, float] = field(default_factory=dict)  # time.time() it started

    def scan(self) -> int:
        """Samples the launcher's processes; how many processes of the run are alive."""
        alive = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            argv = read(f"/proc/{pid}/cmdline")
            # the agent and its forks; not srun, whose command line names the request too
            ours = self.request.encode() in argv and b"python" in argv.split(b"\0")[0]
            if not ours and self.marker not in read(f"/proc/{pid}/environ"):
                continue
            cpu = cpu_of(pid)
            if cpu is None:
                continue
            alive += 1
            if ours:
                self.cpu[pid] = cpu
                self.hwm[pid] = max(self.hwm.get(pid, 0), hwm_kib(pid))
                if pid not in self.node:
                    self.node[pid], self.born[pid] = node_name(pid), born_at(pid)
        return alive

    def agents_up(self) -> float:
        """When the last node's agent started (each node's first launcher process)."""
        first: dict[str, float] = {}
        for pid, t in self.born.items():
            first[self.node[pid]] = min(first.get(self.node[pid], t), t)
        return max(first.values(), default=float("nan"))

    def peak_mib_per_node(self) -> float:
        per: dict[str, int] = {}
        for pid, kib in self.hwm.items():
            per[self.node[pid]] = per.get(self.node[pid], 0) + kib
        return max(per.values(), default=0) / 1024


def born_at(pid: int) -> float:
    """time.time() when pid started (its boot-clock start time, from /proc)."""
    fields = read(f"/proc/{pid}/stat").rsplit(b")", 1)[1].split()
    since = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / TICKS
    return time.time() - since


def node_name(pid: int) -> str:
    env = read(f"/proc/{pid}/environ").split(b"\0")
    for item in env:
        if item.startswith(b"SLURMD_NODENAME="):
            return item.split(b"=", 1)[1].decode()
    argv = read(f"/proc/{pid}/cmdline").split(b"\0")
    return argv[argv.index(b"--node") + 1].decode() if b"--node" in argv else "?"


class Sampler(threading.Thread):
    """Scans the run every SAMPLE_S until stopped."""

    def __init__(self, procs: RunProcs):
        super().__init__(daemon=True)
        self.procs, self.alive, self.halt = procs, 0, threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.alive = self.procs.scan()
            self.halt.wait(SAMPLE_S)


def wait_until(check: Callable[[], bool], within_s: float, what: str, poll_s: float = 0.05):
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {within_s:.0f} s")
        time.sleep(poll_s)
    return time.time()


# ----------------------------------------------------------------------------- stand-ins
def started(folder: Path, since: float) -> dict[str, float]:
    """process name -> its newest start stamp after `since`."""
    out: dict[str, float] = {}
    for path in folder.glob("*.json"):
        try:
            stamp = json.loads(path.read_text())["time"]
        except (OSError, ValueError, KeyError):
            continue
        name = path.name.rsplit(".", 2)[0]
        if stamp >= since and stamp > out.get(name, 0):
            out[name] = stamp
    return out


def standin_pid(folder: Path, name: str) -> int:
    newest = max(folder.glob(f"{name}.*.json"), key=lambda p: json.loads(p.read_text())["time"])
    return int(json.loads(newest.read_text())["pid"])


def expected(nodes: int, per_node: int) -> set[str]:
    ranks = min(nodes, RANK_NODES)
    workers = {f"beat-{i}" for i in range(nodes * per_node)}
    return workers | {f"actor-node{k}.rank{k}" for k in range(ranks)}


def launch_argv(
    runner: str,
    nodes: int,
    per_node: int,
    run_dir: Path,
    extra: list[str],
    code: str,
    ranks: Optional[int] = None,
) -> list[str]:
    """The launch (`ranks`: the torchrun job's nodes, default up to RANK_NODES); the stand-in
    is the measured checkout's `code` own (a node's preflight reads an entry from outside its
    checkout with an interpreter start more: --baseline's would)."""
    ranks = min(nodes, RANK_NODES) if ranks is None else ranks
    here, there = str(ROOT / STANDIN), str(Path(code) / STANDIN)
    own = there if os.path.isfile(there) else here
    return [
        CLI,
        f"launcher={runner}",
        *(o.replace(here, own) for o in standin_overrides(nodes, per_node, ranks, str(run_dir))),
        "+launcher.env.OMP_NUM_THREADS=1",
        *extra,
    ]


# ----------------------------------------------------------------------------- one run
@dataclass
class Sample:
    start_s: float
    phases: tuple[float, float, float]  # the CLI done, the last agent up, every worker running
    end_s: float  # kill, cancel or requeue: the event to its outcome
    clear_s: float  # kill, cancel: the event to nothing left on the nodes (the CLI may run on)
    cpu_s: float  # the launcher's own, whole run
    mem_mib: float  # peak per node
    cli_mib: float


class Run:
    """One launch of the stand-ins, watched from the outside."""

    def __init__(self, runner: str, nodes: int, per_node: int, work: Path, env: dict, extra=()):
        self.runner, self.nodes, self.per_node, self.env = runner, nodes, per_node, env
        self.run_dir = work / f"{runner}{nodes}-{time.monotonic_ns()}"
        self.want = expected(nodes, per_node)
        self.code = env.get("PYTHONPATH", str(ROOT))
        self.argv = launch_argv(runner, nodes, per_node, self.run_dir, list(extra), self.code)
        self.procs = RunProcs(f"{self.run_dir}/request.json", b"")
        self.sampler = Sampler(self.procs)
        self.cli_cpu = 0.0
        self.cli_kib = 0
        self.job: Optional[str] = None
        self.begun = self.cli_done = self.event_at = self.clear_at = 0.0
        self.phases = (0.0, 0.0, 0.0)

    def start(self) -> float:
        """Seconds from the command to every stand-in running."""
        self.begun = begun = time.time()
        proc = subprocess.Popen(  # in the checkout measured: its node agents start there too
            self.argv,  # (a job's cwd is its submitter's; `python -m` looks there first)
            env=self.env,
            cwd=self.code,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.proc = proc
        if self.runner == "slurm":
            assert proc.stdout is not None
            out = proc.stdout.read()  # then wait4: the CLI's own CPU and memory
            self._reap_cli(proc)
            self.cli_done = time.time()
            self.job = out.decode().split()[-1]
        record = self.run_dir / "launch.json"
        wait_until(record.exists, 120, "launch.json")
        run_id = json.loads(record.read_text())["run_id"]
        self.procs.marker = f"AREAL_LAUNCH_RUN={run_id}\0".encode()
        self.sampler.start()
        stand = self.run_dir / "standin"
        wait_until(lambda: set(started(stand, begun)) >= self.want, 300, "every process running")
        stamps = started(stand, begun)
        workers = max(t for name, t in stamps.items() if name.startswith("beat-"))
        cli = self.cli_done - begun if self.cli_done else float("nan")  # Ray's CLI runs on
        self.phases = (cli, self.procs.agents_up() - begun, workers - begun)
        return max(stamps.values()) - begun

    def _reap_cli(self, proc: subprocess.Popen) -> None:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        self.cli_cpu = usage.ru_utime + usage.ru_stime
        self.cli_kib = usage.ru_maxrss

    def gone(self, within_s: float = 120) -> float:
        """time.time() when nothing of the run is left on any node and the CLI has ended
        (clear_at: when the nodes were clear; on Ray the driver, the CLI, exits after)."""

        def check() -> bool:
            if self.procs.scan() != 0:
                return False
            self.clear_at = self.clear_at or time.time()
            return self._cli_done()

        return wait_until(check, within_s, "gone")

    def _cli_done(self) -> bool:
        if self.proc.returncode is not None:
            return True
        try:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.cli_cpu, self.cli_kib = usage.ru_utime + usage.ru_stime, usage.ru_maxrss
        return True

    def finish(self, start_s: float, end_s: float) -> Sample:
        self.sampler.halt.set()
        self.sampler.join()
        cpu = self.cli_cpu + sum(self.procs.cpu.values())
        return Sample(
            start_s,
            self.phases,
            end_s,
            self.clear_at - self.event_at if self.event_at and self.clear_at else end_s,
            cpu / self.nodes,
            self.procs.peak_mib_per_node(),
            self.cli_kib / 1024,
        )


def kill_one(run: Run) -> float:
    """A stand-in on the last node SIGKILLed: seconds to nothing of the run left."""
    victim = standin_pid(run.run_dir / "standin", f"beat-{run.nodes * run.per_node - 1}")
    killed = run.event_at = time.time()
    os.kill(victim, 9)
    return run.gone() - killed


def cancel(run: Run) -> float:
    handle = run.job if run.job else str(run.run_dir)
    begun = run.event_at = time.time()
    subprocess.run([CLI, "cancel", handle], env=run.env, capture_output=True, timeout=120)
    return run.gone() - begun


def requeue(run: Run) -> float:
    """USR1 to the batch shell: seconds to every stand-in running again; then cancelled."""
    assert run.job is not None
    begun = time.time()
    subprocess.run(
        ["scancel", "--batch", "--signal=USR1", run.job], env=run.env, check=True, timeout=60
    )
    stand = run.run_dir / "standin"
    took = wait_until(lambda: set(started(stand, begun)) >= run.want, 300, "running again") - begun
    subprocess.run([CLI, "cancel", run.job], env=run.env, capture_output=True, timeout=120)
    run.gone()
    return took


def measure(runner: str, nodes: int, args, work: Path, env: dict) -> dict[str, list[Sample]]:
    cases: dict[str, tuple[Callable[[Run], float], list[str]]] = {
        "kill": (kill_one, []),
        "cancel": (cancel, []),
    }
    if runner == "slurm":
        cases["requeue"] = (requeue, ["launcher.requeue=true"])
    cases = {k: v for k, v in cases.items() if k in args.cases.split(",")}
    out: dict[str, list[Sample]] = {name: [] for name in cases}
    for i in range(args.repeat):
        for name, (event, extra) in cases.items():
            if name == "requeue" and i >= args.requeue_repeat:
                continue
            run = Run(runner, nodes, args.per_node, work, env, extra)
            try:
                start_s = run.start()
                time.sleep(HOLD_S)
                end_s = event(run)
            finally:
                if run.job:
                    subprocess.run(["scancel", run.job], env=env, capture_output=True)
            out[name].append(run.finish(start_s, end_s))
            print(
                f"  {runner} {nodes:2d} nodes {name}: start {start_s:.2f} s "
                f"(CLI, agents, workers: {', '.join(f'{x:.2f}' for x in run.phases)}), "
                f"{name} {end_s:.2f} s, cpu/node {out[name][-1].cpu_s:.2f} s",
                flush=True,
            )
    return out


# ----------------------------------------------------------------------------- Slurm alone
FLOOR_TASK = 'date +%s.%N > "$FLOOR_DIR/$SLURM_NODEID.$$"; exec sleep 600'


def alone_script(path: Path, nodes: int, tag: str, requeue: bool, exports: str, task: str) -> Path:
    """A batch script as the launcher's job asks (whole nodes, every GPU) whose srun runs
    `task` once a node under bash, tagged FLOOR_TAG=`tag` (how its processes are found)."""
    path.write_text(
        "\n".join(
            [
                "#!/bin/bash",
                f"#SBATCH --nodes={nodes}",
                "#SBATCH --ntasks-per-node=1",
                f"#SBATCH --gpus-per-node={GPUS}",
                "#SBATCH --exclusive",
                f"#SBATCH --output={path.parent}/slurm-%j.out",
                "#SBATCH --requeue" if requeue else "#SBATCH --no-requeue",
                f"export {exports}",
                f"srun --kill-on-bad-exit=1 --gpus-per-node={GPUS} env FLOOR_TAG={tag} "
                f"bash -c '{task}'",
                "",
            ]
        )
    )
    return path


def floor_script(nodes: int, folder: Path, tag: str, requeue: bool) -> Path:
    """One task a node, as the launcher's job asks (whole nodes, every GPU), each writing its
    start stamp and then waiting: Slurm's own start, kill, cancel and requeue."""
    return alone_script(
        folder / "floor.sbatch", nodes, tag, requeue, f"FLOOR_DIR={folder}", FLOOR_TASK
    )


def floor_stamps(folder: Path, since: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for path in folder.glob("[0-9]*.[0-9]*"):
        try:
            stamp = float(path.read_text())
        except (OSError, ValueError):
            continue
        node = path.name.split(".")[0]
        if stamp >= since:
            out[node] = max(out.get(node, 0), stamp)
    return out


def stamps_of(folder: Path, nodes: int, begun: float, what: str) -> float:
    """Seconds from `begun` to the last of `nodes` start stamps in `folder`."""
    wait_until(lambda: len(floor_stamps(folder, begun)) == nodes, 120, what)
    return max(floor_stamps(folder, begun).values()) - begun


def tagged(marker: bytes) -> list[int]:
    return [
        int(e)
        for e in os.listdir("/proc")
        if e.isdigit() and marker in read(f"/proc/{e}/environ") and cpu_of(int(e)) is not None
    ]


def slurm_alone(nodes: int, event: str, work: Path, env: dict) -> tuple[float, float]:
    """(sbatch to every task running, the event to its outcome) for Slurm alone."""
    tag = f"floor{time.monotonic_ns()}"
    folder = work / tag
    folder.mkdir()
    marker = f"FLOOR_TAG={tag}\0".encode()
    script = floor_script(nodes, folder, tag, event == "requeue")
    begun = time.time()
    job = subprocess.run(
        ["sbatch", "--parsable", str(script)], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        start_s = stamps_of(folder, nodes, begun, "Slurm's tasks")
        time.sleep(HOLD_S)
        t0 = time.time()
        if event == "kill":
            os.kill(max(tagged(marker)), 9)
        elif event == "cancel":
            subprocess.run(["scancel", job], env=env, check=True)
        else:
            subprocess.run(["scontrol", "requeue", job], env=env, check=True)
            again = wait_until(
                lambda: len(floor_stamps(folder, t0)) == nodes, 300, "requeued tasks"
            )
            return start_s, again - t0
        return start_s, wait_until(lambda: not tagged(marker), 120, "Slurm's tasks gone") - t0
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True)
        wait_until(lambda: not tagged(marker), 120, "Slurm's tasks gone")


def same_task(nodes: int, per_node: int, node: str) -> str:
    """The launcher's processes of one node started by bash alone: `per_node` stand-ins and,
    on the first min(nodes, RANK_NODES), a torchrun of one stand-in rank (a static rendezvous
    on node 0's port), named as the launcher names them; `node` is the shell's word for the
    node's index. So the start of the same work is beside ours: torchrun's torch import (~2 s
    of CPU each, 2 of them at 2 nodes and 8 at 32) is the work's, not the launcher's, and on
    one machine of 2 cores it grows with the nodes."""
    ranks = min(nodes, RANK_NODES)
    port = 20000 + time.monotonic_ns() // 1000 % 20000
    standin = ROOT / STANDIN
    return (
        f"for i in $(seq 0 {per_node - 1}); do "
        f"AREAL_LAUNCH_PROCESS=beat-$(({node}*{per_node}+i)) {PY} {standin} & done; "
        f"if [ {node} -lt {ranks} ]; then AREAL_LAUNCH_PROCESS=actor-node{node} "
        f"{PY} -m torch.distributed.run --nnodes {ranks} --node-rank {node} "
        f"--nproc-per-node 1 --master-addr 127.0.0.1 --master-port {port} {standin} & fi; wait"
    )


def same_script(nodes: int, per_node: int, folder: Path, tag: str) -> Path:
    """same_task on every node, started by Slurm (one srun task a node)."""
    exports = f"STANDIN_DIR={folder} OMP_NUM_THREADS=1"
    task = same_task(nodes, per_node, "$SLURM_NODEID")
    return alone_script(folder / "same.sbatch", nodes, tag, False, exports, task)


def slurm_same(nodes: int, per_node: int, work: Path, env: dict) -> float:
    """sbatch to every process of same_script running."""
    tag = f"same{time.monotonic_ns()}"
    folder = work / tag
    folder.mkdir()
    marker = f"FLOOR_TAG={tag}\0".encode()
    want = expected(nodes, per_node)
    begun = time.time()
    job = subprocess.run(
        ["sbatch", "--parsable", str(same_script(nodes, per_node, folder, tag))],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        wait_until(lambda: want <= set(started(folder, begun)), 180, "Slurm's same processes")
        return max(started(folder, begun)[name] for name in want) - begun
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True)
        gone(marker, "Slurm's same processes")


def gone(marker: bytes, what: str) -> None:
    """Every process tagged `marker` ended: a floor's own stop given 60 s (once, under load,
    scancel of the 32-node one had left some after 120 s), then SIGKILL, so that one slow
    cleanup of a floor does not end the whole benchmark."""
    try:
        wait_until(lambda: not tagged(marker), 60, f"{what} gone")
    except RuntimeError:
        print(f"  {what}: still running 60 s after their stop; killed", flush=True)
        kill_tagged(marker)
        wait_until(lambda: not tagged(marker), 60, f"{what} gone")


def kill_tagged(marker: bytes) -> None:
    for pid in tagged(marker):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


# ----------------------------------------------------------------------------- one agent
def node_request(code: str, per_node: int, work: Path) -> Path:
    """The request.json of a 4-node run of stand-ins (the torchrun job on node 0 alone), as
    the Slurm runner writes it (its dry run prints it)."""
    run_dir = work / f"agent-{time.monotonic_ns()}"
    argv = launch_argv("slurm", 4, per_node, run_dir, ["launcher.dry_run=true"], code, 1)
    out = subprocess.run(
        argv, env={**os.environ, "PYTHONPATH": code}, capture_output=True, text=True, check=True
    ).stdout
    path = run_dir.with_name(run_dir.name + ".json")
    path.write_text(out.split("(secrets masked):\n", 1)[1])
    return path


def agent_cpu(code: str, request: Path, per_node: int) -> tuple[float, float]:
    """(the CPU of one node agent, its keeper and supervisor from its start to its node's
    stand-ins running; a stand-in's own CPU by then), plan node 1 started as Slurm starts it
    (--peers, node 0's clearing said)."""
    run_dir = Path(json.loads(request.read_text())["run_dir"])
    (run_dir / "prepared").mkdir(parents=True)
    (run_dir / "prepared" / "0").write_text("ok\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    agent = subprocess.Popen(
        [PY, "-m", "launcher.node.agent", str(request), "--node", "1", "--peers"]
        + ["--hosts", ",".join(["127.0.0.1"] * 4)],
        env={**env, "PYTHONPATH": code},
        cwd=code,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: len(started(run_dir / "standin", 0)) == per_node, 60, "the node's stand-ins"
        )
        time.sleep(SAMPLE_S)  # past their start
        tree = [agent.pid, *descendants(agent.pid)]
        ours = [p for p in tree if str(request).encode() in read(f"/proc/{p}/cmdline")]
        theirs = [cpu_of(p) or 0.0 for p in tree if p not in ours]
        return sum(cpu_of(p) or 0.0 for p in ours), statistics.mean(theirs)
    finally:
        agent.terminate()
        agent.wait(60)


def cpu_alive(code: str, imports: str) -> float:
    """The CPU (s, the scheduler's exact count) of an interpreter started as a node agent is,
    once it has run `imports`, read while it is still alive as agent_cpu reads the agent's."""
    ready = f"{imports}; import sys; print(flush=True); sys.stdin.read()"
    proc = subprocess.Popen(
        [PY, "-c", ready],
        env={**os.environ, "PYTHONPATH": code},
        cwd=code,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"\n"
        return cpu_of(proc.pid) or 0.0
    finally:
        proc.communicate(b"")


def floors(code: str, runs: int) -> tuple[float, float]:
    """(a bare interpreter's CPU, started as a node agent is: `python -c pass`; the agent's
    imports on top of it): what any node agent in Python pays before it does anything, and
    what this one's modules add. Each the median of `runs`."""
    bare = med([cpu_alive(code, "pass") for _ in range(runs)])
    loaded = med([cpu_alive(code, "import launcher.node.agent") for _ in range(runs)])
    return bare, loaded - bare


def run_agents(args, work: Path) -> None:
    """--agent-cpu: one node agent's CPU, each checkout's in turn, the median of the runs;
    beside it the floor of any Python agent (the interpreter) and its imports."""
    requests = {code: node_request(code, args.per_node, work) for _, code in codes(args)}
    seen: dict[str, list[tuple[float, float]]] = {code: [] for code in requests}
    for _ in range(args.agent_cpu):
        for code, request in requests.items():
            shutil.rmtree(Path(json.loads(request.read_text())["run_dir"]), ignore_errors=True)
            seen[code].append(agent_cpu(code, request, args.per_node))
    for label, code in codes(args):
        bare, imports = floors(code, max(args.agent_cpu, 11))
        print(
            f"one node agent{' (' + label + ')' if label else ''}: "
            f"{med([a for a, _ in seen[code]]):.3f} s of CPU to its {args.per_node} stand-ins "
            f"running (each {1000 * med([b for _, b in seen[code]]):.0f} ms), "
            f"median of {args.agent_cpu}; of it a bare interpreter {1000 * bare:.0f} ms "
            f"and the agent's imports {1000 * imports:.0f} ms"
        )


# ----------------------------------------------------------------------------- Ray alone
RAY_NODES = """
import subprocess, sys, ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
nodes, task, gpus = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
ray.init(logging_level="ERROR")
pg = placement_group([{"CPU": 1.0, "GPU": gpus}] * nodes, strategy="STRICT_SPREAD")
@ray.remote
class Node:
    def run(self, k):
        return subprocess.run(["bash", "-c", task, "bash", str(k)]).returncode
strategy = PlacementGroupSchedulingStrategy
actors = [
    Node.options(num_cpus=1, num_gpus=gpus, scheduling_strategy=strategy(pg, k)).remote()
    for k in range(nodes)
]
sys.exit(max(ray.get([a.run.remote(k) for k, a in enumerate(actors)])))
"""  # Ray alone: the launcher's bundles placed as it places them, an actor on each running
# the task under bash with the node's index ($1), as the launcher's node actors start agents


def ray_same(nodes: int, per_node: int, work: Path, env: dict) -> float:
    """The command to every process of same_task running, each node's started by bash in an
    actor on the launcher's bundle (RAY_NODES); then they are killed."""
    tag = f"raysame{time.monotonic_ns()}"
    folder = work / tag
    folder.mkdir()
    marker = f"FLOOR_TAG={tag}\0".encode()
    want = expected(nodes, per_node)
    # in the task: a Ray worker has its raylet's environment, not the driver's
    task = f"export STANDIN_DIR={folder} OMP_NUM_THREADS=1 FLOOR_TAG={tag}; "
    begun = time.time()
    driver = subprocess.Popen(
        [PY, "-c", RAY_NODES, str(nodes), task + same_task(nodes, per_node, "$1"), str(GPUS)],
        env=env,
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: want <= set(started(folder, begun)), 180, "Ray's same processes")
        return max(started(folder, begun)[name] for name in want) - begun
    finally:
        kill_tagged(marker)  # the driver's actors wait on them
        try:
            driver.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait()
        gone(marker, "Ray's same processes")


def ray_alone(nodes: int, work: Path, env: dict) -> tuple[float, float]:
    """(the command to every node's process running, nan) for Ray alone: the launcher's
    bundles (runners/rayjob.py: one a node, every GPU, one CPU) placed as it places them, an
    actor on each starting one process, as the launcher's node actors start its agents."""
    folder = work / f"rayfloor{time.monotonic_ns()}"
    folder.mkdir()
    begun = time.time()
    driver = subprocess.Popen(
        [PY, "-c", RAY_NODES, str(nodes), f'date +%s.%N > "{folder}/$1.$$"', str(GPUS)],
        env=env,
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        start_s = stamps_of(folder, nodes, begun, "Ray's processes")
    finally:
        _, err = driver.communicate(timeout=120)
    if driver.returncode != 0:
        raise RuntimeError(f"Ray alone exited {driver.returncode}: {err.decode()[-2000:]}")
    return start_s, float("nan")


# ----------------------------------------------------------------------------- clusters
def slurm_cluster(nodes: int) -> dict:
    """The script's own Slurm cluster of `nodes` nodes (started, or kept when it runs)."""
    env = {**os.environ, **SLURM_ENV, "SLURM_NODES": str(nodes)}
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "slurm" / "start-slurm.sh")],
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return {**os.environ, "SLURM_CONF": f"{SLURM_ENV['SLURM_ETC']}/slurm.conf"}


def stop_slurm() -> None:
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "slurm" / "stop-slurm.sh")],
        env={**os.environ, **SLURM_ENV},
        capture_output=True,
        timeout=300,
    )


def ray_cluster(nodes: int, state: Path) -> dict:
    env = {
        **os.environ,
        "RAY_NODES": str(nodes),
        "RAY_CPU_NODES": "0",
        "RAY_IP_PREFIX": RAY_PREFIX,
        "RAY_CPUS_PER_NODE": "4",
        "RAY_BIN": str(Path(PY).parent / "ray"),
    }
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ray" / "start-ray-cluster.sh"), str(state)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the Ray cluster did not start: {out.stderr[-2000:]}")
    return {**os.environ, **dict(re.findall(r"export (\w+)=(\S+)", out.stdout))}


def stop_ray(state: Path) -> None:
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "ray" / "stop-ray-cluster.sh"), str(state)],
        capture_output=True,
        timeout=300,
    )


# ----------------------------------------------------------------------------- the table
@dataclass
class Row:
    runner: str
    nodes: int
    ours: dict[str, list[Sample]]
    alone: dict[str, list[tuple[float, float]]]
    label: str = ""  # "baseline": --baseline's code
    same: list[float] = field(default_factory=list)  # Slurm or Ray alone, the same processes


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def row_cells(r: Row, per_node: int) -> list[str]:
    every = [s for samples in r.ours.values() for s in samples]
    start = med([s.start_s for s in every])
    floor = med([a[0] for pairs in r.alone.values() for a in pairs])

    def event(name: str) -> str:
        if name not in r.ours:
            return "-"
        ours = med([s.end_s for s in r.ours[name]])
        alone = med([a[1] for a in r.alone.get(name, [])])
        if r.alone.get(name):
            return f"{ours:.2f} ({alone:.2f})"
        clear = med([s.clear_s for s in r.ours[name]])  # Ray: the nodes, then the driver
        return f"{ours:.2f} (nodes clear {clear:.2f})"

    return [
        r.runner + (f" ({r.label})" if r.label else ""),
        str(r.nodes),
        str(r.nodes * per_node + min(r.nodes, RANK_NODES) * 2),  # workers, torchruns, ranks
        f"{start:.2f} ({floor:.2f})" if r.alone else f"{start:.2f}",
        f"{start - floor:.2f}" if r.alone else "-",
        f"{med(r.same):.2f} ({start - med(r.same):.2f})" if r.same else "-",
        f"{med([s.phases[2] for s in every]):.2f}",
        event("kill"),
        event("cancel"),
        event("requeue"),
        f"{med([s.cpu_s for s in every]):.2f}",
        f"{med([s.mem_mib for s in every]):.0f}",
        f"{med([s.cli_mib for s in every]):.0f}",
    ]


HEADER = [
    "runner",
    "nodes",
    "processes",
    "start s (Slurm or Ray alone)",
    "launcher's share s",
    "Slurm or Ray alone, same processes s (launcher's share beyond it)",
    "workers running s",
    "kill s (Slurm alone)",
    "cancel s (Slurm alone)",
    "requeue s (Slurm alone)",
    "launcher CPU s / node",
    "peak MiB / node",
    "CLI peak MiB",
]


def table(rows: list[Row], per_node: int) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|---|" + "---:|" * (len(HEADER) - 1)]
    for r in rows:
        cells = row_cells(r, per_node)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def interval(small: tuple[list[float], list[float]], large: tuple[list[float], list[float]]) -> str:
    """How sure the ratio of two shares is, each share a median of ours less a median of a
    floor: the 5th and 95th percentiles of the ratio over resamples of the runs (a share at or
    below zero counts as an unbounded ratio)."""
    pick = random.Random(0)

    def share(ours: list[float], floor: list[float]) -> float:
        return med(pick.choices(ours, k=len(ours))) - med(pick.choices(floor, k=len(floor)))

    seen = []
    for _ in range(2000):
        low, high = share(*small), share(*large)
        seen.append(high / low if low > 0 else float("inf"))
    seen.sort()
    return f"{seen[len(seen) // 20]:.2f}x to {seen[len(seen) * 19 // 20]:.2f}x"


def ratios(rows: list[Row]) -> list[str]:
    """The goals' ratios: the largest size of each runner against its smallest."""
    out = []
    for runner, label in sorted({(r.runner, r.label) for r in rows}):
        mine = [r for r in rows if r.runner == runner and r.label == label]
        if len(mine) < 2:
            continue
        a, b = mine[0], mine[-1]
        ea = [s for v in a.ours.values() for s in v]
        eb = [s for v in b.ours.values() for s in v]
        cpu = med([s.cpu_s for s in eb]) / med([s.cpu_s for s in ea])
        mem = med([s.mem_mib for s in eb]) / med([s.mem_mib for s in ea])
        line = (
            f"{runner}{' (' + label + ')' if label else ''} {b.nodes} against {a.nodes} "
            f"nodes: launcher CPU per node {cpu:.2f}x, "
            f"peak memory per node {mem:.2f}x"
        )
        if a.alone and b.alone:
            share = [
                med([s.start_s for s in e]) - med([x[0] for p in r.alone.values() for x in p])
                for e, r in ((ea, a), (eb, b))
            ]
            line += f", launcher's share of the start {share[1] / share[0]:.2f}x"
            workers = [
                med([s.phases[2] for s in e]) - med([x[0] for p in r.alone.values() for x in p])
                for e, r in ((ea, a), (eb, b))
            ]
            line += f" (of the workers' start {workers[1] / workers[0]:.2f}x)"
        if a.same and b.same:
            beyond = [med([s.start_s for s in e]) - med(r.same) for e, r in ((ea, a), (eb, b))]
            sure = interval(([s.start_s for s in ea], a.same), ([s.start_s for s in eb], b.same))
            line += (
                f"; beyond {runner.capitalize()} alone starting the same processes "
                f"{beyond[1] / beyond[0]:.2f}x "
                f"({beyond[0]:.2f} -> {beyond[1]:.2f} s; 90 % of resamples {sure})"
            )
        out.append(line)
    return out


def machine() -> str:
    load = read("/proc/loadavg").decode().split()[:3]
    return f"load average {' '.join(load)} at the end"


def write_doc(text: str) -> None:
    """Replace (or add) the section in docs/benchmarks.md."""
    path = ROOT / "docs" / "benchmarks.md"
    doc = path.read_text()
    start = doc.find(SECTION)
    if start < 0:
        doc = doc.rstrip("\n") + "\n\n" + text
    else:
        end = doc.find("\n## ", start + len(SECTION))
        doc = doc[:start] + text + (doc[end + 1 :] if end >= 0 else "")
    path.write_text(doc)


def sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def codes(args) -> list[tuple[str, str]]:
    """The launcher's code to run: this checkout's, and --baseline's in the same run."""
    return [("", str(ROOT))] + ([("baseline", args.baseline)] if args.baseline else [])


def cache_bytecode(args) -> None:
    """Bytecode as any install has it: none of the script's processes told not to write it,
    and each measured launcher's compiled before the first run pays for it."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    for _, code in codes(args):
        subprocess.run(
            [PY, "-m", "compileall", "-q", str(Path(code) / "launcher")],
            check=True,
            capture_output=True,
        )


def one_round(args, i: int):
    """args for round `i` of `rounds`: one run of each case (a requeue only in the first
    --requeue-repeat rounds)."""
    cases = [c for c in args.cases.split(",") if c != "requeue" or i < args.requeue_repeat]
    return argparse.Namespace(**{**vars(args), "repeat": 1, "cases": ",".join(cases)})


def rounds(args, counts: list[int], runner: str, one: Callable[[int, object], None]) -> None:
    """Each size in turn within each of --repeat rounds, not each size's runs together: the
    load of a shared machine drifts over minutes, and the goals are ratios between sizes."""
    for i in range(args.repeat):
        for n in counts:
            print(f"round {i + 1}/{args.repeat}: {runner} {n} nodes", flush=True)
            one(n, one_round(args, i))


def row_of(rows: dict, runner: str, n: int, label: str) -> Row:
    """The row of size `n` and code `label`; a baseline's shares the floors of this checkout's
    (made first: codes() lists it first), measured once for both."""
    if (n, label) not in rows:
        first = rows.get((n, ""))
        shared = (first.alone, first.same) if first else ({}, [])
        rows[(n, label)] = Row(runner, n, {}, shared[0], label, shared[1])
    return rows[(n, label)]


def add(row: Row, ours: dict[str, list[Sample]]) -> None:
    for name, samples in ours.items():
        row.ours.setdefault(name, []).extend(samples)


def run_slurm(args, work: Path) -> list[Row]:
    counts = sizes(args.slurm)
    if not counts:
        return []
    if os.geteuid() != 0:
        print("Slurm skipped: start-slurm.sh needs root (--slurm '' skips it)", file=sys.stderr)
        return []
    env = slurm_cluster(max(counts))
    rows: dict[tuple[int, str], Row] = {}

    def one(n: int, rnd) -> None:
        for label, code in codes(args):
            add(
                row_of(rows, "slurm", n, label),
                measure("slurm", n, rnd, work, {**env, "PYTHONPATH": code}),
            )
        if args.no_alone:
            return
        first = row_of(rows, "slurm", n, "")
        for e in rnd.cases.split(","):
            first.alone.setdefault(e, []).append(slurm_alone(n, e, work, env))
        first.same.append(slurm_same(n, args.per_node, work, env))

    try:
        rounds(args, counts, "slurm", one)
    finally:
        if not args.keep:
            stop_slurm()
    return [rows[(n, label)] for n in counts for label, _ in codes(args)]


def run_ray(args, work: Path) -> list[Row]:
    counts = sizes(args.ray)
    if not counts:
        return []
    if importlib.util.find_spec("ray") is None:
        print("Ray skipped: not installed (make install-test)", file=sys.stderr)
        return []
    state = Path(tempfile.mkdtemp(prefix="rs.", dir="/tmp"))
    rows: dict[tuple[int, str], Row] = {}

    def one(n: int, rnd) -> None:
        first = row_of(rows, "ray", n, "")
        if not args.no_alone:  # Ray has no kill or cancel of its own beside ours
            first.alone.setdefault("start", []).append(ray_alone(n, work, env))
            first.same.append(ray_same(n, args.per_node, work, env))
        for label, code in codes(args):
            add(
                row_of(rows, "ray", n, label),
                measure("ray", n, rnd, work, {**env, "PYTHONPATH": code}),
            )

    try:
        env = ray_cluster(max(counts), state)
        rounds(args, counts, "ray", one)
        return [rows[(n, label)] for n in counts for label, _ in codes(args)]
    finally:
        stop_ray(state)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slurm", default="2,4,8,16,32", help="Slurm node counts ('' : none)")
    ap.add_argument("--ray", default="2,4,8", help="Ray node counts ('' : none)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--per-node", type=int, default=4, help="stand-in workers per node")
    ap.add_argument("--requeue-repeat", type=int, default=1, help="requeues are slow: fewer")
    ap.add_argument("--cases", default="kill,cancel,requeue", help="which events to measure")
    ap.add_argument("--baseline", default="", help="another checkout, measured alongside")
    ap.add_argument("--no-alone", action="store_true", help="skip what Slurm or Ray alone take")
    ap.add_argument("--keep", action="store_true", help="leave the Slurm cluster running")
    ap.add_argument(
        "--agent-cpu", type=int, default=0, help="N: one node agent's CPU, N runs; no cluster"
    )
    ap.add_argument("--save", default="", help="write every sample to this JSON file")
    ap.add_argument("--doc", action="store_true", help="write docs/benchmarks.md's section")
    ap.add_argument("--note", default="", help="what the machine was doing, for the doc")
    args = ap.parse_args()
    cache_bytecode(args)
    if args.agent_cpu:
        with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
            return run_agents(args, Path(tmp))
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        work = Path(tmp)
        os.environ["XDG_CACHE_HOME"] = str(work / "cache")  # job ids: this cluster's own index
        rows = run_slurm(args, work) + run_ray(args, work)
    text = table(rows, args.per_node)
    if args.save:
        Path(args.save).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    notes = ratios(rows)
    print(text)
    print("\n".join(notes))
    print(machine())
    if args.doc:
        write_doc(doc_section(text, notes, args))


def doc_section(text: str, notes: list[str], args) -> str:
    return (
        f"{SECTION}\n\n"
        "Goals (issue 33): at 32 Slurm nodes a failed process leaves nothing on any node "
        "within 5 s and cancel within 10 s; the launcher's own CPU time per node and peak "
        "memory per node grow by at most 1.5x from 2 to 32 nodes, its share of the start "
        "(beyond Slurm's own) by at most 2x; the same at 8 Ray nodes. Script: "
        f"`.venv/bin/python benchmarks/bench_scale.py --repeat {args.repeat} "
        f"--per-node {args.per_node} --doc` (see its docstring for what each column is). "
        "Medians of the runs; in brackets what Slurm (or Ray) alone takes on the same nodes. "
        f"{args.note} {machine()}.\n\n"
        f"{text}\n\n" + "".join(f"- {n}\n" for n in notes)
    )


if __name__ == "__main__":
    main()
