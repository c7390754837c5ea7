"""A CLI-like launcher process for tests and benchmarks: supervise() in a process of its own.

Signals and SIGKILL must reach a real launcher process, not pytest. Usage:
    launch_driver.py SPECS_JSON RUN_DIR [--ports N] [--base-port P] [--grace S] [--health-timeout S]
SPECS_JSON holds a list of ProcessSpec dicts; "{port0}", "{port1}", ... in argv, env values and
health_url become ports taken from a PortReserver, printed first as "ports: a b ...".
Exits with the run's exit code.
"""
import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from launcher.plan import ProcessSpec
from launcher.runners.local import supervise
from launcher.runners.ports import PortReserver


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
    args = ap.parse_args()
    with PortReserver(base_port=args.base_port) as reserver:
        ports = [reserver.take() for _ in range(args.ports)]
        print("ports:", *ports, flush=True)
        specs = []
        for d in json.loads(Path(args.specs).read_text()):
            d = fill(d, ports)
            specs.append(ProcessSpec(
                name=d["name"], component=d.get("component", d["name"]), role=d["role"],
                node=d.get("node", 0), argv=tuple(d["argv"]), env=d.get("env", {}),
                health_url=d.get("health_url")))
        result = supervise(specs, Path(args.run_dir), grace_period_s=args.grace,
                           health_timeout_s=args.health_timeout,
                           console=Console(force_terminal=False, width=200))
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
