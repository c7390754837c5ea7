"""A stand-in process for runs at scale (tests/test_slurm_scale.py, benchmarks/bench_scale.py):
a worker or a trainer rank that imports nothing but the standard library (two cores cannot
start 32 torch imports at once without measuring only that).

Each start writes $STANDIN_DIR/<process>.<pid>.json (<process>.rank<k> under torchrun): its
pid, time.time() and Slurm's node name, so whoever watches the run sees every process running,
where and since when; then it heartbeats (the file's mtime, every STANDIN_BEAT_S, default 1 s)
until SIGTERM. Rank 0 answers the launcher's checkpoint requests at once (the control files
of launcher.worker.checkpoints, as a trainer that checkpoints instantly), so Slurm's requeue
path runs as with a real trainer. Without STANDIN_DIR it only heartbeats.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

CONTROL, REQUEST, DONE = "control", "checkpoint", "checkpoint.done"  # checkpoints.py's names


def answer_checkpoint(run_dir: Path, answered: str) -> str:
    """The id of the checkpoint request now in the run folder, answered as done."""
    try:
        asked = (run_dir / CONTROL / REQUEST).read_text().split()[0]
    except (OSError, IndexError):
        return answered
    if asked != answered:
        part = run_dir / CONTROL / f".{DONE}.{os.getpid()}"
        part.write_text(asked + "\n")
        os.replace(part, run_dir / CONTROL / DONE)
    return asked


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    name = os.environ.get("AREAL_LAUNCH_PROCESS", "standin")
    rank = os.environ.get("RANK")
    if rank is not None:  # a torchrun rank: its process is its node's torchrun
        name = f"{name}.rank{rank}"
    folder = os.environ.get("STANDIN_DIR")
    mark = None
    if folder:
        mark = Path(folder) / f"{name}.{os.getpid()}.json"
        mark.parent.mkdir(parents=True, exist_ok=True)
        part = mark.with_suffix(".part")
        record = {
            "pid": os.getpid(),
            "time": time.time(),
            "node": os.environ.get("SLURMD_NODENAME"),
        }
        part.write_text(json.dumps(record))
        os.replace(part, mark)
    beat = float(os.environ.get("STANDIN_BEAT_S", "1"))
    run_dir = Path(os.environ.get("AREAL_RUN_DIR", "."))
    answered = ""
    while True:
        if mark is not None:
            os.utime(mark)
        if rank == "0":
            answered = answer_checkpoint(run_dir, answered)
        time.sleep(beat)


if __name__ == "__main__":
    sys.exit(main())
