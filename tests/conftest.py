"""Shared fixtures. Each block is self-contained; add new ones as their own block."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


# ----------------------------------------------------------------------------- slurm cluster
SLURM_SCRIPTS = Path(__file__).resolve().parent.parent / "scripts" / "slurm"


def _slurm_nodes_idle() -> list[str]:
    """Node names when the local test cluster answers and every node can take jobs."""
    if shutil.which("sinfo") is None:
        return []
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True,
                             text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return []
    rows = [ln.split() for ln in out.stdout.splitlines() if len(ln.split()) == 2]
    if out.returncode != 0 or not rows or any(s not in ("idle", "mix", "alloc") for _, s in rows):
        return []
    return sorted({name for name, _ in rows})


@pytest.fixture(scope="session")
def slurm_cluster():
    """The local Slurm test cluster (node1, node2, 8 fake GPUs each), node names as a list.

    Uses a running one (`make slurm-up`); else, as root, starts it with
    scripts/slurm/start-slurm.sh (installing Slurm if missing) and stops it afterwards.
    """
    nodes = _slurm_nodes_idle()
    started = False
    if len(nodes) < 2:
        if os.geteuid() != 0:
            pytest.skip("no local Slurm cluster: run `sudo make slurm-up` (needs root)")
        subprocess.run(["bash", str(SLURM_SCRIPTS / "start-slurm.sh")], check=True, timeout=600)
        started = True
        nodes = _slurm_nodes_idle()
    assert len(nodes) >= 2, f"the Slurm test cluster should have 2 idle nodes, has {nodes}"
    yield nodes
    if started:
        subprocess.run(["bash", str(SLURM_SCRIPTS / "stop-slurm.sh")], timeout=120)


@pytest.fixture(scope="session")
def tiny_model() -> str:
    """The demo's tiny Llama, built once per machine into the shared cache (`make tiny-model`)."""
    from launcher.tiny_model import MARKER, default_path

    if not (default_path() / MARKER).exists():
        subprocess.run([sys.executable, "-m", "launcher.tiny_model"], check=True, timeout=300)
    return str(default_path())
