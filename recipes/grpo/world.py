"""Where a step's prompts and rewards come from, and how env and rollout take turns: the
`env` worker (prompts, and scores when no `reward` worker does), the `reward` worker (scores
over HTTP, spread over its processes), else the task in recipes/grpo/reward.py in process.

With `rollout.pipeline_stage_num: N` a step's prompts are N stages: while rollout generates
stage k, the env prepares stage k+1 and stage k-1 is scored (RLinf's pipelined rollout). Each
stage's rollout is one log line with wall-clock start and end and when the next stage's reset
was issued; the env logs its resets with start and end, so the schedule can be read from the
run's logs. Stdlib only (the sampling is passed in).
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from launcher.trainer.runtime import RuntimePlan
from recipes.grpo.reward import make_prompts, number_reward
from recipes.grpo.rollout_client import Sample
from recipes.grpo.workers_client import (
    EnvClient,
    Episode,
    RewardClient,
    WorkerOffload,
    wait_for_workers,
    worker_addrs,
)

STAGE_SEED = 7919  # stage j of a step draws its prompts with seed + j * STAGE_SEED (env too)
Sampler = Callable[[list[str], int], list[Sample]]  # (prompts, seed) -> n samples each


def stages_of(rt: RuntimePlan) -> int:
    """rollout.pipeline_stage_num as the plan carries it (1 without a rollout engine)."""
    return int(
        ((rt.meta.get("engine_options") or {}).get("rollout") or {}).get("pipeline_stage_num") or 1
    )


def stage_problem(rt: RuntimePlan, prompts_per_step: int) -> Optional[str]:
    """One line when the stages cannot each hold a prompt."""
    stages = stages_of(rt)
    if stages > prompts_per_step:
        return (
            f"rollout.pipeline_stage_num={stages} stages of recipe.prompts_per_step="
            f"{prompts_per_step} prompts: raise prompts_per_step to at least {stages}"
        )
    return None


@dataclass
class World:
    env: Optional[EnvClient]
    reward: Optional[RewardClient]
    stages: int
    offload: WorkerOffload
    say: Callable[[str], None]

    @classmethod
    def from_plan(
        cls, rt: RuntimePlan, prompts_per_step: int, say: Callable[[str], None], leader: bool
    ) -> "World":
        """The workers this plan has; the leader (rank 0) waits for their /health."""
        problem = stage_problem(rt, prompts_per_step)
        if problem:
            raise ValueError(problem)
        stages = stages_of(rt)
        env, reward = (tuple(worker_addrs(rt, n)) for n in ("env", "reward"))
        if leader:
            wait_for_workers(rt, [n for n, a in (("env", env), ("reward", reward)) if a])
            where = [
                f"prompts from env ({len(env)} process(es))" if env else "prompts in process",
                f"scores from reward over HTTP ({len(reward)} process(es))"
                if reward
                else "scores from env"
                if env
                else "scores in process",
            ]
            if stages > 1 or env or reward:
                say(f"grpo: {', '.join(where)}, {stages} pipeline stage(s)")
        return cls(
            EnvClient(env) if env else None,
            RewardClient(reward) if reward else None,
            stages,
            WorkerOffload.from_plan(rt, say),
            say,
        )

    def stage_sizes(self, prompts: int) -> list[int]:
        base, extra = divmod(prompts, self.stages)
        return [base + (1 if j < extra else 0) for j in range(self.stages)]

    def prepare(self, step: int, stage: int, count: int, seed: int) -> list[Episode]:
        if self.env is not None:
            return self.env.reset(step, stage, count, seed)
        return [
            Episode(f"{step}.{stage}.{i}", p, "")
            for i, p in enumerate(make_prompts(count, seed + STAGE_SEED * stage, step))
        ]

    def score(self, episodes: Sequence[Episode], samples: Sequence[Sample], n: int) -> list[float]:
        """The reward worker's scores, else the env's; the env steps every episode it reset
        either way (its episodes end there)."""
        texts = [x.text for x in samples]
        stepped = None
        if self.env is not None:  # each episode's n responses, to the env that reset it
            stepped = self.env.step([episodes[i // n] for i in range(len(texts))], texts)
        if self.reward is not None:
            return self.reward.score(texts)
        return stepped if stepped is not None else [number_reward(t) for t in texts]

    def rollout(
        self, step: int, prompts: int, n: int, seed: int, sample_seed: int, sample: Sampler
    ) -> tuple[list[Sample], list[float]]:
        """A step's samples (n per prompt, in prompt order) and their rewards."""
        sizes = self.stage_sizes(prompts)
        firsts = [sum(sizes[:j]) for j in range(len(sizes))]
        samples: list[Sample] = []
        with ThreadPoolExecutor(max_workers=2) as pool:
            prepared = pool.submit(self.prepare, step, 0, sizes[0], seed)
            scored = []
            for j, size in enumerate(sizes):
                episodes = prepared.result()
                issued = ""
                if j + 1 < len(sizes):  # the env prepares the next stage meanwhile
                    issued = f", stage {j + 1} issued {time.time():.6f}"
                    prepared = pool.submit(self.prepare, step, j + 1, sizes[j + 1], seed)
                start = time.time()
                got = [
                    dataclasses.replace(x, prompt_index=firsts[j] + x.prompt_index)
                    for x in sample([e.prompt for e in episodes], sample_seed + firsts[j] * n)
                ]
                if self.stages > 1:
                    self.say(
                        f"grpo: step {step} stage {j}: rollout of {size} prompt(s) "
                        f"[{start:.6f}, {time.time():.6f}]{issued}"
                    )
                samples += got
                scored.append(pool.submit(self.score, episodes, got, n))
            rewards = [r for f in scored for r in f.result()]
        return samples, rewards
