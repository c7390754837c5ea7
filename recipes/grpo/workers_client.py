"""The recipe's side of the run's worker components (recipes/workers/*): where they answer
($AREAL_<NAME>_ADDRS), scoring over HTTP on the `reward` worker, prompts and scores from the
`env` worker, and offload/reload of every worker the plan offloads, each reload confirmed.
Stdlib only, so it is tested against the real services without torch.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from launcher.spec.process import component_addrs_env
from launcher.trainer.runtime import RuntimePlan, wait_for_servers
from recipes.grpo.rollout_client import RolloutError, post_json


def worker_addrs(rt: RuntimePlan, name: str) -> list[str]:
    """host:port of each process of worker component `name` that answers on a port."""
    named = rt.env.get(component_addrs_env(name), "")
    return [a.strip() for a in named.split(",") if a.strip()]


def spread(items: Sequence, parts: int) -> list[list[int]]:
    """Indices of `items` dealt round-robin into `parts` lists (empty ones dropped)."""
    return [idx for idx in (list(range(p, len(items), parts)) for p in range(parts)) if idx]


@dataclass(frozen=True)
class RewardClient:
    """The `reward` worker's processes; each batch is spread over all of them, concurrently."""

    addrs: tuple[str, ...]

    def score(self, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        deals = spread(texts, len(self.addrs))

        def one(p: int) -> list[float]:
            out = post_json(self.addrs[p], "/score", {"texts": [texts[i] for i in deals[p]]})
            rewards = out.get("rewards") if isinstance(out, dict) else None
            if not isinstance(rewards, list) or len(rewards) != len(deals[p]):
                raise RolloutError(f"{self.addrs[p]}/score: {len(deals[p])} texts, answer {out}")
            return [float(r) for r in rewards]

        rewards = [0.0] * len(texts)
        with ThreadPoolExecutor(max_workers=len(deals)) as pool:
            for p, got in enumerate(pool.map(one, range(len(deals)))):
                for i, r in zip(deals[p], got):
                    rewards[i] = r
        return rewards


@dataclass(frozen=True)
class Episode:
    id: str
    prompt: str
    env: str  # the env process that opened it (it scores it)


@dataclass(frozen=True)
class EnvClient:
    """The `env` worker's processes: stage j of a step is reset on process j % n."""

    addrs: tuple[str, ...]

    def reset(self, step: int, stage: int, count: int, seed: int) -> list[Episode]:
        addr = self.addrs[stage % len(self.addrs)]
        out = post_json(
            addr, "/reset", {"step": step, "stage": stage, "count": count, "seed": seed}
        )
        return [Episode(e["id"], e["prompt"], addr) for e in out["episodes"]]

    def step(self, episodes: Sequence[Episode], responses: Sequence[str]) -> list[float]:
        """Each episode's reward from the env process that opened it."""
        rewards = [0.0] * len(episodes)
        by_env: dict[str, list[int]] = {}
        for i, e in enumerate(episodes):
            by_env.setdefault(e.env, []).append(i)
        for addr, idx in by_env.items():
            out = post_json(
                addr,
                "/step",
                {"episodes": [{"id": episodes[i].id, "response": responses[i]} for i in idx]},
            )
            for i, r in zip(idx, out["rewards"]):
                rewards[i] = float(r)
        return rewards


@dataclass
class WorkerOffload:
    """The workers whose plan entry offloads (env.enable_offload, ...): offloaded while the
    trainer trains, reloaded before the next rollout, every reload confirmed (the state digest
    it answers equals the one it offloaded), a count kept for the step's log line."""

    addrs: Mapping[str, tuple[str, ...]]  # component -> its processes
    say: Callable[[str], None]
    digests: Optional[dict[str, str]] = None
    confirmed: int = 0

    @classmethod
    def from_plan(cls, rt: RuntimePlan, say: Callable[[str], None]) -> "WorkerOffload":
        options = rt.meta.get("engine_options") or {}
        on = {
            name: tuple(worker_addrs(rt, name))
            for name in rt.plan.components
            if rt.plan.components[name].is_worker and (options.get(name) or {}).get("offload")
        }
        for name, addrs in on.items():
            say(
                f"grpo: {name} offloads between phases: {len(addrs)} process(es) "
                f"{','.join(addrs) or '(none answers on a port: nothing to ask)'}"
            )
        return cls({n: a for n, a in on.items() if a}, say)

    @property
    def count(self) -> int:
        return sum(len(a) for a in self.addrs.values())

    def offload(self) -> None:
        if not self.addrs:
            return
        self.digests = {
            addr: post_json(addr, "/offload", {})["digest"]
            for addrs in self.addrs.values()
            for addr in addrs
        }

    def reload(self) -> int:
        """Reload every offloaded worker; raise unless each brought back its state."""
        if self.digests is None:
            return 0
        start = time.time()
        for addr, digest in self.digests.items():
            out = post_json(addr, "/reload", {})
            if out.get("state") != "ready" or out.get("digest") != digest:
                raise RolloutError(
                    f"worker {addr} did not reload what it offloaded: state "
                    f"{out.get('state')}, digest {out.get('digest')} != {digest}"
                )
        n, self.digests = len(self.digests), None
        self.confirmed += n
        self.say(
            f"grpo: workers reloaded {n}/{self.count}, state confirmed "
            f"[{start:.6f}, {time.time():.6f}]"
        )
        return n


def wait_for_workers(rt: RuntimePlan, names: Sequence[str]) -> None:
    """Block until each named worker's processes answer /health (the plan's timeout)."""
    addrs = [a for n in names for a in worker_addrs(rt, n)]
    if addrs:
        wait_for_servers(addrs, rt.health_timeout_s())
