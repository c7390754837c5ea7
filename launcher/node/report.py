"""What a run folder says about a run's progress, for `areal-launch status` under every runner:
the trainers' last step and phase (progress records), the newest complete checkpoint, the
restarts with why each happened (docs/architecture.md §11), the logged metrics as a reward
sparkline and where each tracker's run is (docs/architecture.md §16). Reads files only; stdlib only.
"""

from __future__ import annotations

import time
from pathlib import Path

from launcher.node import restarts
from launcher.spec import tracking as spec
from launcher.trainer import checkpoints, progress

SHOWN_RESTARTS = 5


def progress_lines(run_dir: Path) -> list[str]:
    """Indented lines for `status`; none for a run folder with nothing to say."""
    lines = []
    jobs = progress.read_jobs(run_dir)
    for job, records in jobs.items():  # a line per trainer job (actor, actor2, inference)
        newest = max(records.values(), key=lambda r: r.time)
        steps = sorted({r.step for r in records.values()})
        spread = f"step {steps[-1]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
        of = f" of {job}" if job and len(jobs) > 1 else ""
        lines.append(
            f"  progress{of}: {spread}, last report {time.time() - newest.time:.0f} s "
            f"ago (rank {newest.rank}: step {newest.step} {newest.phase}), "
            f"{len(records)} rank(s) reporting"
        )
    last = checkpoints.latest(checkpoints.root(run_dir))
    if last is not None:
        lines.append(f"  last checkpoint: step {last.step} ({last.path})")
    history = restarts.read_all(run_dir)
    if history:
        requeues = len(history) - restarts.counted(history)
        lines.append(
            f"  restarts: {restarts.counted(history)}"
            + (f", requeues: {requeues}" if requeues else "")
        )
        lines += [f"    {r.line()}" for r in history[-SHOWN_RESTARTS:]]
    return lines + tracking_lines(run_dir)


def tracking_lines(run_dir: Path) -> list[str]:
    """The metrics rank 0 logged (a reward sparkline) and where to look for them (imported
    here: `plan` loads this module with the runners and needs none of it)."""
    from launcher.trainer.plot import sparkline
    from launcher.trainer.tracking import read_identity, read_metrics

    lines = []
    records = read_metrics(run_dir)
    if records:
        rewards = [r["reward"] for r in records if "reward" in r]
        trend = (
            f", reward {sparkline(rewards)} {rewards[0]:.3f} -> {rewards[-1]:.3f}"
            if rewards
            else ""
        )
        lines.append(
            f"  metrics: steps {records[0]['step']}-{records[-1]['step']}{trend} "
            f"({run_dir / spec.METRICS_JSONL}; a picture: areal-launch status "
            f"{run_dir} --plot)"
        )
    where = read_identity(run_dir)
    board = where.get(spec.TENSORBOARD)
    if board:
        lines.append(f"  tensorboard: tensorboard --logdir {board.get('logdir')}")
    wandb = where.get(spec.WANDB)
    if wandb:
        offline = wandb.get("mode") in ("offline", "dryrun")
        how = f" (offline: wandb sync {wandb.get('dir')}/wandb/offline-run-*)" if offline else ""
        lines.append(f"  wandb: run {wandb.get('path')}{how}")
    mlflow = where.get(spec.MLFLOW)
    if mlflow:
        lines.append(
            f"  mlflow: run {mlflow.get('run_id')} of experiment "
            f"{mlflow.get('experiment_id')} (mlflow ui --backend-store-uri "
            f"{mlflow.get('tracking_uri')})"
        )
    return lines
