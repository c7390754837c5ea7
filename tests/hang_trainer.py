"""A trainer entry point for the hang watchdog's tests (and the stack-dump test): every rank
heartbeats its steps through the runtime (launcher.trainer.runtime heartbeat:
progress/<job>.<rank>.json,
SIGUSR2 dumps its stacks into its log) and all-reduces once per step on gloo.

    areal-launch rollout=none trainer.entry=tests/hang_trainer.py +launcher.env.HANG_AT_STEP=3

Environment:
    TRAINER_STEPS   steps to run (default 20); each rank then heartbeats phase "done", exits 0
    STEP_SECONDS    sleep per step (default 0.2)
    HANG_AT_STEP=k  rank HANG_RANK (default 1) heartbeats step k, phase "train", then sleeps
                    forever inside `hang_inside_step` (its stack says so); the other ranks
                    heartbeat step k too and block in that step's all_reduce
"""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from launcher.trainer.runtime import load_plan  # noqa: E402


def hang_inside_step(step: int) -> None:
    print(f"rank {dist.get_rank()} hangs inside step {step}", flush=True)
    while True:
        time.sleep(3600)


def main() -> int:
    rt = load_plan()
    rt.heartbeat(0, "setup")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    steps = int(os.environ.get("TRAINER_STEPS", "20"))
    pause = float(os.environ.get("STEP_SECONDS", "0.2"))
    hang_at = int(os.environ.get("HANG_AT_STEP", "0") or 0)
    hang_rank = int(os.environ.get("HANG_RANK", "1"))
    for step in range(1, steps + 1):
        rt.heartbeat(step, "train")
        if step == hang_at and rank == hang_rank:
            hang_inside_step(step)
        time.sleep(pause)
        dist.all_reduce(torch.ones(1))
        print(f"rank {rank} step {step}", flush=True)
    rt.heartbeat(steps, "done")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
