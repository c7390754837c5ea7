"""What a run folder says about a run's progress, for `areal-launch status` under every runner:
the trainers' last step and phase (progress records), the newest complete checkpoint, and the
restarts with why each happened (docs/architecture.md §11). Reads files only; stdlib only.
"""
from __future__ import annotations

import time
from pathlib import Path

from launcher.node import restarts
from launcher.worker import checkpoints, progress

SHOWN_RESTARTS = 5


def progress_lines(run_dir: Path) -> list[str]:
    """Indented lines for `status`; none for a run folder with nothing to say."""
    lines = []
    records = progress.read_all(run_dir)
    if records:
        newest = max(records.values(), key=lambda r: r.time)
        steps = sorted({r.step for r in records.values()})
        spread = f"step {steps[-1]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
        lines.append(f"  progress: {spread}, last report {time.time() - newest.time:.0f} s ago "
                     f"(rank {newest.rank}: step {newest.step} {newest.phase}), "
                     f"{len(records)} rank(s) reporting")
    last = checkpoints.latest(checkpoints.root(run_dir))
    if last is not None:
        lines.append(f"  last checkpoint: step {last.step} ({last.path})")
    history = restarts.read_all(run_dir)
    if history:
        requeues = len(history) - restarts.counted(history)
        lines.append(f"  restarts: {restarts.counted(history)}"
                     + (f", requeues: {requeues}" if requeues else ""))
        lines += [f"    {r.line()}" for r in history[-SHOWN_RESTARTS:]]
    return lines
