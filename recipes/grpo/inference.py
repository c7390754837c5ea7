"""RLinf's `inference` engine for this recipe: a forward-only copy of the actor, its own
torchrun job (AREAL_COMPONENT=inference, the same entry), that computes the log-probs the
actor's loss uses. No gradients, no optimizer.

The channel is files in the run folder, `<run>/inference/channel/` (every process of a run
reads it, on one machine or a shared file system; nothing to connect, and a restarted job
finds what is pending): each step actor rank 0 writes `step-<k>.json` (the token ids of every
sample and the weights folder that sampled them, the actor's newest push); inference rank r
loads that folder when it is new, computes the log-probs of rows r, r+world, ... and writes
`step-<k>.rank-<r>.json`; the actor waits for every rank's part. At the end the actor writes
`stop` and the inference job exits 0. Every file is written whole (temporary name, rename).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from launcher.trainer.runtime import RuntimePlan
from recipes.grpo.profiling import StepProfiler

POLL_S = 0.05


def channel(run_dir: str) -> Path:
    return Path(run_dir) / "inference" / "channel"


def _write(path: Path, data: Any) -> None:
    staging = path.with_name(f".{path.name}.partial")
    staging.write_text(json.dumps(data))
    os.replace(staging, path)


@dataclass
class InferenceClient:
    """The actor's side: hand over a step's samples, wait for their log-probs."""

    root: Path
    world: int
    timeout_s: float

    @classmethod
    def from_plan(cls, rt: RuntimePlan) -> Optional["InferenceClient"]:
        run_dir = rt.run_dir()
        if not rt.has_component("inference") or not run_dir:
            return None
        root = channel(run_dir)
        root.mkdir(parents=True, exist_ok=True)
        (root / "stop").unlink(missing_ok=True)
        return cls(root, rt.world_size("inference"), rt.health_timeout_s())

    def logprobs(
        self,
        step: int,
        seqs: list[tuple[list[int], list[int]]],
        weights: str,
        version: str,
        beat: Callable[[], Any],
    ) -> list[list[float]]:
        """Each sequence's completion-token log-probs as the inference engine computes them
        on `weights` (rank 0 of the actor)."""
        for stale in self.root.glob(f"step-{step}.rank-*.json"):  # a restarted actor's step
            stale.unlink()
        _write(
            self.root / f"step-{step}.json",
            {"step": step, "weights": weights, "version": version, "seqs": seqs},
        )
        out: list[Optional[list[float]]] = [None] * len(seqs)
        deadline = time.monotonic() + self.timeout_s
        for r in range(self.world):
            path = self.root / f"step-{step}.rank-{r}.json"
            while not path.exists():
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"inference rank {r} gave no log-probs for step {step} "
                        f"in {self.timeout_s:.0f}s ({path})"
                    )
                beat()
                time.sleep(POLL_S)
            part = json.loads(path.read_text())
            if part["version"] != version:
                raise RuntimeError(
                    f"inference rank {r} computed step {step} on weights "
                    f"{part['version']}, not {version}"
                )
            for row, lp in zip(part["rows"], part["logprobs"]):
                out[row] = lp
        missing = [i for i, lp in enumerate(out) if lp is None]
        if missing:
            raise RuntimeError(f"inference gave no log-probs for rows {missing[:5]}")
        return [lp for lp in out if lp is not None]

    def stop(self) -> None:
        _write(self.root / "stop", {"stop": True})


def proximal(logp: torch.Tensor, mask: torch.Tensor, rows: list[list[float]]) -> torch.Tensor:
    """The inference log-probs laid out like `logp` (B, T-1) under `mask`: the loss's
    importance ratio exp(logp - proximal) (1 in value, the policy gradient in backward)."""
    old = torch.zeros_like(logp)
    for b, values in enumerate(rows):
        where = mask[b].bool().nonzero().flatten()
        if len(values) != len(where):
            raise RuntimeError(
                f"inference gave {len(values)} log-probs for a completion of {len(where)} tokens"
            )
        old[b, where] = torch.tensor(values, dtype=logp.dtype, device=logp.device)
    return old


def serve(rt: RuntimePlan, say: Callable[[str], None]) -> int:
    """The inference job's loop on one rank: answer every step until the actor says stop."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from recipes.grpo.weights import token_logprobs

    hf_logging.disable_progress_bar()  # a bar per load is noise in the job's log

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    use_cuda = rt.device() == "cuda" and torch.cuda.is_available()
    device = (
        torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        if use_cuda
        else torch.device("cpu")
    )
    if not use_cuda:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    training = rt.training("inference")
    dtype = getattr(torch, training["dtype"])
    budget = int(training["max_tokens_per_mb"])
    asked = rt.offload("inference") or {}
    offload = bool(asked.get("weight")) and use_cuda
    if any(asked.values()) and not offload:
        say(
            f"grpo: inference offload: nothing to do on {device.type} (its weights live in "
            "host memory already)"
        )
    run_dir = rt.run_dir() or "."
    root = Path(run_dir) / "channel"  # the job's run folder is <run>/inference (policy.scoped)
    root.mkdir(parents=True, exist_ok=True)
    say(
        f"grpo: inference rank {rank}/{world} on {device.type}: forward only, no optimizer; "
        f"waiting for requests in {root}"
    )
    model: Any = None
    loaded: Optional[str] = None
    served = 0
    profiler = StepProfiler.from_plan(rt, "inference", rank, device, say)
    while True:
        pending = sorted(
            (p for p in root.glob("step-*.json") if ".rank-" not in p.name),
            key=lambda p: int(p.stem.split("-")[1]),
        )
        todo = [p for p in pending if not (root / f"{p.stem}.rank-{rank}.json").exists()]
        if not todo:
            if (root / "stop").exists():
                say(f"grpo: inference rank {rank} done: {served} step(s) of log-probs")
                return 0
            rt.heartbeat(served, "wait")
            time.sleep(POLL_S)
            continue
        request = json.loads(todo[0].read_text())
        recording = profiler.start(int(request["step"]))
        start = time.monotonic()
        rt.heartbeat(request["step"], "inference")
        if loaded != request["weights"]:
            model = AutoModelForCausalLM.from_pretrained(request["weights"], dtype=dtype)
            model.requires_grad_(False)
            model.eval()
            loaded = request["weights"]
        if offload:
            model.to(device)
        elif model.device != device:
            model.to(device)
        rows = list(range(rank, len(request["seqs"]), world))
        seqs = [tuple(request["seqs"][i]) for i in rows]
        logprobs: list[list[float]] = []
        pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
        with torch.no_grad():
            for group in _groups(seqs, budget):
                logp, mask = token_logprobs(model, [seqs[i] for i in group], pad, device)
                logprobs += [logp[b][mask[b].bool()].tolist() for b in range(len(group))]
        if offload:
            model.to("cpu")
            torch.cuda.empty_cache()
        _write(
            root / f"{todo[0].stem}.rank-{rank}.json",
            {
                "rows": rows,
                "logprobs": logprobs,
                "version": request["version"],
                "seconds": time.monotonic() - start,
            },
        )
        profiler.stop(int(request["step"]), recording)
        served += 1
        say(
            f"grpo: inference step {request['step']}: log-probs of {len(rows)} sequence(s) on "
            f"weights {request['version']} ({time.monotonic() - start:.2f}s)"
        )


def _groups(seqs: list, budget: int) -> list[list[int]]:
    """Consecutive positions of at most `budget` tokens each (a longer sequence alone)."""
    groups: list[list[int]] = []
    used = budget
    for i, (prompt, completion) in enumerate(seqs):
        n = len(prompt) + len(completion)
        if used + n > budget:
            groups.append([])
            used = 0
        groups[-1].append(i)
        used += n
    return groups
