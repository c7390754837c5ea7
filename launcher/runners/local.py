"""The local runner: the run's processes on this machine (docs/architecture.md §8).

Its request object is every process as it will be exec'd here (LocalJob); the dry run prints
each as a shell line, and `run` writes the run record and starts the node's tree over them
(keeper.run_tree): the launcher holds the keeper, the keeper the supervisor, the supervisor
the processes. On cpu a plan over several
"nodes" runs them all here (virtual GPU slots, static rendezvous on loopback); a GPU plan over
several nodes needs a runner that has them (launcher=slurm or launcher=ray). Ports are reserved
on this host (ports.PortReserver), so two launches never collide.

`status`, `cancel` and `logs` work from the run folder: the record names the launcher's pid
(and its start time, so a reused pid is never signalled); each node's supervisor keeps
`status/<node>.json`.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from launcher.node.logs import follow_logs
from launcher.node.report import progress_lines
from launcher.node.runs import RunRecord, make_folders, write_record
from launcher.runners import LauncherBase
from launcher.runners.base import RunnerBase, unhonoured
from launcher.spec.errors import UserError
from launcher.spec.process import mask_env
from launcher.spec.request import Folders, LaunchRequest, Materialized, visible_gpus
from launcher.spec.runfolder import STATUS

if TYPE_CHECKING:  # rich is imported by a run, not by a plan
    from launcher.node.console import RunConsole

HERE = "127.0.0.1"


@dataclass
class Config(LauncherBase):
    """launcher=local: this machine."""

    _target_: str = "launcher.runners.local.Runner"


@dataclass(frozen=True)
class LocalJob:
    """The run on this machine: every process as it will be exec'd here (every plan node is
    this machine)."""

    request: LaunchRequest
    procs: tuple[Materialized, ...]


class Runner(RunnerBase[Config, LocalJob]):
    name = "local"
    runs_here = True  # offer(): None, this machine's GPUs are the run's (count_local_gpus)

    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(os.sched_getaffinity(0)))

    @contextmanager
    def ports(self, base_port: Optional[int], dry: bool) -> Iterator[Callable[[], int]]:
        from launcher.node.ports import PortReserver

        with PortReserver(base_port=base_port, lock=not dry) as reserver:
            yield reserver.take

    def notes(self, request: LaunchRequest) -> list[str]:
        """The engines' asks: their CPUs are their thread counts (set with the config), nothing
        else of them is this machine's to give."""
        why = "nothing is reserved on this machine, and nothing runs in a container"
        return unhonoured(request, self.name, ("cpu",), why)

    def check(self, request: LaunchRequest) -> list[str]:
        # CPU-only nodes (a node group's workers) run here beside the one GPU node
        nodes = len([k for k in range(request.nodes_needed()) if not request.cpu_only(k)])
        if nodes > 1 and request.device == "cuda":
            raise UserError(
                f"the plan spans {nodes} nodes with GPUs; launcher=local runs on "
                "this machine only: use launcher=slurm or launcher=ray, or a plan "
                "for one node (cluster.num_nodes=1)"
            )
        from launcher.node.preflight import problems

        missing = problems(list(self.job(request).procs), request.paths, request.flag_check)
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise UserError(f"not ready to run: {missing[0]}{more}")
        return []

    def job(self, request: LaunchRequest) -> LocalJob:
        from launcher.node.supervisor import materialize_node

        hosts = [HERE] * request.num_nodes
        return LocalJob(
            request, tuple(materialize_node(request, None, hosts, visible_gpus(os.environ)))
        )

    def render(self, job: LocalJob) -> str:
        made = job.request.folders
        said = [f"{what} {', '.join(paths)}" for what, paths in folder_steps(made) if paths]
        first = f"# first: {'; '.join(said)}\n\n" if said else ""
        hook = job.request.post_exit_hook
        last = f"\n# last, once every process is gone: post_exit_hook\n{hook}\n" if hook else ""
        return first + dry_run_text(list(job.procs)) + "\n" + last

    def execute(self, job: LocalJob) -> int:
        from launcher.node import keeper
        from launcher.node.keeper import RunCgroup
        from launcher.node.supervisor import supervise

        request = job.request
        make_folders(request.folders, clear=True)
        me = os.getpid()
        write_record(
            RunRecord("local", request.run_id, request.run_dir, pid=me, pid_start=start_time(me))
        )
        out = run_console()

        def supervisor(cgroup: Optional[RunCgroup]) -> int:
            if cgroup is not None:
                cgroup.join()
            return supervise(request, job.procs, node=None, out=out).exit_code

        code = keeper.run_tree(supervisor, f"areal-{request.run_id}", request.grace_period_s)
        if request.post_exit_hook:  # every process of the run is gone: the keeper saw to it
            from launcher.node.exithook import run_hook

            print(run_hook(request.post_exit_hook, request.run_dir, code).line(), flush=True)
        return code

    def status(self, record: RunRecord) -> tuple[str, int]:
        alive = is_alive(record.pid, record.pid_start)
        lines = [
            f"run {record.run_id}: {'RUNNING' if alive else 'ENDED'} ({record.runner}, "
            f"pid {record.pid})"
        ]
        for path in sorted(Path(record.run_dir, STATUS).glob("*.json")):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            for p in data.get("processes", []):
                state = "running" if p.get("exit") is None and alive else f"exit {p.get('exit')}"
                again = f", restart {p['restart']}" if p.get("restart") else ""
                lines.append(f"  {p['name']} ({p['role']}, pid {p['pid']}{again}): {state}")
            if data.get("reason"):
                lines.append(f"  {data['state']}: {data['reason']}")
        lines += progress_lines(Path(record.run_dir))
        lines.append(f"run folder: {record.run_dir}")
        return "\n".join(lines), 0

    def cancel(self, record: RunRecord) -> str:
        if not is_alive(record.pid, record.pid_start):
            return f"run {record.run_id}: already ended; nothing to cancel"
        assert record.pid is not None
        os.kill(record.pid, signal.SIGTERM)  # the launcher stops every process, then exits
        for _ in range(int((self.config.grace_period_s + 10) / 0.1)):
            if not is_alive(record.pid, record.pid_start):
                return f"run {record.run_id}: stopped"
            time.sleep(0.1)
        return f"run {record.run_id}: stop requested (pid {record.pid} still stopping)"

    def logs(self, record: RunRecord, follow: bool, engine: Optional[str]) -> Iterator[str]:
        return follow_logs(
            Path(record.run_dir), engine, lambda: follow and is_alive(record.pid, record.pid_start)
        )


def folder_steps(folders: Optional[Folders]) -> list[tuple[str, tuple[str, ...]]]:
    """What a run's first node does to the request's folders before anything starts, in order."""
    return [] if folders is None else [("cleared", folders.clear), ("made", folders.make)]


def run_console() -> RunConsole:
    """The console of a local run: rich on the terminal, plain prefixed lines otherwise."""
    from rich.console import Console

    from launcher.node.console import RunConsole, plain_console

    return RunConsole(Console(highlight=False)) if sys.stdout.isatty() else plain_console()


def start_time(pid: int) -> Optional[int]:
    """When pid started (clock ticks after boot): with the pid, names one process for good.
    None once it has ended, even while its parent has not reaped it yet (a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return None if fields[0] in (b"Z", b"X") else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def is_alive(pid: Optional[int], started: Optional[int]) -> bool:
    return pid is not None and started is not None and start_time(pid) == started


def dry_run_text(procs: list[Materialized]) -> str:
    """Each process as the shell line that would run it, secrets masked."""
    blocks = []
    for p in procs:
        where = f"{p.spec.role} on node {p.spec.node}"
        if p.spec.gpus:
            where += ", gpus " + ",".join(map(str, p.spec.gpus))
        if p.health_url:
            where += f", health {p.health_url}"
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in mask_env(p.env).items())
        line = shlex.join(p.argv)
        blocks.append(f"# {p.name}: {where}\n" + (f"{env} \\\n  {line}" if env else line))
    return "\n\n".join(blocks)
