"""A stand-in process for runs at scale (tests/test_slurm_scale.py, benchmarks/bench_scale.py):
a worker or a trainer rank that imports nothing but the standard library (two cores cannot
start 32 torch imports at once without measuring only that).

Each start writes $STANDIN_DIR/<process>.<pid>.json (<process>.rank<k> under torchrun): its
pid, time.time() and Slurm's node name, so whoever watches the run sees every process running,
where and since when; then it heartbeats (the file's mtime, every STANDIN_BEAT_S, default 1 s)
until SIGTERM. Rank 0 answers the launcher's checkpoint requests at once (the control files
of launcher.trainer.checkpoints, as a trainer that checkpoints instantly), so Slurm's requeue
path runs as with a real trainer. Without STANDIN_DIR it only heartbeats.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

CONTROL, REQUEST, DONE = "control", "checkpoint", "checkpoint.done"  # checkpoints.py's names
GPUS = 8  # per node, as the scale clusters have them (start-slurm.sh, start-ray-cluster.sh)


def overrides(nodes: int, per_node: int, ranks: int, run_dir: str) -> list[str]:
    """`areal-launch` overrides (the runner's left out) for a run of stand-ins: `per_node`
    workers on every node (component `beat`, a process map over the nodes' GPUs) and a torchrun
    job of one rank on each of the first `ranks` nodes (the actor), each writing its start
    record into <run_dir>/standin; ports counted from a free one, not 30000, which other runs
    on this machine count from."""
    from launcher.node.ports import PortReserver  # here: a stand-in process imports no more

    with PortReserver() as ports:
        base = ports.take()
    me = os.path.abspath(__file__)
    actor = ",".join(str(k * GPUS) for k in range(ranks))
    return [
        "rollout=none",
        f"actor.backend=fsdp:d{ranks}",
        f"trainer.entry={me}",
        f"+components.beat.entry={me}",
        f"+cluster.component_placement.beat='0-{nodes * GPUS - 1}:0-{nodes * per_node - 1}'",
        f"+cluster.component_placement.actor='{actor}'",
        f"cluster.num_nodes={nodes}",
        f"cluster.gpus_per_node={GPUS}",
        "cluster.device=cuda",
        "launcher.grace_period_s=5",
        f"launcher.base_port={base}",
        f"hydra.run.dir={run_dir}",
        f"+launcher.env.STANDIN_DIR={run_dir}/standin",
    ]


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
