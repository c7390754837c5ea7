"""A trainer entry for scripts/gpu-check.sh: what each rank was given and what it sees.

Started by the launcher under torchrun on cuda. Each rank records the CUDA_VISIBLE_DEVICES it
got, the UUID of the one device it sees, and the result of an NCCL all_reduce over the world
into <run folder>/probe/<rank>.json, so the check can compare them with the mask it set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

from launcher.trainer.runtime import load_plan


def main() -> int:
    rt = load_plan()
    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    value = torch.tensor([rank + 1.0], device="cuda")
    dist.all_reduce(value)
    world = dist.get_world_size()
    props = torch.cuda.get_device_properties(local)
    record = {
        "rank": rank,
        "world": world,
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "device_count": torch.cuda.device_count(),
        "uuid": f"GPU-{props.uuid}",
        "name": props.name,
        "all_reduce": value.item(),
        "all_reduce_expected": world * (world + 1) / 2,
        "backend": dist.get_backend(),
    }
    out = Path(rt.run_dir or ".") / "probe"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{rank}.json").write_text(json.dumps(record))
    print("probe:", json.dumps(record), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
