"""recipes/grpo/options.py: grpo.yaml defaults, then the plan's recipe dict, then key=value."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # recipes/ is not installed
from launcher.spec.errors import ConfigError  # noqa: E402
from launcher.trainer.runtime import plan_from_dict  # noqa: E402
from recipes.grpo.options import load_options  # noqa: E402


def rt(recipe=None):
    return plan_from_dict({"components": {}, "recipe": recipe or {}}, env={})


def test_defaults_come_from_the_recipe_yaml():
    from omegaconf import OmegaConf

    yaml = OmegaConf.load(Path(__file__).resolve().parents[1] / "launcher/conf/recipe/grpo.yaml")
    opts = load_options(rt(), [])[0]
    assert (opts.steps, opts.lr, opts.samples_per_prompt) == (
        yaml.steps,
        yaml.lr,
        yaml.samples_per_prompt,
    )
    assert opts.verify_reload is True and opts.weights_dir is None


def test_plan_recipe_then_arguments_override_defaults():
    opts, _ = load_options(rt({"steps": 5, "lr": 0.1}), ["steps=2", "recipe.verify_reload=false"])
    assert (opts.steps, opts.lr, opts.verify_reload) == (2, 0.1, False)


def test_unknown_option_is_an_error_naming_it():
    with pytest.raises(ConfigError, match="stpes"):
        load_options(rt({"stpes": 5}), [])


def test_badly_typed_argument_is_an_error_naming_it():
    with pytest.raises(ConfigError, match="steps=many"):
        load_options(rt(), ["steps=many"])
    with pytest.raises(ConfigError, match="key=value"):
        load_options(rt(), ["steps"])


def test_engine_flags_after_the_entry_are_set_aside_not_errors():
    opts, flags = load_options(
        rt(),
        ["steps=4", "--tensor-model-parallel-size", "2", "--use-distributed-optimizer", "--x=1"],
    )
    assert opts.steps == 4
    assert flags == ["--tensor-model-parallel-size", "2", "--use-distributed-optimizer", "--x=1"]
