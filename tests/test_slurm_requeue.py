"""launcher.requeue on the real Slurm test cluster: the default recipe (two FSDP2 ranks on gloo,
no servers), warned as Slurm warns before the time limit (USR1 to the batch shell, sent with
`scancel --batch --signal=USR1` at a known step so that the test does not hang on Slurm's
30 s timer), checkpoints, holds, is requeued into the same run folder and resumes where it
stopped, until it finishes, one run in each experiment tracker with every step once; a job
cancelled while it waits to start again leaves nothing behind.
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


def submit(
    tmp_path: Path,
    tag: str,
    steps: int,
    tiny_model: str,
    time_limit: str = "30",
    signal_s: int = 60,
    more: tuple[str, ...] = (),
) -> tuple[str, Path]:
    out = subprocess.run(
        [
            str(AREAL_LAUNCH),
            "launcher=slurm",
            "rollout=none",
            "actor.backend=fsdp:d2",
            "cluster.device=cpu",
            f"recipe.steps={steps}",
            f"model_path={tiny_model}",
            "launcher.requeue=true",
            f"launcher.time_limit={time_limit}",
            f"launcher.requeue_signal_s={signal_s}",
            *more,
            f"hydra.run.dir={tmp_path}/run",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "TEST_RUN_TAG": tag},
    )
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().splitlines()[-1]
    assert Path(find_run(job).run_dir) == tmp_path / "run"
    return job, tmp_path / "run"


def job_log(run_dir: Path, job: str) -> str:
    path = run_dir / f"slurm-{job}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_job_warned_before_its_time_limit_checkpoints_requeues_and_resumes_in_the_same_run_folder(
    tmp_path, slurm_cluster, tiny_model
):
    """Twice, once the start has done two steps of its own, the batch shell gets Slurm's
    warning (USR1, what `--signal=B:USR1@60` sends 60 s before the limit, tests/test_sbatch.py;
    sent here by `scancel --batch`, since Slurm's timer ticks about every 30 s and a start on an
    idle machine can finish first): the trainers checkpoint, hold, and the job is requeued into
    the same run folder and resumes where it stopped, until the 16 steps are done. (The test
    cluster lets a requeued job start again after 10 s, AuthInfo=cred_expire=10; Slurm's
    default is 120 s.)"""
    tag = uuid.uuid4().hex
    steps, requeues = 16, 2
    job, run_dir = submit(
        tmp_path,
        tag,
        steps=steps,
        tiny_model=tiny_model,
        more=("launcher.tracking=[tensorboard,wandb,mlflow]", "+launcher.env.WANDB_MODE=offline"),
    )
    try:
        for n in range(requeues):  # start n: two steps of its own, then the warning

            def two_more_steps() -> bool:
                text = job_log(run_dir, job)
                starts = list(re.finditer(r"resumed from step \d+", text))
                if len(starts) != n:
                    return False
                since = text[starts[-1].end() :] if starts else text
                return len(re.findall(rf"\bstep \d+/{steps} ", since)) >= 2

            assert wait_until(two_more_steps, 300, 0.2), job_log(run_dir, job)[-3000:]
            subprocess.run(["scancel", "--batch", "--signal=USR1", job], check=True)
        deadline = time.monotonic() + 600
        while state(job) not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "GONE"):
            assert time.monotonic() < deadline, job_log(run_dir, job)[-3000:]
            time.sleep(1)
    finally:
        subprocess.run(["scancel", job], capture_output=True)
    text = job_log(run_dir, job)
    assert state(job) == "COMPLETED", text[-4000:]
    assert "asking the trainers for a checkpoint, then requeueing job" in text
    assert "the trainers saved their checkpoint" in text  # not the wait running out
    resumes = list(
        re.finditer(r"resumed from step (\d+) \(checkpoints/step_\1\), restart (\d+)", text)
    )
    assert len(resumes) == requeues and int(resumes[0].group(1)) >= 2, text[-4000:]
    assert (
        text.count("the launcher stops this job within 60 s after this checkpoint: holding")
        == requeues
        and "no stop came" not in text
    )
    assert [int(r.group(2)) for r in resumes] == list(range(1, len(resumes) + 1))
    # after the last resume, every step once: nothing done twice, nothing skipped
    last = resumes[-1]
    assert [int(n) for n in re.findall(rf"step (\d+)/{steps} ", text[last.end() :])] == list(
        range(int(last.group(1)) + 1, steps + 1)
    ), text[-3000:]
    records = [json.loads(p.read_text()) for p in sorted((run_dir / "restarts").glob("*.json"))]
    assert [(r["kind"], r["requeue"]) for r in records] == [
        ("requeue", n) for n in range(1, len(resumes) + 1)
    ], records
    # `status` counts the requeues apart from the restarts launcher.max_restarts bounds
    out = subprocess.run(
        [str(AREAL_LAUNCH), "status", job], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert f"requeues: {len(resumes)}" in out.stdout, out.stdout + out.stderr
    # one run in every tracker over all the starts, each of the steps once
    run_id = json.loads((run_dir / "request.json").read_text())["run_id"]
    assert tensorboard_steps(run_dir / "tensorboard") == list(range(1, steps + 1))
    # (W&B: a folder per start; the trainers held after each asked checkpoint, logging nothing
    # the resume does again, and W&B was closed before the stop: every step once)
    starts = [s for s in wandb_offline(run_dir) if s.run_id or s.steps]
    assert {s.run_id for s in starts} == {run_id} and len(starts) == len(resumes) + 1
    assert sorted(n for s in starts for n in s.steps) == list(range(1, steps + 1))
    [mlflow] = mlflow_runs(run_dir)
    assert mlflow_steps(run_dir, mlflow.info.run_id) == list(range(1, steps + 1))
    assert f"  mlflow: run {mlflow.info.run_id} " in out.stdout
    assert wait_until(lambda: not survivors(tag, run_dir), 30), survivors(tag, run_dir)


def test_cancelling_a_requeued_job_leaves_nothing_behind(tmp_path, slurm_cluster, tiny_model):
    tag = uuid.uuid4().hex
    job, run_dir = submit(tmp_path, tag, steps=200, tiny_model=tiny_model)
    try:
        assert wait_until(lambda: re.search(r"step [2-9]\d*/", job_log(run_dir, job)), 300), (
            job_log(run_dir, job)[-3000:]
        )
        subprocess.run(["scancel", "--batch", "--signal=USR1", job], check=True)  # as Slurm warns
        # requeued: waits for its new start (Slurm's BeginTime), nothing of the run is alive
        assert wait_until(lambda: state(job) == "PENDING", 120), (
            state(job),
            job_log(run_dir, job)[-3000:],
        )
        assert wait_until(lambda: not survivors(tag, run_dir), 60), survivors(tag, run_dir)
    finally:
        subprocess.run(["scancel", job], check=True)  # during the requeue
    assert wait_until(lambda: state(job) in ("CANCELLED", "GONE"), 60), state(job)
    time.sleep(20)  # past the 10 s the test cluster holds a requeued job: it never starts again
    assert state(job) in ("CANCELLED", "GONE") and not survivors(tag, run_dir)
    assert "resumed from step" not in job_log(run_dir, job)
