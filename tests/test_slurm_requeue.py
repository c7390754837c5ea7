"""launcher.requeue on the real Slurm test cluster: the default recipe (two FSDP2 ranks on gloo,
no servers) with a 2-minute time limit is warned by Slurm before it (USR1 to the batch shell),
checkpoints, is requeued into the same run folder and resumes where it stopped, until it
finishes, one run in each experiment tracker with every step once; a job cancelled while it
waits to start again leaves nothing behind (that one is warned by hand, `scancel --batch
--signal=USR1`, the same path, to be quick).
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

from launcher.node.runs import find_run
from tests.processes import survivors, wait_until
from tests.trackers import mlflow_runs, mlflow_steps, tensorboard_steps, wandb_offline

pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.timeout(1000)]
ROOT = Path(__file__).resolve().parent.parent
AREAL_LAUNCH = ROOT / ".venv" / "bin" / "areal-launch"


def state(job: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    found = re.search(r"JobState=(\S+)", out)
    return found.group(1) if found else "GONE"


def submit(tmp_path: Path, tag: str, steps: int, tiny_model: str, time_limit: str = "30",
           signal_s: int = 60, more: tuple[str, ...] = ()) -> tuple[str, Path]:
    out = subprocess.run(
        [str(AREAL_LAUNCH), "launcher=slurm", "rollout=none", "actor.backend=fsdp:d2",
         "cluster.device=cpu", f"recipe.steps={steps}", f"model_path={tiny_model}",
         "launcher.requeue=true", f"launcher.time_limit={time_limit}",
         f"launcher.requeue_signal_s={signal_s}", *more,
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


def test_a_job_near_its_time_limit_checkpoints_requeues_and_resumes_in_the_same_run_folder(
        tmp_path, slurm_cluster, tiny_model):
    """Slurm warns 100 s before the 2-minute limit (its timer ticks about every 30 s, so 20 to
    50 s in, about 35 steps at most): each start does some steps, checkpoints and is requeued,
    until the 40 steps are done. (The test cluster lets a requeued job start again after 10 s,
    AuthInfo=cred_expire=10; Slurm's default is 120 s.)"""
    tag = uuid.uuid4().hex
    steps = 40
    job, run_dir = submit(tmp_path, tag, steps=steps, tiny_model=tiny_model, time_limit="2",
                          signal_s=100, more=("launcher.tracking=[tensorboard,wandb,mlflow]",
                                              "+launcher.env.WANDB_MODE=offline"))
    try:
        # every start pays torch's and the trackers' imports before its first step, so on a
        # busy 2-core machine a start does a few steps: about ten starts of ~50 s each
        deadline = time.monotonic() + 900
        while state(job) not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "GONE"):
            assert time.monotonic() < deadline, job_log(run_dir, job)[-3000:]
            time.sleep(1)
    finally:
        subprocess.run(["scancel", job], capture_output=True)
    text = job_log(run_dir, job)
    assert state(job) == "COMPLETED", text[-4000:]
    assert "asking the trainers for a checkpoint, then requeueing job" in text
    assert "the trainers saved their checkpoint" in text  # not the wait running out
    resumes = list(re.finditer(r"resumed from step (\d+) \(checkpoints/step_\1\), restart (\d+)",
                               text))
    assert resumes and int(resumes[0].group(1)) >= 1, text[-4000:]
    assert [int(r.group(2)) for r in resumes] == list(range(1, len(resumes) + 1))
    # after the last resume, every step once: nothing done twice, nothing skipped
    last = resumes[-1]
    assert [int(n) for n in re.findall(rf"step (\d+)/{steps} ", text[last.end():])] == \
        list(range(int(last.group(1)) + 1, steps + 1)), text[-3000:]
    records = [json.loads(p.read_text()) for p in sorted((run_dir / "restarts").glob("*.json"))]
    assert [(r["kind"], r["requeue"]) for r in records] == \
        [("requeue", n) for n in range(1, len(resumes) + 1)], records
    # `status` counts the requeues apart from the restarts launcher.max_restarts bounds
    out = subprocess.run([str(AREAL_LAUNCH), "status", job], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert f"requeues: {len(resumes)}" in out.stdout, out.stdout + out.stderr
    # one run in every tracker over all the starts, each of the steps once
    run_id = json.loads((run_dir / "request.json").read_text())["run_id"]
    assert tensorboard_steps(run_dir / "tensorboard") == list(range(1, steps + 1))
    # (W&B: a folder per start; one stopped before W&B's service wrote anything holds nothing)
    starts = [s for s in wandb_offline(run_dir) if s.run_id or s.steps]
    assert {s.run_id for s in starts} == {run_id} and len(starts) >= len(resumes) + 1
    # each step at most once; W&B's service may still drop the last row of a start that a
    # requeue stops (a known gap: TensorBoard, MLflow and metrics.jsonl keep it), at most one
    # step a requeue
    logged = sorted(n for s in starts for n in s.steps)
    assert len(logged) == len(set(logged)) and set(logged) <= set(range(1, steps + 1))
    assert len(set(range(1, steps + 1)) - set(logged)) <= len(resumes), logged
    [mlflow] = mlflow_runs(run_dir)
    assert mlflow_steps(run_dir, mlflow.info.run_id) == list(range(1, steps + 1))
    assert f"  mlflow: run {mlflow.info.run_id} " in out.stdout
    assert wait_until(lambda: not survivors(tag, run_dir), 30), survivors(tag, run_dir)


def test_cancelling_a_requeued_job_leaves_nothing_behind(tmp_path, slurm_cluster, tiny_model):
    tag = uuid.uuid4().hex
    job, run_dir = submit(tmp_path, tag, steps=200, tiny_model=tiny_model)
    try:
        assert wait_until(lambda: re.search(r"step [2-9]\d*/", job_log(run_dir, job)), 300), \
            job_log(run_dir, job)[-3000:]
        subprocess.run(["scancel", "--batch", "--signal=USR1", job], check=True)  # as Slurm warns
        # requeued: waits for its new start (Slurm's BeginTime), nothing of the run is alive
        assert wait_until(lambda: state(job) == "PENDING", 120), (state(job),
                                                                   job_log(run_dir, job)[-3000:])
        assert wait_until(lambda: not survivors(tag, run_dir), 60), survivors(tag, run_dir)
    finally:
        subprocess.run(["scancel", job], check=True)  # during the requeue
    assert wait_until(lambda: state(job) in ("CANCELLED", "GONE"), 60), state(job)
    time.sleep(20)  # past the 10 s the test cluster holds a requeued job: it never starts again
    assert state(job) in ("CANCELLED", "GONE") and not survivors(tag, run_dir)
    assert "resumed from step" not in job_log(run_dir, job)
