"""The Megatron training step: GRPO on Megatron-core's pipeline schedule, its DDP and its
optimizer. Needs CUDA on megatron-core 0.16.1 (RNG tracker, RoPE and attention buffers ask
torch.cuda); written for a GPU machine and UNTESTED there (this project's CI has no GPU).

Each data-parallel slice's samples form one micro-batch; the last pipeline stage turns its
vocab-parallel logits into token log-probs (padded vocabulary rows masked out, so they equal
the HF model's) and the GRPO loss (recipes/grpo/loop.py); a frozen reference model, when `ref`
is on, runs the same schedule forward only first. actor.megatron.use_distributed_optimizer
picks Megatron's distributed optimizer (optimizer state sharded over dp) and the DDP buffers
that go with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

import torch
import torch.distributed as dist

from recipes.grpo import loop
from recipes.grpo.loop import Session
from recipes.grpo.rollout_client import Sample
from recipes.grpo_megatron.convert import LlamaShape
from recipes.grpo_megatron.model import gather_hf


@dataclass
class Batch:
    ids: torch.Tensor  # (B, L)
    positions: torch.Tensor
    labels: torch.Tensor  # ids shifted left: position t predicts labels[t]
    mask: torch.Tensor  # 1 where labels[t] is a completion token
    adv: torch.Tensor  # (B,)


def make_batch(
    s: Session, samples: list[Sample], mine: list[int], advantages: list[float]
) -> Batch:
    seqs = [loop.token_ids(s, samples[i]) for i in mine]
    length = max(len(p) + len(c) for p, c in seqs)
    pad = s.tokenizer.pad_token_id
    ids = torch.full((len(seqs), length), pad, dtype=torch.long)
    labels = torch.full_like(ids, pad)
    mask = torch.zeros(len(seqs), length)
    for row, (prompt, completion) in enumerate(seqs):
        n = len(prompt) + len(completion)
        ids[row, :n] = torch.tensor(prompt + completion)
        labels[row, : n - 1] = ids[row, 1:n]
        mask[row, len(prompt) - 1 : n - 1] = 1
    positions = torch.arange(length).expand(len(seqs), -1)
    adv = torch.tensor([advantages[i] for i in mine])
    return Batch(*(t.to(s.device) for t in (ids, positions, labels, mask, adv)))


def token_logp(logits: torch.Tensor, labels: torch.Tensor, shape: LlamaShape) -> torch.Tensor:
    """log p(label) from vocab-parallel logits (B, L, V/tp), padded vocab rows excluded."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    per_rank = logits.shape[-1]
    start = ps.get_tensor_model_parallel_rank() * per_rank
    padded = torch.arange(start, start + per_rank, device=logits.device) >= shape.vocab
    logits = logits.float().masked_fill(padded, -1e9)
    return -vocab_parallel_cross_entropy(
        logits.transpose(0, 1).contiguous(), labels.transpose(0, 1).contiguous()
    ).transpose(0, 1)


@dataclass
class MegatronEngine:
    """The actor as Megatron DDP model + optimizer, and a frozen reference (or None)."""

    model: Any  # megatron.core.distributed.DistributedDataParallel
    module: torch.nn.Module  # the GPTModel inside it
    ref: Optional[torch.nn.Module]
    optim: Any
    shape: LlamaShape

    @property
    def has_ref(self) -> bool:
        return self.ref is not None

    def _schedule(
        self, model: Any, batch: Batch, forward_only: bool, loss_of: Any
    ) -> list[Mapping[str, Any]]:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        def forward_step(data: Any, chunk: Any) -> tuple[torch.Tensor, Any]:
            b = next(data)
            return chunk(b.ids, b.positions, None), loss_of

        return (
            get_forward_backward_func()(
                forward_step_func=forward_step,
                data_iterator=iter([batch]),
                model=[model],
                num_microbatches=1,
                seq_length=batch.ids.shape[1],
                micro_batch_size=batch.ids.shape[0],
                forward_only=forward_only,
            )
            or []
        )

    def train_step(
        self, s: Session, samples: list[Sample], advantages: list[float]
    ) -> dict[str, float]:
        mine = loop.my_samples(s, len(samples))
        batch = make_batch(s, samples, mine, advantages)
        ref_logp = None
        if self.ref is not None:
            with torch.no_grad():
                out = self._schedule(
                    self.ref,
                    batch,
                    True,
                    lambda logits: (
                        logits.sum() * 0,
                        {"logp": token_logp(logits, batch.labels, self.shape)},
                    ),
                )
            ref_logp = out[0]["logp"] if out else None
        stats = torch.zeros(3, device=s.device)  # loss sum, kl sum, log-prob gap (last stage)

        def loss_of(logits: torch.Tensor) -> tuple[torch.Tensor, dict]:
            logp = token_logp(logits, batch.labels, self.shape)
            per_seq, kl = loop.grpo_loss(logp, batch.mask, batch.adv, ref_logp, s.opts.kl_coef)
            gap = loop.logp_gap(s, samples, mine, logp, batch.mask)
            stats.copy_(torch.stack([per_seq.detach().sum(), kl.detach().sum(), gap]))
            return per_seq.sum() * s.data_world / len(samples), {}

        self.model.zero_grad_buffer()
        self.optim.zero_grad()
        self._schedule(self.model, batch, False, loss_of)
        self.optim.step()
        from megatron.core import parallel_state as ps

        if ps.get_tensor_model_parallel_rank() != 0 or not ps.is_pipeline_last_stage():
            stats.zero_()  # one rank per data slice counts
        gap = stats[2:].clone()
        dist.all_reduce(stats)
        dist.all_reduce(gap, op=dist.ReduceOp.MAX)
        return {
            "loss": stats[0].item() / len(samples),
            "kl": stats[1].item() / len(samples),
            "logp_gap": gap.item(),
        }

    def full_state(self) -> dict[str, torch.Tensor]:
        return gather_hf(self.module, self.shape)

    def checkpoint_state(self) -> None:
        """Not yet: Megatron's sharded checkpoint (dist_checkpointing, the distributed
        optimizer's parameter state) is not wired, and CPU cannot run a step to test it; the
        loop says so at each checkpoint it cannot save."""
        return None

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError("the Megatron engine does not load checkpoints yet")

    def offload(self) -> None:
        """Between-phases offload is not wired for Megatron here (its DDP buffers and
        distributed optimizer hold the memory): the recipe says so at start."""

    def reload(self) -> None:
        pass


def make_engine(
    module: torch.nn.Module,
    ref: Optional[torch.nn.Module],
    shape: LlamaShape,
    lr: float,
    max_grad_norm: float,
    options: Mapping[str, Any],
) -> MegatronEngine:
    """Megatron DDP (grads reduced over dp) and optimizer, per actor.megatron.*."""
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    distributed = bool(options.get("use_distributed_optimizer", True))
    config = module.config
    model = DistributedDataParallel(
        config=config,
        ddp_config=DistributedDataParallelConfig(
            use_distributed_optimizer=distributed,
            overlap_grad_reduce=False,
            grad_reduce_in_fp32=True,
        ),
        module=module,
    )
    config.finalize_model_grads_func = finalize_model_grads
    # actor.megatron.optimizer_cpu_offload: master weights and Adam moments on the host
    cpu_offload = bool(options.get("optimizer_cpu_offload", False))
    optim = get_megatron_optimizer(
        OptimizerConfig(
            optimizer="adam",
            lr=lr,
            weight_decay=0.0,
            clip_grad=max_grad_norm,
            use_distributed_optimizer=distributed,
            params_dtype=config.params_dtype,
            optimizer_cpu_offload=cpu_offload,
            optimizer_offload_fraction=1.0 if cpu_offload else 0.0,
        ),
        [model],
        use_gloo_process_groups=False,
    )  # parallel.initialize makes no gloo groups
    return MegatronEngine(model, module, ref, optim, shape)
