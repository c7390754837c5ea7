"""RLinf's `reward` worker as the project ships it: an HTTP reward service scoring completions
with the demo task's rule (recipes/grpo/reward.py), so a run with a `reward` worker scores
exactly as one without. Stdlib only: no torch.

  POST /score {"texts": [...]} -> {"rewards": [...], "scorer": "reward-0"}
plus /health, /offload, /reload (recipes/workers/service.py). Each call is one log line (how
many it scored, wall-clock start and end), so a run's logs show the scoring spread over the
processes.
"""

from __future__ import annotations

import sys

from recipes.grpo.reward import NUMBER_WORDS, number_reward
from recipes.workers.service import BadRequest, Offloadable, identity, say, serve, stamp


def main() -> int:
    name, spill = identity()
    store = Offloadable(spill, {"rule": "number_words", "words": list(NUMBER_WORDS), "scored": 0})

    def score(body: dict) -> dict:
        texts = body.get("texts")
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise BadRequest('expected {"texts": ["...", ...]}')
        start = stamp()
        rewards = [number_reward(t) for t in texts]
        with store.lock:
            if store.state is not None:
                store.state["scored"] += len(texts)
        say(name, f"scored {len(texts)} completion(s) [{start}, {stamp()}]")
        return {"rewards": rewards, "scorer": name}

    return serve(name, store, {"/score": score})


if __name__ == "__main__":
    sys.exit(main())
