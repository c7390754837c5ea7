"""A launcher process for tests and benchmarks: a hand-built request run by the local runner.

Signals and SIGKILL must reach a real launcher process, not pytest, and the runner forks its
keeper and supervisor from it. Usage:
    launch_driver.py SPECS_JSON RUN_DIR [--ports N] [--base-port P] [--grace S]
                     [--health-timeout S] [--device cuda|cpu] [--num-nodes N]
SPECS_JSON holds a list of ProcessSpec dicts; "{port0}", "{port1}", ... in argv, env values and
health_url become ports taken from a PortReserver, printed first as "ports: a b ...".
Exits with the run's exit code; the run's status/all.json says how it ended.
"""
import argparse
import json
import sys
from pathlib import Path

from launcher.plan import ProcessSpec
from launcher.runners import local
from launcher.runners.ports import PortReserver
from launcher.runs import make_run_dir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.requests import request_for, write_plan  # noqa: E402


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
    args = ap.parse_args()
    with PortReserver(base_port=args.base_port) as reserver:
        ports = [reserver.take() for _ in range(args.ports)]
        print("ports:", *ports, flush=True)
        specs = [ProcessSpec.from_dict(fill(d, ports))
                 for d in json.loads(Path(args.specs).read_text())]
        run_dir = make_run_dir(Path(args.run_dir))
        request = request_for(run_dir, specs, num_nodes=args.num_nodes, device=args.device,
                              grace=args.grace, health=args.health_timeout)
        write_plan(request)
        return local.Runner(local.Config(grace_period_s=args.grace)).run(request)


if __name__ == "__main__":
    sys.exit(main())
