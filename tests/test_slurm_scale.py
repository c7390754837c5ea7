"""Eight Slurm nodes on this machine: every process starts on its node, and nothing of the run is
left on any node after a failure and after a cancel (issue 33; the timings are
benchmarks/bench_scale.py's).

The cluster is the test's own (scripts/slurm/start-slurm.sh with a folder, ports and node names
of its own, eight nodes of 8 fake GPUs), started and stopped by the fixture beside the usual
test cluster, whose partitions stay as they are. The run is `areal-launch launcher=slurm` as a
user types it, of stand-ins that import no torch (tests/scale_standin.py): two workers on every
node and, for the rendezvous, one torchrun job of one rank on each of the eight nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.processes import survivors
from tests.scale_standin import overrides

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(420)]
ROOT = Path(__file__).resolve().parent.parent
EXE = str(Path(sys.executable).parent / "areal-launch")
SCRIPTS = ROOT / "scripts" / "slurm"
NODES, PER_NODE = 8, 2
PREFIX = "eight"  # the nodes' names: eight1 .. eight8
CLUSTER = {  # beside the usual test cluster (6817, 17001+, /etc/slurm) and bench_scale's
    "SLURM_BASE": "/tmp/areal-slurm-eight",
    "SLURM_ETC": "/tmp/areal-slurm-eight/etc",
    "SLURM_CTLD_PORT": "6947",
    "SLURMD_PORT": "17401",
    "SLURM_NODE_PREFIX": PREFIX,
    "SLURM_NODES": str(NODES),
    "SLURM_CPU_NODES": "0",
}
WITHIN_S = 120  # a bound on waiting, not a speed check


@pytest.fixture(scope="module")
def eight_nodes():
    """The environment for commands on the test's own 8-node cluster (SLURM_CONF)."""
    if os.geteuid() != 0:
        pytest.skip("an 8-node Slurm cluster of the test's own needs root (start-slurm.sh)")
    env = {**os.environ, **CLUSTER}
    subprocess.run(["bash", str(SCRIPTS / "start-slurm.sh")], env=env, check=True, timeout=600)
    try:
        yield {"SLURM_CONF": f"{CLUSTER['SLURM_ETC']}/slurm.conf"}
    finally:
        subprocess.run(["bash", str(SCRIPTS / "stop-slurm.sh")], env=env, timeout=300)


def launch(run_dir: Path, env: dict, ranks: int) -> tuple[str, str]:
    """Start the stand-ins on every node (a torchrun job on the first `ranks` nodes); the job id
    and the run's tag."""
    tag = uuid.uuid4().hex
    out = subprocess.run(
        [
            EXE,
            "launcher=slurm",
            *overrides(NODES, PER_NODE, ranks, str(run_dir)),
            f"+launcher.env.TEST_RUN_TAG={tag}",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=WITHIN_S,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()[-1], tag


def running(run_dir: Path) -> dict[str, str]:
    """process name -> the Slurm node it wrote its start record on."""
    found = {}
    for path in (run_dir / "standin").glob("*.json"):
        try:
            found[path.name.rsplit(".", 2)[0]] = json.loads(path.read_text())["node"]
        except (OSError, ValueError):
            continue
    return found


def wait_for(check, what: str):
    deadline = time.monotonic() + WITHIN_S
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what} (waited {WITHIN_S} s)")


def every_process_on_its_node(run_dir: Path, ranks: int) -> dict[str, str]:
    want = {f"beat-{i}": f"{PREFIX}{1 + i // PER_NODE}" for i in range(NODES * PER_NODE)}
    want |= {f"actor-node{k}.rank{k}": f"{PREFIX}{1 + k}" for k in range(ranks)}
    wait_for(lambda: set(running(run_dir)) >= set(want), f"not every process started: {want}")
    assert running(run_dir) == want
    return want


def job_state(job: str, env: dict) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"],
        capture_output=True,
        text=True,
        env=env,
    )
    return out.stdout.strip()


def nothing_left(tag: str, run_dir: Path) -> None:
    wait_for(lambda: not survivors(tag, run_dir), "processes of the run are left")


def test_eight_nodes_start_every_process_and_a_failure_leaves_nothing(eight_nodes, tmp_path):
    """A worker killed on the last node ends the run on all eight: no process of it is left on
    any node, the job ends FAILED and its output names the killed process as the cause."""
    env = {**os.environ, **eight_nodes, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    run_dir = tmp_path / "fail"
    job, tag = launch(run_dir, env, ranks=NODES)
    try:
        every_process_on_its_node(run_dir, ranks=NODES)
        victim = f"beat-{NODES * PER_NODE - 1}"
        record = next((run_dir / "standin").glob(f"{victim}.*.json"))
        os.kill(json.loads(record.read_text())["pid"], 9)
        nothing_left(tag, run_dir)
        wait_for(lambda: job_state(job, env) == "FAILED", "the job did not end FAILED")
        out = (run_dir / f"slurm-{job}.out").read_text()
        assert f"{victim} killed by SIGKILL" in out
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True)


def test_eight_nodes_cancel_leaves_nothing(eight_nodes, tmp_path):
    """`areal-launch cancel JOB` on a run of eight nodes: nothing of it is left on any node."""
    env = {**os.environ, **eight_nodes, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    run_dir = tmp_path / "cancel"
    job, tag = launch(run_dir, env, ranks=1)
    try:
        every_process_on_its_node(run_dir, ranks=1)
        out = subprocess.run([EXE, "cancel", job], capture_output=True, text=True, env=env)
        assert out.returncode == 0 and "cancel requested" in out.stdout, out.stdout + out.stderr
        nothing_left(tag, run_dir)
        wait_for(lambda: job_state(job, env) == "CANCELLED", "the job was not cancelled")
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True)
