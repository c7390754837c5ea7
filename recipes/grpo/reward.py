"""The demo's task and its rule-based reward: stdlib only, so it is testable without torch.

Task: continue a count. Reward: the share of the completion's words that are number words
("zero" .. "ten"). The tiny model's tokenizer holds every number word as a token of its own, so
a random policy already says one now and then and a few policy-gradient steps raise the rate:
a signal that moves on two CPU cores in seconds, which is all a demo of the loop needs.
"""

from __future__ import annotations

import random
import re

# the words the tiny model's tokenizer holds as tokens of their own: one home, the model's
from launcher.trainer.tiny_model import NUMBER_WORDS

_NUMBER = re.compile(r"(?:%s)" % "|".join(NUMBER_WORDS))
_WORD = re.compile(r"\S+")


def number_reward(text: str) -> float:
    """Fraction of whitespace-separated words that contain a number word, in [0, 1]."""
    words = _WORD.findall(text)
    if not words:
        return 0.0
    return sum(1 for w in words if _NUMBER.search(w)) / len(words)


def make_prompts(count: int, seed: int, step: int) -> list[str]:
    """`count` counting prompts, different each step, the same for the same (seed, step)."""
    rng = random.Random(seed * 100_003 + step)
    prompts = []
    for _ in range(count):
        start = rng.randrange(0, len(NUMBER_WORDS) - 3)
        shown = rng.randrange(1, 4)
        prompts.append("count: " + " ".join(NUMBER_WORDS[start : start + shown]))
    return prompts


def group_advantages(rewards: list[float], group_size: int, eps: float = 1e-6) -> list[float]:
    """GRPO: each reward minus its prompt group's mean, over the group's std (+eps)."""
    if group_size <= 0 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    out: list[float] = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start : start + group_size]
        mean = sum(group) / len(group)
        std = (sum((r - mean) ** 2 for r in group) / len(group)) ** 0.5
        out += [(r - mean) / (std + eps) for r in group]
    return out
