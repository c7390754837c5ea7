"""Shared fixtures. Each block is self-contained; add new ones as their own block."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


# ----------------------------------------------------------------------------- Ctrl-C
def pytest_configure(config):
    """The tests send SIGINT to launchers they start, as a user's Ctrl-C at a terminal. A suite
    started with SIGINT ignored (a background job of a non-interactive shell, `nohup`) would
    hand that to every launcher (an ignored signal stays ignored across exec), and Python then
    ignores Ctrl-C: handled here instead, a child starts with SIGINT at its default."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# ----------------------------------------------------------------------------- xdist groups
def pytest_itemcollected(item):
    """For `make test` (pytest -n 2 --dist loadgroup): the tests on the Slurm and the Ray test
    clusters run one after another on one worker (they share the clusters' nodes, and the
    ports runs count up from 30000 on them). The tests of a module that shares a module-scoped
    fixture (one real run or server, checked by several tests) stay on one worker, or each
    worker would start that run again. The rest spread over both workers. (Marked as each
    test is collected: xdist reads the groups before other collection hooks run.)"""
    names = set(getattr(item, "fixturenames", ()))
    if (
        {"ray_cluster", "slurm_cluster"} & names
        or item.get_closest_marker("ray")
        or item.get_closest_marker("slurm")
    ):
        item.add_marker(pytest.mark.xdist_group("clusters"))
        return
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info else ():
        if defs and defs[-1].scope == "module":
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
            return


# ----------------------------------------------------------------------------- slurm cluster
SLURM_SCRIPTS = Path(__file__).resolve().parent.parent / "scripts" / "slurm"


def _slurm_nodes_idle() -> list[str]:
    """Node names when the local test cluster answers and every node can take jobs."""
    if shutil.which("sinfo") is None:
        return []
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        return []
    rows = [ln.split() for ln in out.stdout.splitlines() if len(ln.split()) == 2]
    if out.returncode != 0 or not rows or any(s not in ("idle", "mix", "alloc") for _, s in rows):
        return []
    return sorted({name for name, _ in rows})


@pytest.fixture(scope="session")
def slurm_cluster():
    """The local Slurm test cluster (node1, node2, 8 fake GPUs each, in the default partition;
    node3 CPU-only, in partition cpu), node names as a list.

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


# ----------------------------------------------------------------------------- ray cluster
RAY_SCRIPTS = Path(__file__).resolve().parent.parent / "scripts" / "ray"
ENV_RAY_CLUSTER = "AREAL_RAY_CLUSTER"  # a running cluster's state folder, to reuse it


def _ray_env(state_dir: str) -> dict[str, str]:
    """RAY_ADDRESS, RAY_API_SERVER_ADDRESS, RAY_TMPDIR of a cluster, from its DIR/env."""
    text = (Path(state_dir) / "env").read_text()
    return dict(
        line.split(" ", 1)[1].split("=", 1)
        for line in text.splitlines()
        if line.startswith("export ")
    )


@pytest.fixture(scope="module")
def ray_cluster():
    """A real Ray cluster, 2 nodes x 8 fake GPUs on loopback (127.0.0.2, 127.0.0.3) and a
    CPU-only node (127.0.0.4, custom resource cpu_node: 1): the
    environment a driver needs (tests run drivers with {**os.environ, **ray_cluster}).

    Uses a running one ($AREAL_RAY_CLUSTER: its state folder); else starts one with
    scripts/ray/start-ray-cluster.sh and stops it afterwards, by PID (never `ray stop`).
    """
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed: make install-test (pip install -e '.[ray]')")
    given = os.environ.get(ENV_RAY_CLUSTER)
    if given:
        yield _ray_env(given)
        return
    out = subprocess.run(
        ["bash", str(RAY_SCRIPTS / "start-ray-cluster.sh")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RAY_BIN": str(Path(sys.executable).parent / "ray")},
    )
    assert out.returncode == 0, out.stderr
    state_dir = out.stdout.split("state in ", 1)[1].split()[0]
    try:
        yield _ray_env(state_dir)
    finally:
        subprocess.run(["bash", str(RAY_SCRIPTS / "stop-ray-cluster.sh"), state_dir], timeout=120)


@pytest.fixture(scope="session")
def tiny_model() -> str:
    """The demo's tiny Llama, built once per machine into the shared cache (`make tiny-model`)."""
    from launcher.trainer.tiny_model import MARKER, default_path

    if not (default_path() / MARKER).exists():
        subprocess.run(
            [sys.executable, "-m", "launcher.trainer.tiny_model"], check=True, timeout=300
        )
    return str(default_path())


# ----------------------------------------------------------------------------- AReaL stand-in
@pytest.fixture(scope="session")
def stand_in(tmp_path_factory):
    """A stand-in for AReaL in a venv of its own (tests/stand_in_areal.py), made once: the local
    run of tests/test_other_entries.py and the Slurm and Ray end-to-end runs use it."""
    from tests.stand_in_areal import make

    return make(tmp_path_factory.mktemp("areal"))
