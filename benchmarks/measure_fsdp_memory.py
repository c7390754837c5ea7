"""The training estimate against a real FSDP2 step on CPU: peak resident memory per rank, per term
where RSS can separate them (docs/benchmarks.md, "Memory estimate against a real step").

For each model (the tiny Llama, and a ~170M-parameter Llama built here with random weights) and
with gradient checkpointing off and on, runs benchmarks/fsdp_step_rss.py on 2 gloo ranks (two
steps) and compares, per rank, with launcher.memory's estimate for `fsdp:d2` in float32 on cpu
(the plan's estimate, through the fsdp backend's options):
- overhead: RSS after torch, transformers and the process group are up vs the `overhead` part;
- states: RSS between steps (sharded weights and AdamW moments; grads are set to None) vs
  weights + optimizer;
- step: the second step's peak over its start vs grads + gathered + activations + layer_backward +
  logits + grad_reduce;
- peak: the process's VmHWM vs the estimate's peak.
glibc is told to mmap every allocation over 64 KiB (MALLOC_MMAP_THRESHOLD_), so freed tensors
leave the resident set and RSS follows live memory. Not run by `make bench` (minutes on 2 cores).
    .venv/bin/python benchmarks/measure_fsdp_memory.py [--tokens 2048] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.backends import fsdp
from launcher.memory.model_shape import shape_from_config
from launcher.memory.train import TrainOptions, estimate_training
from launcher.spec.alloc import parse_backend

WORKER = ROOT / "benchmarks" / "fsdp_step_rss.py"
# a Llama large enough that model states, activations and logits dwarf the process itself
LARGER = dict(
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=16,
    head_dim=64,
    vocab_size=32000,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
)
STEP_PARTS = ("grads", "gathered", "activations", "layer_backward", "logits", "grad_reduce")
MIB = float(1 << 20)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(spec: dict, folder: Path) -> list[dict]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "MALLOC_MMAP_THRESHOLD_": "65536",
        "PYTHONPATH": str(ROOT),
    }
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(spec.get("ranks", 2)),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        str(WORKER),
        json.dumps(spec),
        str(folder),
    ]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        sys.exit(proc.stdout[-3000:] + proc.stderr[-3000:])
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(spec.get("ranks", 2))]


def estimate_parts(
    config: dict, tokens: int, checkpointing: bool, device: str = "cpu", ranks: int = 2
) -> dict[str, float]:
    """The plan's estimate for this run (bytes per rank)."""
    shape = shape_from_config(config)
    base = TrainOptions(
        dtype="float32", max_tokens_per_mb=tokens, gradient_checkpointing=checkpointing
    )
    opts = fsdp.fsdp_memory_effects(fsdp.FsdpOptions(), base)
    need = estimate_training(shape, parse_backend(f"fsdp:d{ranks}"), opts, device=device)
    return dict(need.parts)


def compare(name: str, config: dict, spec: dict, ranks: list[dict]) -> list[dict]:
    """Per rank: the measured terms beside the estimate's."""
    device = spec.get("device", "cpu")
    est = estimate_parts(
        config, spec["tokens"], spec["checkpointing"], device, spec.get("ranks", 2)
    )
    rows = []
    for r in ranks:
        base = r["points"]["base"]
        last = r["steps"][-1]
        # cpu: RSS includes the process, so states are over the base; cuda: torch's allocated
        # bytes are tensors only
        floor = 0 if device == "cuda" else base
        measured = {
            "overhead": base,
            "states": last["end"] - floor,
            "step": last["peak"] - last["start"],
            "peak": r["hwm"],
        }
        estimated = {
            "overhead": est["overhead"],
            "states": est["weights"] + est["optimizer"],
            "step": sum(est[k] for k in STEP_PARTS),
            "peak": sum(est.values()),
        }
        rows.append(
            {
                "model": name,
                "config": config,
                "spec": spec,
                "raw": r,
                "tokens": spec["tokens"],
                "checkpointing": spec["checkpointing"],
                "rank": r["rank"],
                "params": r["params"] * r["world"],
                "measured_mib": {k: round(v / MIB, 1) for k, v in measured.items()},
                "estimated_mib": {k: round(v / MIB, 1) for k, v in estimated.items()},
                "estimate_parts_mib": {k: round(v / MIB, 1) for k, v in est.items()},
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--ranks", type=int, default=2, help="FSDP ranks (GPUs on cuda)")
    ap.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: NCCL, one GPU a rank (scripts/gpu-check.sh)",
    )
    ap.add_argument(
        "--models", nargs="+", default=["tiny", "llama-170m"], help="which models to run"
    )
    ap.add_argument(
        "--checkpointing",
        choices=("off", "on", "both"),
        default="both",
        help="gradient checkpointing off, on, or a run of each",
    )
    ap.add_argument("--json", type=Path, help="write the rows (measurements included) here")
    ap.add_argument(
        "--from",
        dest="saved",
        type=Path,
        help="no run: the measurements of an earlier --json against today's estimate",
    )
    args = ap.parse_args()
    rows = []
    if args.saved:
        for old in json.loads(args.saved.read_text()):
            rows += compare(old["model"], old["config"], old["spec"], [old["raw"]])
        table(rows)
        return
    from launcher.trainer.tiny_model import ensure

    tiny = ensure()
    tiny_config = json.loads((Path(tiny) / "config.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        models = (
            ("tiny", tiny_config, str(tiny)),
            ("llama-170m", {**LARGER, "model_type": "llama", "torch_dtype": "float32"}, None),
        )
        modes = {"off": (False,), "on": (True,), "both": (False, True)}[args.checkpointing]
        for name, config, model in (m for m in models if m[0] in args.models):
            for checkpointing in modes:
                folder = Path(tmp) / f"{name}-{checkpointing}"
                folder.mkdir()
                spec = {
                    "model": model,
                    "config": None if model else LARGER,
                    "tokens": args.tokens,
                    "checkpointing": checkpointing,
                    "steps": 2,
                    "device": args.device,
                    "ranks": args.ranks,
                }
                rows += compare(name, config, spec, run(spec, folder))
    table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def table(rows: list[dict]) -> None:
    print("| model | ckpt | rank | term | measured MiB | estimated MiB | estimate/measured |")
    worst = 0.0
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        for term, value in row["measured_mib"].items():
            est = row["estimated_mib"][term]
            ratio = f"{est / value:.2f}" if value > 0 else "-"
            print(
                f"| {row['model']} | {row['checkpointing']} | {row['rank']} | {term} | "
                f"{value} | {est} | {ratio} |"
            )
        peak = row["estimated_mib"]["peak"] / row["measured_mib"]["peak"]
        worst = max(worst, abs(peak - 1))
    print(f"peak: estimate within {worst:.0%} of the measured peak on every run")


if __name__ == "__main__":
    main()
