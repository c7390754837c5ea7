"""What tensor parallel costs on CPU: one training step of the default recipe's model,
fsdp:d2 against fsdp:d1t2, in one run (docs/benchmarks.md).

Both layouts train the tiny Llama on the same global batch (`--batch` sequences of `--tokens`
tokens: d2 gives each rank half, d1t2 gives both ranks all of it and splits every layer), built
exactly as recipes/grpo/train.py builds it: the plan's mesh (launcher.trainer.runtime), DTensor
tensor
parallel over tp, FSDP2 over dp. A step is forward, GRPO loss, backward, gradient clipping and
AdamW; the full-state gather a weight push starts with is timed too. Layouts alternate, so the
machine's load weighs on both alike; medians over `--repeat` torchrun runs of `--steps` steps
each (the first step of a run, which warms up, is left out).

Usage: python benchmarks/bench_tp_step.py [--repeat 3] [--steps 6]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYOUTS = ("fsdp:d2", "fsdp:d1t2")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan_file(spec: str, folder: Path) -> Path:
    """The real plan for `spec` (trainer only, cpu), written where the workers read it."""
    from omegaconf import OmegaConf

    from launcher.config.schema import LaunchConfig
    from launcher.planning.build import build_plan

    cfg = OmegaConf.structured(LaunchConfig)
    for key, value in {
        "cluster.device": "cpu",
        "rollout.backend": None,
        "actor.backend": spec,
    }.items():
        OmegaConf.update(cfg, key, value, merge=False)
    path = folder / f"plan-{spec.replace(':', '-')}.json"
    path.write_text(json.dumps(build_plan(cfg, local_gpus=0).to_dict()))
    return path


def worker(args: argparse.Namespace) -> None:
    """One torchrun rank: build the recipe's model on the plan's mesh, time the steps."""
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from launcher.trainer.runtime import load_plan
    from launcher.trainer.tiny_model import default_path
    from recipes.grpo import loop
    from recipes.grpo import mesh as meshes
    from recipes.grpo.weights import gather_full_state, token_logprobs

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rt = load_plan()
    mesh = meshes.plan_mesh(rt, "cpu")
    model = AutoModelForCausalLM.from_pretrained(default_path(), dtype=torch.float32)
    meshes.shard_model(model, mesh, None, True)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    data = meshes.data_mesh(mesh)
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    seqs = [
        (
            torch.randint(4, vocab, (8,), generator=g).tolist(),
            torch.randint(4, vocab, (args.tokens - 8,), generator=g).tolist(),
        )
        for _ in range(args.batch)
    ]
    adv_all = torch.randn(args.batch, generator=g)
    mine = list(range(data.get_local_rank(), args.batch, data.size()))
    step_s, gather_s = [], []
    for _ in range(args.steps):
        dist.barrier()
        start = time.perf_counter()
        logp, mask = token_logprobs(model, [seqs[i] for i in mine], 3, torch.device("cpu"))
        per_seq, _ = loop.grpo_loss(logp, mask, adv_all[mine], None, 0.0)
        (per_seq.sum() * data.size() / args.batch).backward()
        meshes.clip_grad_norm(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad(set_to_none=True)
        dist.barrier()
        step_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        gather_full_state(model)
        dist.barrier()
        gather_s.append(time.perf_counter() - start)
    if dist.get_rank() == 0:
        print(json.dumps({"step_s": step_s[1:], "gather_s": gather_s[1:]}), flush=True)
    dist.destroy_process_group()


def one_run(spec: str, plan: Path, args: argparse.Namespace) -> dict:
    env = dict(
        os.environ,
        AREAL_LAUNCH_PLAN=str(plan),
        AREAL_COMPONENT="actor",
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(ROOT),
    )
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        __file__,
        "--worker",
        "--steps",
        str(args.steps),
        "--batch",
        str(args.batch),
        "--tokens",
        str(args.tokens),
    ]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{spec}: torchrun failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    sys.path.insert(0, str(ROOT))
    step: dict[str, list[float]] = {s: [] for s in LAYOUTS}
    gather: dict[str, list[float]] = {s: [] for s in LAYOUTS}
    with tempfile.TemporaryDirectory() as tmp:
        plans = {spec: plan_file(spec, Path(tmp)) for spec in LAYOUTS}
        for _ in range(args.repeat):
            for spec in LAYOUTS:
                result = one_run(spec, plans[spec], args)
                step[spec] += result["step_s"]
                gather[spec] += result["gather_s"]
    load = os.getloadavg()[0]
    print(
        f"tiny Llama, global batch {args.batch} x {args.tokens} tokens, 2 ranks on gloo, "
        f"{args.repeat} runs x {args.steps - 1} timed steps, load {load:.1f}"
    )
    print(f"{'layout':<10} {'step (median)':>14} {'full-state gather':>18}")
    for spec in LAYOUTS:
        print(
            f"{spec:<10} {statistics.median(step[spec]) * 1e3:>11.1f} ms "
            f"{statistics.median(gather[spec]) * 1e3:>15.1f} ms"
        )
    a, b = (statistics.median(step[s]) for s in LAYOUTS)
    c, d = (statistics.median(gather[s]) for s in LAYOUTS)
    print(f"fsdp:d1t2 / fsdp:d2: step {b / a:.2f}x, gather {d / c:.2f}x")


if __name__ == "__main__":
    main()
