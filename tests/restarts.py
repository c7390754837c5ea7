"""A trainer job restarted the way the launcher's supervisor restarts one: the run's own
process spec from its plan.json (argv and environment as the launcher built them, node
addresses filled in for this machine), in the same run folder, with AREAL_RESTART=n."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Optional

from launcher.spec.process import ENV_RESTART, fill_hosts

ROOT = Path(__file__).resolve().parent.parent


def trainer_spec(run_dir: Path, component: str = "actor") -> dict:
    plan = json.loads((run_dir / "plan.json").read_text())
    specs = [
        p
        for p in plan["processes"]
        if p["role"] == "trainer" and component in p["component"].split(",")
    ]
    assert len(specs) == 1, f"one trainer process serving {component} expected: {specs}"
    return specs[0]


def restart_trainers(
    run_dir: Path, restart: int = 1, extra_env: Optional[dict] = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run the trainer job again (one node) and wait; its output together in stdout."""
    spec = trainer_spec(run_dir)
    hosts = ["127.0.0.1"] * (1 + int(spec["node"]))
    argv = [fill_hosts(a, hosts) for a in spec["argv"]]
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        **{k: fill_hosts(v, hosts) for k, v in spec["env"].items()},
        ENV_RESTART: str(restart),
        **(extra_env or {}),
    }
    return subprocess.run(
        argv,
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
