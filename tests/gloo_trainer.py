"""A real torchrun worker for the local runner's tests and benchmark (gloo, CPU).

Each rank joins a gloo group and all-reduces; then, if AREAL_LLM_SERVER_ADDRS is set, waits for
the first server's /health (trainers wait for servers themselves) and GETs /v1/models.
FAIL_RANK=k makes rank k raise (after writing time.time() to FAIL_STAMP if set); HOLD_S=n keeps
every rank alive n seconds after it printed "holding".
"""

import json
import os
import time
import urllib.request

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def get(url: str, timeout: float = 5.0) -> bytes:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout) as reply:
        return reply.read()


def wait_healthy(base: str, within_s: float = 600.0) -> None:
    deadline = time.monotonic() + within_s
    while True:
        try:
            get(f"{base}/health")
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@record  # the failing rank's exception reaches the launcher through torchrun's error file
def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if os.environ.get("FAIL_RANK") == str(rank):
        if os.environ.get("FAIL_STAMP"):
            with open(os.environ["FAIL_STAMP"], "w") as f:
                f.write(repr(time.time()))
        raise RuntimeError(f"rank {rank} fails on purpose")
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    print(f"rank {rank}/{world}: all_reduce sum {total.item():g}", flush=True)
    addrs = os.environ.get("AREAL_LLM_SERVER_ADDRS")
    if addrs:
        base = "http://" + addrs.split(",")[0]
        wait_healthy(base)
        models = [m["id"] for m in json.loads(get(f"{base}/v1/models"))["data"]]
        print(f"rank {rank} reached {base}: models {models}", flush=True)
    if os.environ.get("HOLD_S"):
        print(f"rank {rank} holding", flush=True)
        time.sleep(float(os.environ["HOLD_S"]))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
