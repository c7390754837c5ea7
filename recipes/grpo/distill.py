"""The distillation term with a served teacher (docs/architecture.md §9).

A teacher whose backend is a serving one (`teacher.backend=vllm:d1`, or AReaL 2.0's
`teacher.rollout.backend`) is a serving component of the plan; its servers answer on
$AREAL_TEACHER_ADDRS. Each step rank 0 asks them for the log-prob of every sampled token given
its prefix (prompt log-probs of prompt + completion: vLLM's `prompt_logprobs` on
/v1/completions, SGLang's `input_token_logprobs` on /generate), spread over the teacher's
servers, and shares them with the batch. The loss is then AReaL's joint KDRL loss:

    loss = rl_loss_weight * GRPO loss + distill_loss_weight * mean_t (logp_t - teacher_logp_t)

per sequence (length-normalised as the GRPO term is): a reverse-KL estimate on the policy's own
samples, which pulls the policy towards the teacher where it is more confident than it. The term
is on when the plan serves a teacher and recipe.distill_loss_weight > 0. The teacher is frozen:
no weight push reaches it. Stdlib for the HTTP side; torch only in the loss.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from launcher.trainer.runtime import DEFAULT_SERVED_MODEL, RuntimePlan, wait_for_servers
from recipes.grpo.rollout_client import RolloutError, RolloutServer, post_json
from recipes.grpo.workers_client import spread, worker_addrs

TEACHER = "teacher"

Seq = tuple[list[int], list[int]]  # (prompt ids, completion ids)


@dataclass(frozen=True)
class TeacherClient:
    """The teacher's servers, as this recipe asks them for log-probs."""

    servers: tuple[RolloutServer, ...]
    distill_loss_weight: float
    rl_loss_weight: float

    @classmethod
    def from_plan(
        cls, rt: RuntimePlan, weights: tuple[float, float], say: Callable[[str], None]
    ) -> Optional["TeacherClient"]:
        """The served teacher of the plan (None: none, or distill_loss_weight is 0);
        `weights`: the recipe's (distill_loss_weight, rl_loss_weight)."""
        if not rt.has_component(TEACHER) or rt.component(TEACHER).get("kind") != "serve":
            return None
        distill, rl = weights
        if distill <= 0:
            say("grpo: the teacher is served but recipe.distill_loss_weight=0: not asked")
            return None
        comp = rt.component(TEACHER)
        options = (rt.meta.get("engine_options") or {}).get(TEACHER, {}).get("options", {})
        model = str(options.get("served_model_name") or DEFAULT_SERVED_MODEL)
        servers = tuple(
            RolloutServer(a, str(comp.get("backend")), model) for a in worker_addrs(rt, TEACHER)
        )
        if not servers:
            raise RolloutError("the plan serves a teacher but $AREAL_TEACHER_ADDRS is empty")
        return cls(servers, distill, rl)

    def wait(self, timeout_s: float) -> None:
        wait_for_servers([s.addr for s in self.servers], timeout_s)

    def logprobs(self, seqs: Sequence[Seq]) -> list[list[float]]:
        """Each sequence's completion-token log-probs under the teacher, concurrently over its
        servers (round-robin)."""
        out: list[list[float]] = [[] for _ in seqs]
        deals = spread(list(seqs), len(self.servers))

        def one(k: int) -> None:
            for i in deals[k]:
                out[i] = completion_logprobs(self.servers[k], *seqs[i])

        with ThreadPoolExecutor(max_workers=len(deals) or 1) as pool:
            list(pool.map(one, range(len(deals))))
        return out


def completion_logprobs(
    server: RolloutServer, prompt: list[int], completion: list[int]
) -> list[float]:
    """log p(completion token | prefix) under `server`'s model, one per completion token."""
    ids = list(prompt) + list(completion)
    if server.client.generate is not None:  # SGLang's native form
        out = post_json(
            server.addr,
            server.client.generate,
            {
                "input_ids": ids,
                "sampling_params": {"max_new_tokens": 0},
                "return_logprob": True,
                "logprob_start_len": 0,
            },
        )
        rows = (out.get("meta_info") or {}).get("input_token_logprobs") or []
        values = [r[0] if r else None for r in rows]
    else:  # vLLM: prompt log-probs on OpenAI's completions
        body = {
            "model": server.model,
            "prompt": ids,
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": 0,
        }
        choice = post_json(server.addr, "/v1/completions", body)["choices"][0]
        rows = choice.get("prompt_logprobs") or []
        values = [_own(row, tok) for row, tok in zip(rows, ids)]
    got = values[len(prompt) : len(ids)]
    if len(got) != len(completion) or any(v is None for v in got):
        raise RolloutError(
            f"{server.addr}: the teacher gave {len(got)} log-probs for a completion of "
            f"{len(completion)} tokens"
        )
    return [float(v) for v in got if v is not None]


def _own(row: Optional[dict], token: int) -> Optional[float]:
    """The log-prob of `token` in one position of vLLM's prompt_logprobs ({id: {logprob}})."""
    if not row:
        return None
    entry = row.get(str(token), row.get(token))  # type: ignore[call-overload]
    return None if entry is None else float(entry["logprob"])


def joint(per_seq: Any, logp: Any, mask: Any, teacher: Optional[Any], client: Any) -> tuple:
    """(the loss per sequence with the distillation term, the term per sequence): `teacher`
    holds the teacher's log-probs laid out like `logp` (None: no teacher, nothing added)."""
    if teacher is None or client is None:
        return per_seq, None
    lengths = mask.sum(-1).clamp(min=1)
    term = ((logp - teacher.detach()) * mask).sum(-1) / lengths
    return client.rl_loss_weight * per_seq + client.distill_loss_weight * term, term


def batch_term(s: Any, terms: list, samples: int) -> dict[str, float]:
    """The distillation term's batch mean (summed over one rank per slice), as the step's
    `distill` metric; {} without a teacher."""
    import torch
    import torch.distributed as dist

    if not terms:
        return {}
    total = torch.cat(terms).sum() / samples
    dist.all_reduce(total, group=s.data_group)
    return {"distill": total.item()}
