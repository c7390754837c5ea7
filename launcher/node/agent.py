"""One node of a run, started by a scheduler: `python -m launcher.node.agent REQUEST ...`.

Slurm runs it once per node (one task each) and Ray inside each node actor; it builds the same
tree as a local run (keeper.py) and runs the node's processes under the same supervisor. The
node's GPUs are the ones the scheduler shows it (CUDA_VISIBLE_DEVICES), mapped from the plan's
positions by request.materialize; hosts come from the scheduler too.

    --node K        plan node (default: $SLURM_NODEID)
    --hosts A,B,..  address of every plan node, in order (default: $AREAL_HOSTS)
    --peers         a node with servers only ends when every node with trainers has finished
                    (through <run folder>/done/), for schedulers with no other channel

Stdlib and the launcher's own modules only (no Hydra): a container needs just a Python.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from launcher.node import keeper
from launcher.node.console import RunConsole, plain_console
from launcher.node.preflight import problems
from launcher.node.runs import make_folders, prepare_folders
from launcher.node.supervisor import Peers, materialize_node, supervise
from launcher.spec.errors import LaunchError
from launcher.spec.process import ENV_HOSTS, fill_hosts
from launcher.spec.request import LaunchRequest, visible_gpus
from launcher.spec.runfolder import DONE


def attempt() -> str:
    """This start of the job: Slurm's job id and restart count (a requeue starts it again with
    the same request), else the first."""
    job = os.environ.get("SLURM_JOB_ID")
    return f"slurm-{job}-{os.environ.get('SLURM_RESTART_COUNT', '0')}" if job else "0"


def run_node(
    request: LaunchRequest,
    node: int,
    hosts: Sequence[str],
    peers: bool,
    out: Optional[RunConsole] = None,
) -> int:
    """Supervise plan node `node` of `request` here, under a keeper; its exit code."""
    if len(hosts) < request.nodes_needed():
        raise LaunchError(
            f"node {node}: {len(hosts)} host(s) given for a run on {request.nodes_needed()} nodes"
        )
    procs = materialize_node(request, node, hosts, visible_gpus(os.environ))
    missing = problems(procs, request.paths, request.flag_check)
    if missing:
        raise LaunchError(f"node {node} is not ready to run: " + "; ".join(missing))
    first = node == min(request.nodes, default=node)
    if peers:  # the run folder is shared (Slurm): the others wait for the first node's clearing
        prepare_folders(
            request.folders, request.run_dir, first, attempt(), request.health_timeout_s
        )
    else:  # Ray: the driver had the first node clear them before any node started
        make_folders(request.folders, clear=False)  # (runners/raydriver.py, prepare)
    trainer_nodes = tuple(k for k in request.nodes if request.has_trainers(k))
    watch = Peers(Path(request.run_dir) / DONE, trainer_nodes) if peers else None
    console = out or plain_console()

    def supervisor(cgroup: Optional[keeper.RunCgroup]) -> int:
        if cgroup is not None:
            cgroup.join()
        return supervise(
            request,
            procs,
            node=node,
            out=console,
            peers=watch,
            remote_health=remote_health(request, node, hosts),
        ).exit_code

    return keeper.run_tree(supervisor, f"areal-{request.run_id}-node{node}", request.grace_period_s)


def remote_health(request: LaunchRequest, node: int, hosts: Sequence[str]) -> list[str]:
    """Where the run's servers on other nodes answer their health probe, for a node with
    trainers (the silent-hang clock waits for them: node.supervisor.RemoteServers)."""
    if not request.has_trainers(node):
        return []
    return [
        fill_hosts(p.health_url, hosts)
        for p in request.processes
        if p.is_server and p.node != node and p.health_url
    ]


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m launcher.node.agent")
    ap.add_argument("request")
    ap.add_argument("--node", type=int, default=None)
    ap.add_argument("--hosts", default=None)
    ap.add_argument("--peers", action="store_true")
    args = ap.parse_args(argv)
    try:
        request = LaunchRequest.from_dict(json.loads(Path(args.request).read_text()))
        node = args.node if args.node is not None else int(os.environ["SLURM_NODEID"])
        hosts = (args.hosts or os.environ.get(ENV_HOSTS, "")).replace(" ", ",").split(",")
        return run_node(request, node, [h for h in hosts if h], args.peers)
    except (LaunchError, OSError, ValueError, KeyError) as exc:
        print(f"areal-launch: node supervisor: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
