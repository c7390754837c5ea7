"""The GRPO loop both recipes share, whatever shards the model: sample, score, step, push the
full weights to every server, confirm what each serves.

Each step: rank 0 samples `samples_per_prompt` completions per prompt from every rollout server,
scores them (recipes/grpo/reward.py) and shares the batch; each data-parallel slice (dp x cp
ranks; the tp/pp ranks of a slice see the same samples) computes the GRPO policy-gradient loss
(group-normalised advantages, a k3 KL term against a frozen reference when `ref` is on); the
optimizer steps; the engine gathers the full weights, rank 0 writes them to a new folder in the
HF layout; each server is told to load it (by the rank the plan's weight_sync pairs with the
instance's tp rank 0); and rank 0 confirms every server now serves them: its greedy completion
must equal, token for token, the greedy output of a plain HF model loaded from the same folder,
with log-probs within verify_logprob_tol. A mismatch or a failed reload ends the run with a
non-zero exit. Without rollout servers (rollout=none) rank 0 samples from the newest folder.

The engine (FSDP2 + tensor parallel in recipes/grpo/train.py, Megatron-core in
recipes/grpo_megatron/train.py) supplies the training step and the full weights; the rollout
servers' memory phases (recipes/grpo/phases.py) and the engine's offload wrap its phases.

Surviving failures (docs/architecture.md §11): each rank heartbeats its step and phase
(launcher.trainer.runtime);
after each step the loop saves a checkpoint when one is due or the launcher asked
(recipes/grpo/resume.py); started with a checkpoint present it resumes from the newest, and a
resumed or restarted trainer pushes its weights to every server before its first rollout.
Before each rollout rank 0 makes sure every server serves the trainer's current weights
(recipes/grpo/serving.py).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol

import torch
import torch.distributed as dist

from launcher.trainer.objective import write_metrics
from launcher.trainer.runtime import RuntimePlan, health_ok
from recipes.grpo import policy as policies
from recipes.grpo import resume, serving
from recipes.grpo.distill import TeacherClient
from recipes.grpo.inference import InferenceClient
from recipes.grpo.layout import LayoutMismatch
from recipes.grpo.options import GRPOOptions
from recipes.grpo.phases import RolloutPhases
from recipes.grpo.profiling import StepProfiler
from recipes.grpo.reward import group_advantages
from recipes.grpo.rollout_client import RolloutError, RolloutServer, Sample, sample_all
from recipes.grpo.weights import prune_versions, sample_from_folder, write_weights
from recipes.grpo.world import World


@dataclass
class Session:
    """What every step needs besides the model, set up once."""

    opts: GRPOOptions
    rank: int
    data_rank: int  # which slice of the batch this rank trains on
    data_world: int  # how many slices: the dp (x cp) ranks; tp/pp ranks share a slice
    data_group: Any  # the process group of one rank per slice (batch sums); None: the world
    device: torch.device
    dtype: torch.dtype
    tokenizer: Any
    model_config: Any  # the HF config, written beside every pushed weights folder
    generation_config: Any
    hf_shapes: dict[str, tuple[int, ...]]  # the layout every push must keep
    servers: list[RolloutServer]
    my_instances: list[int]
    weights_root: Path
    policy_dir: str  # the newest weights folder (no servers: rank 0 samples from it)
    phases: RolloutPhases
    max_tokens_per_mb: int  # actor.mb_spec.max_tokens_per_mb
    rt: RuntimePlan
    version: Optional[str] = None  # the weights the servers must serve; None: the start model
    policy: policies.Policy = policies.Policy("actor", "rollout")  # what this job trains, feeds
    world: Optional[World] = None  # rank 0: where prompts and rewards come from
    inference: Optional[InferenceClient] = None  # the inference engine computes the log-probs
    proximal: Optional[list[list[float]]] = None  # this step's, from it (None: no inference)
    teacher: Optional[TeacherClient] = None  # a served teacher: the distillation term
    teacher_logps: Optional[list[list[float]]] = None  # this step's, from it


class Engine(resume.Checkpointable, Protocol):
    """What a recipe's training engine does for the loop (checkpoint_state: None when it
    cannot checkpoint)."""

    has_ref: bool

    def train_step(
        self, s: Session, samples: list[Sample], advantages: list[float]
    ) -> dict[str, float]: ...

    def full_state(self) -> dict[str, torch.Tensor]:
        """The full HF-layout weights (collective); rank 0 gets the tensors."""
        ...

    def offload(self) -> None:
        """Move what the training phase alone needs to host memory (between phases)."""
        ...

    def reload(self) -> None:
        """Bring it back for the next training phase."""
        ...


def log(rank: int, text: str) -> None:
    if rank == 0:
        print(text, flush=True)


def stop_all(text: str, code: int) -> int:
    """Every rank stops with `code`; rank 0 alone says why, on one stderr line, and the others
    wait for it to have said it (else torchrun could end rank 0 before it speaks, once a peer
    has exited)."""
    if dist.get_rank() == 0:
        print(f"grpo: {text}", file=sys.stderr, flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return code


def init_distributed(rt: RuntimePlan, opts: GRPOOptions) -> tuple[torch.device, int, int]:
    """The process group (NCCL on cuda, gloo on cpu) and this rank's device."""
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
    torch.manual_seed(opts.seed)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one "Loading weights" bar per load per rank is noise
    return device, dist.get_rank(), dist.get_world_size()


def agree_on_layout(problems: list[str]) -> None:
    """Every rank learns every rank's layout problems; all stop together on the first one
    (lowest rank), so the run fails with that one line instead of a tangle of broken
    collectives."""
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, problems)
    first = next((line for lines in gathered for line in lines), None)
    if first is not None:
        raise LayoutMismatch(first)


def reload_owners(
    rt: RuntimePlan, n_servers: int, pol: policies.Policy = policies.Policy("actor", "rollout")
) -> dict[int, int]:
    """instance -> the trainer rank that tells it to reload: the rank the plan pairs with the
    instance's tp rank 0 (lowest first), else rank 0 (a plan without weight_sync pairs)."""
    owners: dict[int, int] = {}
    for rank in range(rt.world_size(pol.train)):
        for instance, tp in rt.weight_targets(rank, pol.train, pol.serve or "rollout"):
            if tp == 0 and instance < n_servers:
                owners.setdefault(instance, rank)
    return {i: owners.get(i, 0) for i in range(n_servers)}


def open_session(
    rt: RuntimePlan,
    opts: GRPOOptions,
    device: torch.device,
    model_path: str,
    slice_: tuple[int, int, Any],
    hf_shapes: dict[str, tuple[int, ...]],
) -> Session:
    """Tokenizer, configs, servers (rank 0 waits for their /health) and the weights folder;
    `slice_` is (data rank, data world, data group)."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    rank = dist.get_rank()
    pol = policies.of(rt, policies.job_role(rt) or "actor")
    backend = str(rt.component(pol.serve).get("backend")) if pol.serve else "vllm"
    servers = [RolloutServer(addr, backend, rt.served_model_name()) for addr in rt.server_addrs()]
    owners = reload_owners(rt, len(servers), pol)
    run_dir = rt.run_dir()
    root = Path(
        opts.weights_dir
        or (
            Path(run_dir) / "weights"
            if run_dir
            else Path(tempfile.gettempdir()) / "areal-grpo-weights"
        )
    )
    try:
        generation = GenerationConfig.from_pretrained(model_path)
    except OSError:
        generation = None
    world = World.from_plan(rt, opts.prompts_per_step, lambda text: log(rank, text), rank == 0)
    phases = RolloutPhases.from_plan(
        rt,
        servers,
        say=lambda text: log(rank, text),
        pol=pol,
        workers=world.offload if rank == 0 else None,
    )
    training = rt.training(pol.train)
    s = Session(
        opts,
        rank,
        *slice_,
        device,
        getattr(torch, training["dtype"]),
        AutoTokenizer.from_pretrained(model_path),
        AutoConfig.from_pretrained(model_path),
        generation,
        hf_shapes,
        servers,
        [i for i, r in owners.items() if r == rank],
        root,
        model_path,
        phases,
        int(training["max_tokens_per_mb"]),
        rt,
        policy=pol,
        world=world,
        inference=InferenceClient.from_plan(rt) if pol.train == "actor" else None,
        teacher=TeacherClient.from_plan(
            rt, (opts.distill_loss_weight, opts.rl_loss_weight), lambda text: log(rank, text)
        )
        if pol.train == "actor"
        else None,
    )
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        if s.teacher is not None:
            s.teacher.wait(rt.health_timeout_s())
        if servers:
            rt.wait_for_servers(rt.health_timeout_s())
        else:
            log(
                rank,
                "grpo: no rollout servers (rollout=none): rank 0 samples from the "
                "trainer's own saved weights",
            )
    dist.barrier()
    return s


def rollout(s: Session, step: int) -> tuple[list[Sample], list[float], list[float]]:
    """Rank 0 samples and scores; every rank receives the same batch."""
    payload: list[Any] = [None]
    if s.rank == 0:
        if s.servers:  # each one up and serving the current weights before it is used
            serving.refresh(s, step, lambda text: log(0, text))
        o = s.opts
        assert s.world is not None
        samples, rewards = s.world.rollout(
            step,
            o.prompts_per_step,
            o.samples_per_prompt,
            o.seed,
            (o.seed * 1000 + step) * 1000,
            lambda prompts, seed: draw(s, step, prompts, seed),
        )
        payload = [
            (
                samples,
                rewards,
                group_advantages(rewards, o.samples_per_prompt),
                proximal(s, step, samples),
                teacher_logps(s, step, samples),
            )
        ]
    dist.broadcast_object_list(payload, src=0)
    samples, rewards, advantages, s.proximal, s.teacher_logps = payload[0]
    return samples, rewards, advantages


def teacher_logps(s: Session, step: int, samples: list[Sample]) -> Optional[list[list[float]]]:
    """Rank 0: the served teacher's log-probs of every sampled token (None: no teacher)."""
    if s.teacher is None:
        return None
    start = time.monotonic()
    out = s.teacher.logprobs([token_ids(s, x) for x in samples])
    log(
        0,
        f"grpo: step {step}: teacher log-probs of {len(out)} sample(s) from "
        f"{len(s.teacher.servers)} server(s) ({time.monotonic() - start:.2f}s)",
    )
    return out


def draw(s: Session, step: int, prompts: list[str], seed: int) -> list[Sample]:
    """Rank 0: samples_per_prompt completions of each prompt, from the servers (or, without
    servers, from the newest weights folder)."""
    o = s.opts
    if s.servers:
        return sample_with_retries(s, step, prompts, seed)
    return [
        Sample(i, prompts[i], text, ids, completion, None, "local")
        for i, ids, completion, text in sample_from_folder(
            s.policy_dir,
            prompts,
            o.samples_per_prompt,
            o.max_new_tokens,
            o.temperature,
            seed,
            s.dtype,
            s.device,
        )
    ]


def proximal(s: Session, step: int, samples: list[Sample]) -> Optional[list[list[float]]]:
    """Rank 0: the inference engine's log-probs of the samples on the weights that drew them
    (the actor's newest push), or None without an inference engine."""
    if s.inference is None:
        return None
    start = time.monotonic()
    out = s.inference.logprobs(
        step,
        [token_ids(s, x) for x in samples],
        s.policy_dir,
        s.version or "default",
        lambda: s.rt.heartbeat(step, "inference"),
    )
    gaps = [
        abs(a - b)
        for x, lp in zip(samples, out)
        if x.logprobs and len(x.logprobs) == len(lp)
        for a, b in zip(x.logprobs, lp)
    ]
    log(
        0,
        f"grpo: step {step}: log-probs of {len(out)} sample(s) from inference on "
        f"{s.version or 'the start model'} ({time.monotonic() - start:.2f}s); largest gap to "
        f"the servers' sampling log-probs {max(gaps, default=0.0):.1e}",
    )
    return out


def sample_with_retries(
    s: Session, step: int, prompts: list[str], seed: int, attempts: int = 3
) -> list[Sample]:
    """Rank 0's sampling; a server that dies during it (the launcher restarts it alone,
    launcher.max_restarts) is waited for and brought to the current weights, and the step's
    batch is sampled again, the same seeds giving the same draw."""
    o = s.opts
    for attempt in range(1, attempts + 1):
        try:
            return sample_all(
                s.servers, prompts, o.samples_per_prompt, o.max_new_tokens, o.temperature, seed
            )
        except RolloutError as exc:
            down = [sv.addr for sv in s.servers if not health_ok(sv.addr)]
            if not down or attempt == attempts:
                raise
            log(
                0,
                f"grpo: step {step}'s rollout failed ({exc}); server(s) {', '.join(down)} "
                "down: waiting for them, then sampling again",
            )
            serving.refresh(s, step, lambda text: log(0, text))
    raise AssertionError("unreachable")


def my_samples(s: Session, n: int) -> list[int]:
    """The indices of this rank's slice of an n-sample batch (same for a slice's tp/pp ranks)."""
    return list(range(s.data_rank, n, s.data_world))


def token_ids(s: Session, sample: Sample) -> tuple[list[int], list[int]]:
    """The ids the server used; re-tokenised from text where it did not return them."""
    prompt = sample.prompt_ids or s.tokenizer(sample.prompt).input_ids
    completion = sample.completion_ids
    if completion is None:
        completion = s.tokenizer(sample.text, add_special_tokens=False).input_ids
    return list(prompt), list(completion) or [s.tokenizer.eos_token_id]


def grpo_loss(
    logp: torch.Tensor,
    mask: torch.Tensor,
    adv: torch.Tensor,
    ref_logp: Optional[torch.Tensor],
    kl_coef: float,
    old_logp: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sequence GRPO loss (length-normalised policy gradient + kl_coef * k3 KL to the
    reference) and the KL alone; with `old_logp` (the inference engine's) the policy term is
    the importance ratio exp(logp - old_logp) times the advantage."""
    lengths = mask.sum(-1).clamp(min=1)
    term = logp if old_logp is None else torch.exp(logp - old_logp)
    pg = -(adv[:, None] * term * mask).sum(-1) / lengths
    kl = torch.zeros_like(pg)
    if ref_logp is not None:
        delta = ref_logp - logp
        kl = ((delta.exp() - delta - 1) * mask).sum(-1) / lengths  # k3 estimator, >= 0
    return pg + kl_coef * kl, kl


def logp_gap(
    s: Session, samples: list[Sample], mine: list[int], logp: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """The largest gap between the server's sampling log-probs and ours on this rank's
    samples (same weights: ~0)."""
    gap = torch.zeros((), device=s.device)
    for row, i in enumerate(mine):
        lp = samples[i].logprobs
        if lp and samples[i].completion_ids and len(lp) == int(mask[row].sum()):
            ours = logp[row][mask[row].bool()].detach()
            gap = torch.maximum(gap, (ours - torch.tensor(lp, device=s.device)).abs().max())
    return gap


def micro_batches(s: Session, seqs: list[tuple[list[int], list[int]]]) -> list[list[int]]:
    """Positions of `seqs` in consecutive groups of at most max_tokens_per_mb tokens each (a
    longer sequence goes alone): the largest forward a rank runs, which sizes its activation
    memory. Every rank of the data group runs the same number (collectives in each backward):
    where this rank has fewer, it repeats its last group with weight 0 (see `weights`)."""
    groups: list[list[int]] = []
    used = s.max_tokens_per_mb
    for i, (prompt, completion) in enumerate(seqs):
        n = len(prompt) + len(completion)
        if used + n > s.max_tokens_per_mb:
            groups.append([])
            used = 0
        groups[-1].append(i)
        used += n
    count = torch.tensor([len(groups)], device=s.device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return groups + [groups[-1]] * (int(count.item()) - len(groups))


def weights(groups: list[list[int]]) -> list[float]:
    """1 for each group's first run, 0 for a repeat (it only keeps the collectives in step)."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for g in groups:
        out.append(0.0 if tuple(g) in seen else 1.0)
        seen.add(tuple(g))
    return out


def batch_stats(
    s: Session, samples: list[Sample], per_seq: torch.Tensor, kl: torch.Tensor, gap: torch.Tensor
) -> dict[str, float]:
    """Batch-wide loss and KL (summed over one rank per slice) and the log-prob gap."""
    stats = torch.stack([per_seq.detach().sum(), kl.detach().sum()]) / len(samples)
    dist.all_reduce(stats, group=s.data_group)
    dist.all_reduce(gap, op=dist.ReduceOp.MAX)
    return {"loss": stats[0].item(), "kl": stats[1].item(), "logp_gap": gap.item()}


def push_weights(s: Session, state: dict[str, torch.Tensor], version: str) -> tuple[Path, int]:
    """Rank 0 writes `state` (the full weights it gathered), every server loads the new
    folder, and rank 0 confirms what they serve."""
    folder = s.weights_root / version
    if s.rank == 0:
        folder = write_weights(
            state,
            s.model_config,
            s.generation_config,
            s.tokenizer,
            s.weights_root,
            version,
            s.hf_shapes,
        )
    dist.barrier()  # the folder is complete before any server is asked to read it
    for instance in s.my_instances:
        server = s.servers[instance]
        try:
            server.reload(str(folder), version)
        except RolloutError:
            if health_ok(server.addr):
                raise
            log(
                s.rank,
                f"grpo: rollout server {server.addr} is down during the push of "
                f"{version}: it gets the weights before the next rollout",
            )
    dist.barrier()
    confirmed = (
        serving.confirm(s, folder, version, s.servers, lambda text: log(0, text))
        if s.rank == 0 and s.servers
        else 0
    )
    if s.rank == 0:
        prune_versions(s.weights_root, s.opts.keep_versions, folder)
    s.policy_dir, s.version = str(folder), version
    return folder, confirmed


def log_step(
    s: Session,
    step: int,
    samples: list[Sample],
    reward: float,
    stats: dict[str, float],
    took: dict[str, float],
) -> None:
    """Rank 0: the step's metrics to the trackers (launcher.tracking) and metrics.jsonl;
    tokens per second counts the batch's prompt and completion tokens over the whole step."""
    tokens = sum(len(p) + len(c) for p, c in (token_ids(s, x) for x in samples))
    s.rt.log(
        {
            "reward": reward,
            **stats,
            **took,
            "tokens_per_s": tokens / max(took["step_time_s"], 1e-9),
        },
        step,
    )


def start_or_resume(s: Session, engine: Engine) -> int:
    """The first step to run: 1, or the one after the newest checkpoint, loaded. A trainer
    that resumed or was restarted pushes its weights to every server first (they may serve a
    later version from the attempt that failed, or the start model after their own restart)."""
    rt = s.rt
    rt.heartbeat(0, "resume")
    found = resume.load(rt, engine)
    step = found.step if found else 0
    if found:
        log(
            s.rank,
            f"grpo: resumed from step {step} ({resume.shown(rt, found.path)}), "
            f"restart {rt.restart()}",
        )
    elif rt.restart() > 0:
        log(s.rank, f"grpo: restart {rt.restart()} and no checkpoint: starting from step 1")
    if found or rt.restart() > 0:
        rt.heartbeat(step, "push")
        _, confirmed = push_weights(s, engine.full_state(), f"v{step}")
        where = (
            f"{len(s.servers)} server(s), confirmed {confirmed}/{len(s.servers)}"
            if s.servers
            else "rank 0's own sampling (no servers)"
        )
        log(s.rank, f"grpo: weights v{step} pushed before the first rollout: {where}")
    return step + 1


def run_steps(s: Session, engine: Engine) -> int:
    """The loop: per step rollout, train, push, confirm, checkpoint when due; the servers
    sleep while the engine trains and are awake for the push and the next rollout (when they
    share GPUs)."""
    opts, rt = s.opts, s.rt
    first = start_or_resume(s, engine)
    rewards: list[float] = []
    confirmed_total = 0
    profiler = StepProfiler.from_plan(
        rt, s.policy.train, s.rank, s.device, lambda text: log(s.rank, text)
    )
    for step in range(first, opts.steps + 1):
        recording = profiler.start(step)
        start = time.monotonic()
        took: dict[str, float] = {}
        rt.heartbeat(step, "rollout")
        samples, step_rewards, advantages = rollout(s, step)
        took["rollout_time_s"] = time.monotonic() - start
        if len(samples) < s.data_world:
            raise ValueError(
                f"{len(samples)} samples for {s.data_world} data-parallel slices: "
                "raise recipe.prompts_per_step or recipe.samples_per_prompt"
            )
        version = f"v{step}"

        def train() -> tuple[dict[str, float], dict[str, torch.Tensor]]:
            rt.heartbeat(step, "train")
            began = time.monotonic()
            engine.reload()
            stats = engine.train_step(s, samples, advantages)
            state = engine.full_state()
            engine.offload()
            took["train_time_s"] = time.monotonic() - began
            return stats, state

        def push(trained: tuple[dict[str, float], dict[str, torch.Tensor]]) -> tuple[Path, int]:
            rt.heartbeat(step, "push")
            began = time.monotonic()
            pushed = push_weights(s, trained[1], version)
            took["weight_push_time_s"] = time.monotonic() - began
            return pushed

        (stats, _), (_, confirmed) = s.phases.train_then_push(
            train, push, dist.barrier, leader=s.rank == 0
        )
        confirmed_total += confirmed
        rewards.append(sum(step_rewards) / len(step_rewards))
        kl = f"{stats['kl']:.4f}" if engine.has_ref else "off"
        if "distill" in stats:
            kl += f" distill {stats['distill']:+.4f}"
        check = (
            f"confirmed {confirmed}/{len(s.servers)}"
            if opts.verify_reload and s.servers
            else "unchecked"
            if s.servers
            else "none (no servers)"
        )
        log(
            s.rank,
            f"step {step}/{opts.steps} reward {rewards[-1]:.3f} loss "
            f"{stats['loss']:+.4f} kl {kl} logp_gap {stats['logp_gap']:.1e} "
            f"weight_version {version} reload {check} "
            f"({time.monotonic() - start:.1f}s)",
        )
        if s.rank == 0:
            log_step(
                s,
                step,
                samples,
                rewards[-1],
                stats if engine.has_ref else {k: v for k, v in stats.items() if k != "kl"},
                {**took, "step_time_s": time.monotonic() - start},
            )
        profiler.stop(step, recording)
        resume.at_step_end(s, engine, step, lambda text: log(s.rank, text))
    ran = len(rewards)
    since = (
        ""
        if first == 1
        else f" ({first}-{opts.steps} after resuming)"
        if ran
        else " (all done before this restart)"
    )
    trend = f"reward {rewards[0]:.3f} -> {rewards[-1]:.3f} " if rewards else ""
    log(
        s.rank,
        f"grpo done: steps {opts.steps}{since} {trend}"
        f"reloads confirmed {confirmed_total}/{ran * len(s.servers)}",
    )
    run_dir = rt.run_dir()
    if s.rank == 0 and run_dir and rewards:  # what a sweep optimises: the last step's reward
        write_metrics(run_dir, objective=rewards[-1], reward=rewards, steps=opts.steps)
    if s.rank == 0:
        picture = rt.finish_tracking()
        if picture:
            log(0, f"grpo: the run as a picture: {picture}")
    if s.rank == 0 and s.inference is not None:
        s.inference.stop()
    rt.heartbeat(opts.steps, "done")
    dist.barrier()
    return 0
