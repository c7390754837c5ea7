"""A trainer entry point that is not ours, failing as AReaL 1.0.4's did (issue 33): two steps
all-reduce on gloo; then rank 0's weight update asks the rollout servers to pause
(`/areal_pause_generation`), the request fails three times, and the exception is logged and
caught; rank 0 goes on into a barrier while rank 1 waits to receive the update from it. Both
ranks then block in collectives for ever, saying nothing. It writes no heartbeats (the silent
watch, launcher/node/silence.py, finds the hang). Its lines have AReaL's log format, the rank in
the logger's name (areal/utils/logging.py: "[FSDPEngine Rank 0]").

PAUSE_URL: where the pause is posted (default: a port on which nothing listens).
"""

import logging
import os
import sys
import time
import urllib.request

import torch
import torch.distributed as dist

FORMAT = "[AReaL] %(asctime)s.%(msecs)03d %(name)s %(levelname)s: %(message)s"


def logger(rank: int) -> logging.Logger:
    log = logging.getLogger(f"[FSDPEngine Rank {rank}]")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(FORMAT, "%Y%m%d-%H:%M:%S"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    return log


def pause_generation(url: str, retries: int = 3) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    last: Exception = OSError("no attempt")
    for _ in range(retries):
        try:
            opener.open(urllib.request.Request(url, data=b"{}", method="POST"), timeout=2)
            return
        except OSError as e:
            last = e
            time.sleep(0.1)
    raise RuntimeError(f"Failed after {retries} retries posting {url}: {last}")


def main() -> int:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    log = logger(rank)
    for step in (1, 2):
        dist.all_reduce(torch.ones(1))
        log.info(f"step {step} done")
    if rank != 0:
        dist.recv(torch.zeros(1), src=0)  # the weights rank 0 never sends
        return 0
    try:
        pause_generation(os.environ.get("PAUSE_URL", "http://127.0.0.1:9/areal_pause_generation"))
    except RuntimeError:
        log.error("update_weights failed", exc_info=True)
    dist.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main())
