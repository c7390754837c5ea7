"""A torchrun worker: one real FSDP2 step on gloo, then the bytes each rank holds.

Loads a model like recipes/grpo/train.py's load_model (float32, `fully_shard` per decoder
layer then the whole model on a 1-D CPU mesh), takes one AdamW step, and writes
`<out>/rank<r>.json` with the local shard bytes of parameters, gradients and the optimizer's
moment tensors (exp_avg, exp_avg_sq), plus the per-tensor `step` counters apart.
    python -m torch.distributed.run --nproc-per-node 2 tests/fsdp_state_bytes.py MODEL OUT
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor


def local_bytes(tensor: torch.Tensor) -> int:
    t = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    return t.numel() * t.element_size()


def main() -> None:
    model_path, out = sys.argv[1], Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    ids = torch.randint(0, model.config.vocab_size, (1, 32))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optim.step()
    moments = steps = 0
    for state in optim.state.values():
        for key, value in state.items():
            if not isinstance(value, torch.Tensor):
                continue
            if key == "step":
                steps += local_bytes(value)
            else:
                moments += local_bytes(value)
    result = {
        "rank": rank,
        "world": world,
        "params": sum(local_bytes(p) for p in model.parameters()),
        "grads": sum(local_bytes(p.grad) for p in model.parameters() if p.grad is not None),
        "optimizer": moments,
        "step_counters": steps,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
