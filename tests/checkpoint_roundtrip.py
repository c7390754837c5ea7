"""A torchrun worker: the recipe's checkpoint written and read back on a real FSDP2 model (gloo).

    AREAL_LAUNCH_PLAN=plan.json AREAL_RUN_DIR=RUN \\
        python -m torch.distributed.run --nproc-per-node 2 tests/checkpoint_roundtrip.py save|load
        OUT

save: the recipe's actor (recipes/grpo/train.py load_model on the plan's mesh) and AdamW take
two steps on random tokens, each rank's RNGs are seeded apart, and recipes/grpo/resume.save
writes step 2 into the run folder. OUT/save-<rank>.json: a digest of every tensor this rank
holds (its parameter shards, AdamW's moments and step counters) and the first draws of every
RNG after the save.
load: a fresh actor and optimizer (other seeds); OUT/load-<rank>.json the same digests before
and after recipes/grpo/resume.load, the draws after it, and the step it loaded.
"""

import hashlib
import json
import random
import sys
from pathlib import Path

import numpy
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from launcher.trainer.runtime import load_plan  # noqa: E402
from recipes.grpo import mesh as meshes  # noqa: E402
from recipes.grpo import resume
from recipes.grpo.offload import HostOffload  # noqa: E402
from recipes.grpo.train import FSDPEngine, load_model  # noqa: E402


def digest(t: torch.Tensor) -> str:
    local = t.to_local() if isinstance(t, DTensor) else t
    return hashlib.sha256(
        local.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    ).hexdigest()


def held(engine: FSDPEngine) -> dict[str, str]:
    """Every tensor this rank holds, by name: parameter shards, then each optimizer state."""
    out = {f"param {n}": digest(p) for n, p in engine.model.named_parameters()}
    names = {id(p): n for n, p in engine.model.named_parameters()}
    for param, state in engine.optim.state.items():
        for key, value in state.items():
            out[f"optim {names[id(param)]} {key}"] = digest(value)
    return out


def draws() -> dict:
    return {
        "torch": torch.rand(3).tolist(),
        "python": random.random(),
        "numpy": float(numpy.random.rand()),
    }


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    rt = load_plan()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    device = torch.device("cpu")
    mesh = meshes.plan_mesh(rt, "cpu")
    model = load_model(str(rt.model_path()), torch.float32, device, mesh, {}, trainable=True)
    optim = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.0)
    engine = FSDPEngine(model, None, optim, HostOffload(model, optim, device))
    record: dict = {}
    if mode == "save":
        torch.manual_seed(7)  # the same batch on every rank; different RNG states after
        for _ in range(2):
            ids = torch.randint(0, 300, (2, 12))
            model(input_ids=ids, labels=ids).loss.backward()
            optim.step()
            optim.zero_grad(set_to_none=True)
        torch.manual_seed(100 + rank)
        random.seed(200 + rank)
        numpy.random.seed(300 + rank)
        folder = resume.save(rt, engine, 2, keep=2, reason="test")
        record = {"folder": str(folder), "held": held(engine), "draws": draws()}
    else:
        torch.manual_seed(5)
        random.seed(5)
        numpy.random.seed(5)
        before = held(engine)
        found = resume.load(rt, engine)
        record = {
            "step": found.step if found else None,
            "before": before,
            "held": held(engine),
            "draws": draws(),
        }
    (out / f"{mode}-{rank}.json").write_text(json.dumps(record, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
