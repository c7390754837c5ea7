"""The default recipe: a small but real GRPO loop over the launcher's rollout servers.

Run by torchrun on every actor rank (gloo on CPU, NCCL on GPUs; nothing else differs). Each
step: rank 0 samples `samples_per_prompt` completions per prompt from every rollout server,
scores them (recipes/grpo/reward.py) and shares the batch; every rank takes its slice and
computes a GRPO policy-gradient loss (group-normalised advantages, token log-probs from the
FSDP2-sharded HF model, a k3 KL term against a frozen reference when `ref` is on); the optimizer
steps; the full weights are written to a new folder; each server is told to load it (by the
rank the plan's weight_sync pairs with the instance's tp rank 0); and rank 0 confirms every
server now serves them: its greedy completion must equal, token for token, the greedy output of
a plain HF model loaded from the same folder, with log-probs within verify_logprob_tol. A
mismatch or a failed reload ends the run with a non-zero exit. Without rollout servers
(rollout=none) rank 0 samples from the newest saved folder itself.

All actor ranks form one data-parallel FSDP2 mesh: the plan's tp/cp split is not applied by
this tiny recipe (its model would not gain from it); engine flags the launcher appends for
megatron/archon are reported and ignored.

Options: launcher/conf/recipe/grpo.yaml, overridden by the plan's `recipe` dict and then by
`key=value` arguments (trainer.args).
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:  # run as a script by torchrun: make `recipes` importable
    sys.path.insert(0, str(_ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

from launcher.objective import write_metrics  # noqa: E402
from launcher.runtime import RuntimePlan, load_plan  # noqa: E402
from launcher.tiny_model import default_path as tiny_model_path  # noqa: E402
from recipes.grpo.options import GRPOOptions, load_options  # noqa: E402
from recipes.grpo.reward import group_advantages, make_prompts, number_reward  # noqa: E402
from recipes.grpo.rollout_client import RolloutServer, Sample, sample_all  # noqa: E402
from recipes.grpo.weights import (greedy_from_folder, prune_versions,  # noqa: E402
                                  sample_from_folder, save_full_weights, strip_eos,
                                  token_logprobs)


@dataclass
class Trainer:
    """The distributed pieces every step needs, set up once."""

    opts: GRPOOptions
    rank: int
    world: int
    device: torch.device
    dtype: torch.dtype
    model: torch.nn.Module
    ref: Optional[torch.nn.Module]
    optim: torch.optim.Optimizer
    tokenizer: Any
    servers: list[RolloutServer]
    my_instances: list[int]
    weights_root: Path
    policy_dir: str  # the newest weights folder (no servers: rank 0 samples from it)


def log(rank: int, text: str) -> None:
    if rank == 0:
        print(text, flush=True)


def reload_owners(rt: RuntimePlan, n_servers: int) -> dict[int, int]:
    """instance -> the actor rank that tells it to reload: the rank the plan pairs with the
    instance's tp rank 0 (lowest first), else rank 0 (a plan without weight_sync pairs)."""
    owners: dict[int, int] = {}
    for rank in range(rt.world_size("actor")):
        for instance, tp in rt.weight_targets(rank):
            if tp == 0 and instance < n_servers:
                owners.setdefault(instance, rank)
    return {i: owners.get(i, 0) for i in range(n_servers)}


def load_model(path: str, dtype: torch.dtype, device: torch.device, mesh: Any,
               trainable: bool) -> torch.nn.Module:
    """An HF causal LM sharded with FSDP2: each decoder layer, then the whole model."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.requires_grad_(trainable)
    return model if trainable else model.eval()


def setup(rt: RuntimePlan, opts: GRPOOptions) -> Trainer:
    use_cuda = rt.device() == "cuda" and torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(opts.seed)
    mesh = init_device_mesh(device.type, (world,))
    dtype = getattr(torch, opts.dtype)

    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one "Loading weights" bar per load per rank is noise
    model_path = rt.model_path(default=str(tiny_model_path()))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = load_model(model_path, dtype, device, mesh, trainable=True)
    ref_on = "ref" in rt.components() or rt.has_component("ref")
    ref = load_model(model_path, dtype, device, mesh, trainable=False) if ref_on else None
    optim = torch.optim.AdamW(model.parameters(), lr=opts.lr, weight_decay=0.0)

    servers = [RolloutServer(addr, rt.rollout_backend() or "vllm", rt.served_model_name())
               for addr in rt.server_addrs()]
    owners = reload_owners(rt, len(servers))
    run_dir = rt.run_dir()
    root = Path(opts.weights_dir or (Path(run_dir) / "weights" if run_dir
                                     else Path(tempfile.gettempdir()) / "areal-grpo-weights"))
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        log(rank, f"grpo: {world} actor rank(s) on {device.type}, ref {'on' if ref else 'off'}, "
                  f"{len(servers)} rollout server(s) {','.join(s.addr for s in servers)}, "
                  f"model {model_path}, weights -> {root}")
        if servers:
            rt.wait_for_servers(rt.health_timeout_s())
        else:
            log(rank, "grpo: no rollout servers (rollout=none): rank 0 samples from the "
                      "trainer's own saved weights")
    dist.barrier()
    return Trainer(opts, rank, world, device, dtype, model, ref, optim, tokenizer, servers,
                   [i for i, r in owners.items() if r == rank], root, model_path)


def rollout(t: Trainer, step: int) -> tuple[list[Sample], list[float], list[float]]:
    """Rank 0 samples and scores; every rank receives the same batch."""
    payload: list[Any] = [None]
    if t.rank == 0:
        o = t.opts
        prompts = make_prompts(o.prompts_per_step, o.seed, step)
        seed = (o.seed * 1000 + step) * 1000
        if t.servers:
            samples = sample_all(t.servers, prompts, o.samples_per_prompt, o.max_new_tokens,
                                 o.temperature, seed)
        else:
            samples = [Sample(i, prompts[i], text, ids, completion, None, "local")
                       for i, ids, completion, text in sample_from_folder(
                           t.policy_dir, prompts, o.samples_per_prompt, o.max_new_tokens,
                           o.temperature, seed, t.dtype, t.device)]
        rewards = [number_reward(s.text) for s in samples]
        payload = [(samples, rewards, group_advantages(rewards, o.samples_per_prompt))]
    dist.broadcast_object_list(payload, src=0)
    return payload[0]


def token_ids(t: Trainer, s: Sample) -> tuple[list[int], list[int]]:
    """The ids the server used; re-tokenised from text where it did not return them."""
    prompt = s.prompt_ids or t.tokenizer(s.prompt).input_ids
    completion = s.completion_ids
    if completion is None:
        completion = t.tokenizer(s.text, add_special_tokens=False).input_ids
    return list(prompt), list(completion) or [t.tokenizer.eos_token_id]


def train_step(t: Trainer, samples: list[Sample], advantages: list[float]) -> dict[str, float]:
    """One GRPO update on this rank's slice; returns batch-wide loss, KL and logp gap."""
    mine = list(range(t.rank, len(samples), t.world))
    seqs = [token_ids(t, samples[i]) for i in mine]
    adv = torch.tensor([advantages[i] for i in mine], device=t.device)
    logp, mask = token_logprobs(t.model, seqs, t.tokenizer.pad_token_id, t.device)
    lengths = mask.sum(-1).clamp(min=1)
    pg = -(adv[:, None] * logp * mask).sum(-1) / lengths
    kl = torch.zeros_like(pg)
    if t.ref is not None:
        with torch.no_grad():
            ref_logp, _ = token_logprobs(t.ref, seqs, t.tokenizer.pad_token_id, t.device)
        delta = ref_logp - logp
        kl = ((delta.exp() - delta - 1) * mask).sum(-1) / lengths  # k3 estimator, >= 0
    per_seq = pg + t.opts.kl_coef * kl
    # FSDP averages gradients over ranks: scale so the result is the mean over the whole batch
    (per_seq.sum() * t.world / len(samples)).backward()
    if t.opts.max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(t.model.parameters(), t.opts.max_grad_norm)
    t.optim.step()
    t.optim.zero_grad(set_to_none=True)

    gap = torch.zeros((), device=t.device)
    for row, i in enumerate(mine):  # the server's sampling log-probs vs ours: same weights?
        lp = samples[i].logprobs
        if lp and samples[i].completion_ids and len(lp) == int(mask[row].sum()):
            ours = logp[row][mask[row].bool()].detach()
            gap = torch.maximum(gap, (ours - torch.tensor(lp, device=t.device)).abs().max())
    stats = torch.stack([per_seq.detach().sum(), kl.detach().sum()]) / len(samples)
    dist.all_reduce(stats)
    dist.all_reduce(gap, op=dist.ReduceOp.MAX)
    return {"loss": stats[0].item(), "kl": stats[1].item(), "logp_gap": gap.item()}


def push_weights(t: Trainer, version: str) -> tuple[Path, int]:
    """Save, make every server load the new folder, and (rank 0) confirm what they serve."""
    folder = save_full_weights(t.model, t.tokenizer, t.weights_root, version, t.rank == 0)
    dist.barrier()  # the folder is complete before any server is asked to read it
    for instance in t.my_instances:
        t.servers[instance].reload(str(folder), version)
    dist.barrier()
    confirmed = confirm_weights(t, folder, version) if t.rank == 0 and t.servers else 0
    if t.rank == 0:
        prune_versions(t.weights_root, t.opts.keep_versions, folder)
    t.policy_dir = str(folder)
    return folder, confirmed


def confirm_weights(t: Trainer, folder: Path, version: str) -> int:
    """Each server's greedy tokens == a plain HF model's on `folder`, and their log-probs agree
    within verify_logprob_tol (equal tokens alone can hide a partly loaded model); raise on any
    difference."""
    if not t.opts.verify_reload:
        return 0
    eos = t.tokenizer.eos_token_id
    prompt_ids = t.tokenizer(t.opts.verify_prompt).input_ids
    expected, expected_lp = greedy_from_folder(folder, prompt_ids, t.opts.verify_tokens,
                                               t.dtype, t.device, eos)
    expected_text = t.tokenizer.decode(expected, skip_special_tokens=True)
    for server in t.servers:
        ids, text, logprobs = server.greedy(t.opts.verify_prompt, t.opts.verify_tokens)
        same = strip_eos(ids, eos) == expected if ids is not None else text == expected_text
        gap = max((abs(a - b) for a, b in zip(logprobs or [], expected_lp)), default=0.0)
        tol = t.opts.verify_logprob_tol
        served = server.weight_version()
        if not same or (tol is not None and gap > tol) or served not in (None, version):
            raise RuntimeError(
                f"rollout server {server.addr} does not serve {version} after its reload: "
                f"greedy {ids if ids is not None else text!r} (weight version {served}), "
                f"trainer's greedy on {folder}: {expected if ids is not None else expected_text!r}"
                f", largest log-prob difference {gap:.2e} (tolerance {tol})")
    return len(t.servers)


@record
def main(argv: Optional[list[str]] = None) -> int:
    rt = load_plan()
    if "actor" not in rt.components():
        print(f"grpo: nothing to do for {','.join(rt.components())}: this recipe runs the "
              "reference model inside the actor job", flush=True)
        return 0
    opts, engine_flags = load_options(rt, sys.argv[1:] if argv is None else argv)
    t = setup(rt, opts)
    if engine_flags:
        log(t.rank, f"grpo: trains with FSDP2, ignores engine flags {' '.join(engine_flags)}")
    rewards: list[float] = []
    confirmed_total = 0
    for step in range(1, opts.steps + 1):
        start = time.monotonic()
        samples, step_rewards, advantages = rollout(t, step)
        if len(samples) < t.world:
            raise ValueError(f"{len(samples)} samples for {t.world} actor ranks: raise "
                             "recipe.prompts_per_step or recipe.samples_per_prompt")
        stats = train_step(t, samples, advantages)
        version = f"v{step}"
        _, confirmed = push_weights(t, version)
        confirmed_total += confirmed
        rewards.append(sum(step_rewards) / len(step_rewards))
        kl = f"{stats['kl']:.4f}" if t.ref is not None else "off"
        check = (f"confirmed {confirmed}/{len(t.servers)}" if opts.verify_reload and t.servers
                 else "unchecked" if t.servers else "none (no servers)")
        log(t.rank, f"step {step}/{opts.steps} reward {rewards[-1]:.3f} loss {stats['loss']:+.4f} "
                    f"kl {kl} logp_gap {stats['logp_gap']:.1e} weight_version {version} "
                    f"reload {check} ({time.monotonic() - start:.1f}s)")
    log(t.rank, f"grpo done: steps {opts.steps} reward {rewards[0]:.3f} -> {rewards[-1]:.3f} "
                f"reloads confirmed {confirmed_total}/{opts.steps * len(t.servers)}")
    if t.rank == 0 and rt.run_dir():  # what a sweep optimises: the last step's mean reward
        write_metrics(str(rt.run_dir()), objective=rewards[-1], reward=rewards, steps=opts.steps)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
