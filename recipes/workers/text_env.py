"""RLinf's `env` worker as the project ships it: a small text environment. Each episode is one
turn of the demo task (continue a count): reset hands out observations (prompts) for a stage of
a step, step takes the policy's responses and scores them (recipes/grpo/reward.py's rule).
Stdlib only: no torch.

  POST /reset {"step": k, "stage": j, "count": n, "seed": s}
       -> {"episodes": [{"id": "1.2.0", "prompt": "count: one two"}, ...], "env": "env-0"}
  POST /step  {"episodes": [{"id": ..., "response": "..."}, ...]}
       -> {"rewards": [...], "done": [true, ...]}
plus /health, /offload, /reload (recipes/workers/service.py): offloaded, the open episodes go
to a file and come back on reload, checked by digest. Each reset and step is one log line with
wall-clock start and end: a pipelined run's overlap of env and rollout is read from them.
"""

from __future__ import annotations

import sys

from recipes.grpo.reward import make_prompts, number_reward
from recipes.workers.service import BadRequest, Offloadable, identity, say, serve, stamp


def _int(body: dict, key: str, low: int = 0, high: int = 1 << 30) -> int:
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(f"{key}={value!r}: a whole number from {low} to {high}")
    return value


def main() -> int:
    name, spill = identity()
    store = Offloadable(spill, {"open": {}})  # episode id -> its prompt, until stepped

    def open_episodes() -> dict:
        assert store.state is not None  # the service answers 409 while offloaded
        return store.state["open"]

    def reset(body: dict) -> dict:
        start = stamp()
        step, stage = _int(body, "step"), _int(body, "stage")
        count, seed = _int(body, "count", 1, 1 << 16), _int(body, "seed")
        # the same prompts as the in-process task for stage 0; each stage its own draw
        prompts = make_prompts(count, seed + 7919 * stage, step)
        episodes = [{"id": f"{step}.{stage}.{i}", "prompt": p} for i, p in enumerate(prompts)]
        with store.lock:
            open_episodes().update({e["id"]: e["prompt"] for e in episodes})
        say(name, f"reset step {step} stage {stage}: {count} episode(s) [{start}, {stamp()}]")
        return {"episodes": episodes, "env": name}

    def step(body: dict) -> dict:
        start = stamp()
        episodes = body.get("episodes")
        if not isinstance(episodes, list) or not all(
            isinstance(e, dict) and isinstance(e.get("response"), str) for e in episodes
        ):
            raise BadRequest('expected {"episodes": [{"id": ..., "response": "..."}, ...]}')
        with store.lock:
            unknown = [e.get("id") for e in episodes if e.get("id") not in open_episodes()]
            if unknown:
                raise BadRequest(f"episode(s) {unknown[:3]} were not reset here (or are done)")
            for done in {e["id"] for e in episodes}:  # an episode's responses come together
                del open_episodes()[done]
        rewards = [number_reward(e["response"]) for e in episodes]
        say(name, f"step: scored {len(episodes)} response(s) [{start}, {stamp()}]")
        return {"rewards": rewards, "done": [True] * len(episodes), "env": name}

    return serve(name, store, {"/reset": reset, "/step": step})


if __name__ == "__main__":
    sys.exit(main())
