"""Slurm's requeue as the batch shell runs it (launcher/node/requeue.py): real run folders, the
trainers' side played through launcher.trainer.checkpoints, real child processes for the step.
The batch script around it is tests/test_sbatch.py (real bash, stand-ins for srun and
scontrol); the whole thing on the Slurm test cluster is tests/test_slurm_requeue.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.node import requeue, restarts
from launcher.node.requeue import Job, Warned
from launcher.trainer import checkpoints


def kinds(run_dir: Path) -> list[tuple[str, int]]:
    return [(r.kind, r.requeue) for r in restarts.read_all(run_dir)]


@pytest.fixture
def step():
    """The job's step: a child process that runs until the test ends it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def trainers(run_dir: Path, final: bool = False, after: int = 1):
    """A sleep that plays the trainers: they save the requested checkpoint on the after-th tick."""
    ticks = []

    def sleep(_seconds: float) -> None:
        ticks.append(1)
        if len(ticks) == after:
            asked = checkpoints.pending_request(run_dir)
            assert asked is not None
            checkpoints.mark_done(run_dir, asked, final=final)

    return sleep


def test_a_start_after_a_requeue_is_recorded_once_per_slurm_restart_count(tmp_path):
    assert requeue.record_start(tmp_path, Job("7", 0), 1.0) is None  # the first start
    made = requeue.record_start(tmp_path, Job("7", 2), 3.0)
    assert made is not None and made.line().startswith("restart 1: Slurm started the job again")
    assert requeue.record_start(tmp_path, Job("7", 2), 4.0) is None
    assert kinds(tmp_path) == [(restarts.REQUEUE, 2)]


def test_the_warning_checkpoints_records_and_requeues(tmp_path, step):
    said, asked = [], []
    sleep = trainers(tmp_path, after=2)
    warned = Warned(lead_s=120, wait_s=10, step_pid=step.pid, uptime_s=50)
    assert requeue.on_warning(tmp_path, Job("7", 0), warned, said.append, asked.append, sleep)
    assert asked == ["7"]
    assert said[-1] == "the trainers saved their checkpoint"
    request = (tmp_path / checkpoints.CONTROL / checkpoints.REQUEST).read_text().split()
    assert request[1] == "120"  # the stop's bound: the trainers hold at most that long
    [made] = restarts.read_all(tmp_path)
    assert (made.kind, made.requeue, made.name) == (restarts.REQUEUE, 1, "job 7")
    assert made.uptime_s >= 50 and not made.counted
    # the job's next start is that requeue: not recorded again
    assert requeue.record_start(tmp_path, Job("7", 1), 1.0) is None


def test_a_checkpoint_at_the_last_step_ends_the_job_without_a_requeue(tmp_path, step):
    said, asked = [], []
    warned = Warned(lead_s=60, wait_s=10, step_pid=step.pid)
    sleep = trainers(tmp_path, final=True)
    assert not requeue.on_warning(tmp_path, Job("7", 0), warned, said.append, asked.append, sleep)
    assert asked == [] and kinds(tmp_path) == []
    assert "at their last step: the job ends, no requeue" in said[-1]


def test_a_run_that_ends_before_its_checkpoint_is_not_requeued(tmp_path):
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    said, asked = [], []
    warned = Warned(lead_s=60, wait_s=10, step_pid=ended.pid)
    assert not requeue.on_warning(tmp_path, Job("7", 0), warned, said.append, asked.append)
    assert asked == [] and kinds(tmp_path) == []
    assert said[-1] == "the run ended before the time limit: no requeue"


def test_trainers_that_do_not_answer_in_time_are_requeued_anyway(tmp_path, step):
    """The stop comes at the time limit regardless: a requeue keeps the run (from its last
    checkpoint) where no requeue would lose it."""
    said, asked = [], []
    warned = Warned(lead_s=60, wait_s=3, step_pid=step.pid)
    assert requeue.on_warning(
        tmp_path, Job("9", 1), warned, said.append, asked.append, lambda s: None
    )
    assert asked == ["9"] and kinds(tmp_path) == [(restarts.REQUEUE, 2)]


def test_the_entry_reads_slurms_environment_and_writes_through_restarts(tmp_path):
    env = {**os.environ, "SLURM_JOB_ID": "12", "SLURM_RESTART_COUNT": "3"}
    argv = [sys.executable, "-m", "launcher.node.requeue", "started", "--run-dir", str(tmp_path)]
    out = subprocess.run([*argv, "--uptime", "2"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    [path] = (tmp_path / restarts.FOLDER).glob("*.json")
    data = json.loads(path.read_text())
    assert (data["kind"], data["requeue"], data["name"]) == ("requeue", 3, "job 12")
