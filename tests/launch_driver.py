"""A launcher process for tests and benchmarks: a hand-built request run by a runner.

Signals and SIGKILL must reach a real launcher process, not pytest, and the local runner forks
its keeper and supervisor from it (the Ray runner's driver is this process, attached). Usage:
    launch_driver.py SPECS_JSON RUN_DIR [--ports N] [--base-port P] [--grace S]
                     [--health-timeout S] [--device cuda|cpu] [--num-nodes N]
                     [--runner local|ray] [--detach] [--placement-timeout S]
                     [--console auto|all] [--areal-root DIR] [--post-exit-hook CMD]
SPECS_JSON holds a list of ProcessSpec dicts; "{port0}", "{port1}", ... in argv, env values and
health_url become ports taken from a PortReserver, printed first as "ports: a b ...".
--areal-root: the run is of an entry that is not ours, with AReaL's folders under DIR (files/,
names/, trial exp/trial). Exits with the run's exit code; the run's status/all.json says how it
ended.
"""

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from launcher.node.ports import PortReserver
from launcher.node.runs import make_run_dir
from launcher.runners import local
from launcher.spec.process import ProcessSpec
from launcher.spec.request import USER, Folders

# the repository, not tests/ (whose requests.py would hide the `requests` package Ray uses)
sys.path[0] = str(Path(__file__).resolve().parent.parent)
from tests.hand_requests import request_for, write_plan  # noqa: E402


def fill(value, ports):
    if isinstance(value, str):
        for i, port in enumerate(ports):
            value = value.replace(f"{{port{i}}}", str(port))
        return value
    if isinstance(value, list):
        return [fill(v, ports) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, ports) for k, v in value.items()}
    return value


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("specs")
    ap.add_argument("run_dir")
    ap.add_argument("--ports", type=int, default=0)
    ap.add_argument("--base-port", type=int, default=None)
    ap.add_argument("--grace", type=float, default=10.0)
    ap.add_argument("--health-timeout", type=float, default=600.0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--num-nodes", type=int, default=1)
    ap.add_argument("--runner", choices=("local", "ray"), default="local")
    ap.add_argument("--detach", action="store_true")
    ap.add_argument("--placement-timeout", type=float, default=60.0)
    ap.add_argument("--console", choices=("auto", "all"), default="auto")
    ap.add_argument("--areal-root", default=None)
    ap.add_argument("--post-exit-hook", default=None)
    args = ap.parse_args()
    with PortReserver(base_port=args.base_port) as reserver:
        ports = [reserver.take() for _ in range(args.ports)]
        print("ports:", *ports, flush=True)
        specs = [
            ProcessSpec.from_dict(fill(d, ports)) for d in json.loads(Path(args.specs).read_text())
        ]
        run_dir = make_run_dir(Path(args.run_dir))
        request = request_for(
            run_dir,
            specs,
            num_nodes=args.num_nodes,
            device=args.device,
            grace=args.grace,
            health=args.health_timeout,
            console=args.console,
        )
        if args.post_exit_hook:
            request = dataclasses.replace(request, post_exit_hook=args.post_exit_hook)
        if args.areal_root:
            request = dataclasses.replace(
                request,
                folders=Folders(
                    make=(f"{args.areal_root}/files", f"{args.areal_root}/names"),
                    clear=(f"{args.areal_root}/names/{USER}/exp/trial",),
                ),
            )
        write_plan(request)
        if args.runner == "local":
            return local.Runner(local.Config(grace_period_s=args.grace)).run(request)
        from launcher.runners import ray

        runner = ray.Runner(
            ray.Config(
                grace_period_s=args.grace,
                detach=args.detach,
                placement_timeout_s=args.placement_timeout,
            )
        )
        runner.check(request)  # as a launch does: the plan must fit the cluster
        return runner.run(request)


if __name__ == "__main__":
    sys.exit(main())
