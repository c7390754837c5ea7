"""`areal-launch status|cancel|logs RUN` as a user runs them: real subprocesses, real Slurm."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.node.runs import read_record
from launcher.runners import slurm
from launcher.spec.process import ProcessSpec
from tests.hand_requests import request_for, write_plan

EXE = str(Path(sys.executable).parent / "areal-launch")
pytestmark = pytest.mark.skipif(not os.path.exists(EXE), reason=f"{EXE} is not installed")


def cli(*args: str, cache: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [EXE, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_CACHE_HOME": str(cache), **env},
    )


def one_error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    return lines[0]


@pytest.mark.parametrize("verb", ["status", "cancel", "logs"])
def test_a_missing_run_is_one_error_line_not_a_usage_box(tmp_path, verb):
    assert f"areal-launch {verb} JOB_ID" in one_error_line(cli(verb, cache=tmp_path))


@pytest.mark.parametrize("handle", ["12;rm -rf", "１２３", "a\nb", "../x y"])
def test_a_malformed_or_unknown_run_is_one_error_line(tmp_path, handle):
    line = one_error_line(cli("status", handle, cache=tmp_path))
    assert "\n" not in line and (
        "not a job id" in line or "no run with that id" in line or "not a run folder" in line
    )


def test_a_job_areal_launch_did_not_start_is_one_error_line(tmp_path):
    assert "no run with that id was started here" in one_error_line(
        cli("status", "987654321", cache=tmp_path)
    )


def slurm_job(tmp_path: Path, script: str) -> str:
    run_dir = tmp_path / "run"
    proc = ProcessSpec(
        name="actor-0",
        component="actor",
        role="trainer",
        node=0,
        argv=("bash", "-c", script),
        gpus=(0,),
    )
    request = request_for(run_dir, [proc], num_nodes=1)
    write_plan(request)
    slurm.Runner(slurm.Config(grace_period_s=3)).run(request)
    job = read_record(run_dir).job_id
    assert job is not None
    return job


@pytest.mark.slurm
def test_status_logs_and_cancel_of_a_running_slurm_job(tmp_path, monkeypatch, slurm_cluster):
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    job = slurm_job(tmp_path, "echo hello; exec sleep 300")
    try:
        deadline = time.monotonic() + 30
        while "actor-0 | hello" not in cli("logs", job, cache=cache).stdout:
            assert time.monotonic() < deadline, "the process never logged"
            time.sleep(0.3)
        status = cli("status", job, cache=cache)
        assert status.returncode == 0 and status.stdout.startswith(f"job {job}: RUNNING")
        by_folder = cli("status", str(tmp_path / "run"), cache=cache).stdout
        ticking = re.compile(r"\b\d+:\d\d\b")  # how long it has run: a second may pass between
        assert ticking.sub("T", by_folder) == ticking.sub("T", status.stdout)
        assert cli("logs", job, "--engine", "actor", cache=cache).stdout == "actor-0 | hello\n"
        assert cli("cancel", job, cache=cache).stdout.startswith(f"job {job}: cancel requested")
        follow = cli("logs", job, "--follow", cache=cache)  # returns once the job has ended
        assert follow.returncode == 0 and "actor-0 | hello" in follow.stdout
        assert slurm.job_state(job) == "CANCELLED"
    finally:
        subprocess.run(["scancel", job], capture_output=True)


@pytest.mark.slurm
def test_a_recorded_job_slurm_has_forgotten_exits_1(tmp_path, slurm_cluster):
    cache = tmp_path / "cache"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from launcher.node.runs import RunRecord, write_record; "
            "write_record(RunRecord('slurm', 'r', sys.argv[1], job_id='987654321'))",
            str(run_dir),
        ],
        env=env,
        check=True,
    )
    out = cli("status", "987654321", cache=cache)
    assert out.returncode == 1 and out.stdout.startswith("job 987654321: not known to Slurm")


@pytest.mark.slurm
def test_a_slurm_that_does_not_answer_is_not_said_to_have_forgotten_the_job(
    tmp_path, slurm_cluster
):
    """A real client against a controller that is not there (the port is wrong)."""
    conf = Path("/etc/slurm/slurm.conf").read_text()
    bad = tmp_path / "slurm.conf"
    bad.write_text(
        re.sub(r"(?m)^SlurmctldPort=.*$", "SlurmctldPort=1", conf)
        if "SlurmctldPort=" in conf
        else conf + "\nSlurmctldPort=1\n"
    )
    cache = tmp_path / "cache"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from launcher.node.runs import RunRecord, write_record; "
            "write_record(RunRecord('slurm', 'r', sys.argv[1], job_id='4242'))",
            str(run_dir),
        ],
        env={**os.environ, "XDG_CACHE_HOME": str(cache)},
        check=True,
    )
    line = one_error_line(cli("status", "4242", cache=cache, SLURM_CONF=str(bad)))
    assert "cannot ask Slurm" in line and "not known" not in line
