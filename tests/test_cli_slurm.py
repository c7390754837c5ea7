"""`areal-launch status|cancel|logs JOB` as a user runs them: real subprocesses, real Slurm."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.cluster import ClusterSpec
from launcher.config import LauncherConfig
from launcher.plan import Plan, ProcessSpec
from launcher.runners import slurm

EXE = str(Path(sys.executable).parent / "areal-launch")
pytestmark = pytest.mark.skipif(not os.path.exists(EXE), reason=f"{EXE} is not installed")


def cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "XDG_CACHE_HOME": str(cache)})


def test_a_job_id_that_is_not_a_number_is_one_error_line_and_exit_2(tmp_path):
    out = cli("status", "12;rm -rf /", cache=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "error: job id '12;rm -rf /': expected the number areal-launch printed when it "
        "submitted the job, e.g. 1234"]


@pytest.mark.slurm
def test_status_logs_and_cancel_of_a_running_job(tmp_path, monkeypatch, slurm_cluster):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    proc = ProcessSpec(name="actor-0", component="actor", role="trainer", node=0,
                       argv=("bash", "-c", "echo hello; exec sleep 300"), gpus=(0,))
    plan = Plan(ClusterSpec(1, 8, "cpu"), "disaggregated", {}, processes=(proc,))
    script = slurm.render_sbatch(plan, plan.processes, LauncherConfig(type="slurm"),
                                 str(tmp_path / "run"), "cli-test")
    job = slurm.submit(script, tmp_path / "run")
    cache = tmp_path / "cache"
    try:
        deadline = time.monotonic() + 30
        while "actor-0 | hello" not in cli("logs", job, cache=cache).stdout:
            assert time.monotonic() < deadline, "the step never logged"
            time.sleep(0.3)
        status = cli("status", job, cache=cache)
        assert status.returncode == 0 and status.stdout.startswith(f"job {job}: RUNNING")
        assert cli("logs", job, "--engine", "actor", cache=cache).stdout == "actor-0 | hello\n"
        assert cli("cancel", job, cache=cache).stdout.startswith(f"job {job}: cancel requested")
        follow = cli("logs", job, "--follow", cache=cache)  # returns once the job has ended
        assert follow.returncode == 0 and "actor-0 | hello" in follow.stdout
        assert slurm.job_state(job) == "CANCELLED"
    finally:
        subprocess.run(["scancel", job], capture_output=True)


@pytest.mark.slurm
def test_status_of_a_job_slurm_does_not_know_exits_1(tmp_path, slurm_cluster):
    out = cli("status", "987654321", cache=tmp_path)
    assert out.returncode == 1 and out.stdout.startswith("job 987654321: not known to Slurm")
