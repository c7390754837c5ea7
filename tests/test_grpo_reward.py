"""recipes/grpo/reward.py: the demo task's prompts, reward and GRPO advantages."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # recipes/ is not installed
from recipes.grpo.reward import group_advantages, make_prompts, number_reward  # noqa: E402


def test_reward_is_the_share_of_words_holding_a_number():
    assert number_reward("one two three") == 1.0
    assert number_reward("one cat two dogs") == 0.5
    assert number_reward("xxsevenyy") == 1.0
    assert number_reward("no digits here") == 0.0
    assert number_reward("") == 0.0


def test_prompts_are_the_same_for_the_same_seed_and_step_only():
    assert make_prompts(8, seed=1, step=2) == make_prompts(8, seed=1, step=2)
    assert make_prompts(8, seed=1, step=2) != make_prompts(8, seed=1, step=3)
    assert all(p.startswith("count: ") for p in make_prompts(8, seed=1, step=2))


def test_advantages_are_normalised_within_each_prompt_group():
    adv = group_advantages([0.0, 1.0, 0.5, 0.5], group_size=2)
    assert adv[0] == pytest.approx(-1.0, abs=1e-4) and adv[1] == pytest.approx(1.0, abs=1e-4)
    assert adv[2:] == [0.0, 0.0]  # a group with one reward teaches nothing


def test_advantages_refuse_a_batch_that_is_not_whole_groups():
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages([0.0] * 4, group_size=3)
