"""launcher.requeue on the real Slurm test cluster: the default recipe (two FSDP2 ranks on gloo,
no servers) is warned as Slurm warns before the time limit (USR1 to the batch shell, sent here
with `scancel --batch --signal=USR1`, the path `--signal=B:USR1@N` takes), checkpoints, is
requeued into the same run folder and resumes where it stopped; a job cancelled while it waits
to start again leaves nothing behind.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from launcher.runs import find_run
from tests.processes import survivors, wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parent.parent
AREAL_LAUNCH = ROOT / ".venv" / "bin" / "areal-launch"


def state(job: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    found = re.search(r"JobState=(\S+)", out)
    return found.group(1) if found else "GONE"


def submit(tmp_path: Path, tag: str, steps: int, tiny_model: str) -> tuple[str, Path]:
    out = subprocess.run(
        [str(AREAL_LAUNCH), "launcher=slurm", "rollout=none", "actor.backend=fsdp:d2",
         "cluster.device=cpu", f"recipe.steps={steps}", f"model_path={tiny_model}",
         "launcher.requeue=true", "launcher.time_limit=30", "launcher.requeue_signal_s=60",
         f"hydra.run.dir={tmp_path}/run"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, "TEST_RUN_TAG": tag})
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().splitlines()[-1]
    assert Path(find_run(job).run_dir) == tmp_path / "run"
    return job, tmp_path / "run"


def job_log(run_dir: Path, job: str) -> str:
    path = run_dir / f"slurm-{job}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def warn_when_stepping(job: str, run_dir: Path) -> None:
    """USR1 to the batch shell once a step past the first is done: Slurm's time-limit warning."""
    assert wait_until(lambda: re.search(r"step [2-9]\d*/", job_log(run_dir, job)), 300), \
        job_log(run_dir, job)[-3000:]
    subprocess.run(["scancel", "--batch", "--signal=USR1", job], check=True)


def hurry(job: str) -> str:
    """A requeued job may start 120 s later (Slurm's BeginTime); the test moves it to now."""
    current = state(job)
    if current == "PENDING":
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"],
                       capture_output=True)
    return current


def test_a_warned_job_checkpoints_requeues_and_resumes_in_the_same_run_folder(
        tmp_path, slurm_cluster, tiny_model):
    tag = uuid.uuid4().hex
    job, run_dir = submit(tmp_path, tag, steps=6, tiny_model=tiny_model)
    try:
        warn_when_stepping(job, run_dir)
        deadline = time.monotonic() + 420
        while hurry(job) not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "GONE"):
            assert time.monotonic() < deadline, job_log(run_dir, job)[-3000:]
            time.sleep(1)
    finally:
        subprocess.run(["scancel", job], capture_output=True)
    text = job_log(run_dir, job)
    assert state(job) == "COMPLETED", text[-4000:]
    assert "asking the trainers for a checkpoint, then requeueing job" in text
    assert "the trainers saved their checkpoint" in text  # not the wait running out
    resumed = re.search(r"resumed from step (\d+) \(checkpoints/step_\1\), restart 1", text)
    assert resumed and int(resumed.group(1)) >= 2, text[-4000:]
    assert re.search(r"step 6/6 ", text), text[-3000:]
    # every step after the resume once: nothing done twice, nothing skipped
    after = text[resumed.end():]
    assert [int(n) for n in re.findall(r"step (\d+)/6 ", after)] == \
        list(range(int(resumed.group(1)) + 1, 7))
    records = [json.loads(p.read_text()) for p in sorted((run_dir / "restarts").glob("*.json"))]
    assert [(r["kind"], r["requeue"]) for r in records] == [("requeue", 1)], records
    # `status` counts the requeue apart from the restarts launcher.max_restarts bounds
    out = subprocess.run([str(AREAL_LAUNCH), "status", job], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert "requeues: 1" in out.stdout, out.stdout + out.stderr
    assert wait_until(lambda: not survivors(tag, run_dir), 30), survivors(tag, run_dir)


def test_cancelling_a_requeued_job_leaves_nothing_behind(tmp_path, slurm_cluster, tiny_model):
    tag = uuid.uuid4().hex
    job, run_dir = submit(tmp_path, tag, steps=200, tiny_model=tiny_model)
    try:
        warn_when_stepping(job, run_dir)
        # requeued: waits for its new start (Slurm's BeginTime), nothing of the run is alive
        assert wait_until(lambda: state(job) == "PENDING", 120), (state(job),
                                                                   job_log(run_dir, job)[-3000:])
        assert wait_until(lambda: not survivors(tag, run_dir), 60), survivors(tag, run_dir)
        hurry(job)
        assert wait_until(lambda: re.search(r"resumed from step", job_log(run_dir, job)), 300)
    finally:
        subprocess.run(["scancel", job], check=True)
    assert wait_until(lambda: state(job) in ("CANCELLED", "GONE"), 60), state(job)
    assert wait_until(lambda: not survivors(tag, run_dir), 60), survivors(tag, run_dir)
