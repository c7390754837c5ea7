"""A torchrun worker for benchmarks/measure_fsdp_memory.py: real FSDP2 steps on gloo, and the
resident memory each rank holds at each point, with the peak of each step.

The model is built like recipes/grpo/train.py builds it (float32 on cpu, `fully_shard` per
decoder layer then the whole model, HF gradient checkpointing when asked) and trained like its
loss computes log-probs (fp32 log_softmax of the logits, gather, mean), AdamW, grads set to None
after each step. A sampler thread reads VmRSS every millisecond, so a step's peak is seen even
between Python lines.
    python -m torch.distributed.run --nproc-per-node 2 benchmarks/fsdp_step_rss.py SPEC OUT
SPEC is JSON: {"model": path or null, "config": {LlamaConfig fields} or null, "tokens": N,
"checkpointing": bool, "steps": N, "device": "cpu" | "cuda"}. On cuda (NCCL, one GPU a rank)
the same points come from the device: used memory (total - free, the CUDA context included)
for base and peak (the caching allocator keeps its peak reserved), torch's allocated bytes for
the states between steps and the step's peak over its start.
"""

import json
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

PAGE = 4096


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class Peak:
    """The largest VmRSS seen since the last reset, sampled every millisecond."""

    def __init__(self) -> None:
        self.value = rss()
        self._stop = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop:
            self.value = max(self.value, rss())
            time.sleep(0.001)

    def reset(self) -> int:
        self.value = rss()
        return self.value


def used_cuda() -> int:
    free, total = torch.cuda.mem_get_info()
    return int(total - free)


def main() -> None:
    spec, out = json.loads(sys.argv[1]), Path(sys.argv[2])
    cuda = spec.get("device") == "cuda"
    if cuda:
        import os

        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if cuda:
        dist.barrier()  # the context and communicators exist before the base is read
        torch.cuda.synchronize()
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    points = {"base": used_cuda() if cuda else rss()}
    if spec.get("model"):
        model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    else:
        model = LlamaForCausalLM(LlamaConfig(**spec["config"])).to(torch.float32)
    if spec["checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    device = torch.device("cuda" if cuda else "cpu")
    model.to(device)
    mesh = init_device_mesh(device.type, (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    import gc

    gc.collect()
    points["sharded"] = torch.cuda.memory_allocated() if cuda else rss()
    optim = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0)
    vocab, tokens = model.config.vocab_size, spec["tokens"]
    sampler = None if cuda else Peak()
    steps = []
    for _ in range(spec["steps"]):
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            start = torch.cuda.memory_allocated()
        else:
            start = sampler.reset()
        ids = torch.randint(0, vocab, (1, tokens), device=device)
        logits = model(input_ids=ids).logits[:, :-1].float()
        logp = torch.gather(F.log_softmax(logits, dim=-1), 2, ids[:, 1:].unsqueeze(-1))
        del logits
        loss = -logp.mean()
        loss.backward()
        del logp, loss
        optim.step()
        optim.zero_grad(set_to_none=True)
        gc.collect()
        if cuda:
            torch.cuda.synchronize()
            steps.append(
                {
                    "start": start,
                    "peak": torch.cuda.max_memory_allocated(),
                    "end": torch.cuda.memory_allocated(),
                }
            )
        else:
            steps.append({"start": start, "peak": sampler.value, "end": rss()})
    if cuda:
        hwm = used_cuda()
    else:
        with open("/proc/self/status") as f:
            hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    result = {
        "rank": rank,
        "world": world,
        "points": points,
        "steps": steps,
        "hwm": hwm,
        "params": sum(p.numel() for p in model.parameters()),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
