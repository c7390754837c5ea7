"""Bad input, found by fault injection: each is one `error:` line that names the offending text
and the fix, exit 2, nothing started, and never a traceback or a MemoryError after a minute."""
from __future__ import annotations

import time

import pytest

from tests.areal_launch import one_error_line, run


@pytest.mark.parametrize("args, needle", [
    (("actor.backend=fsdp:d999999t999999",), "world size d*t*p*c = 999998000001 is more than"),
    (("actor.backend=megatron:d999999t999999p999999c999999",), "is more than the 131072 GPUs"),
    (("cluster.num_nodes=1000000000", "cluster.device=cuda"), "cluster.num_nodes=1000000000"),
    (("cluster.device=cuda", "cluster.gpus_per_node=1000000", "cluster.num_nodes=2"),
     "cluster.gpus_per_node=1000000"),
    (("cluster.component_placement.actor=" + "9" * 5000,), "a number far too large"),
    (("cluster.component_placement.actor=0-" + "9" * 20,), "a GPU index is too large"),
    (("launcher.grace_period_s=nan",), "launcher.grace_period_s=nan: not a finite number"),
    (("launcher.grace_period_s=inf",), "launcher.grace_period_s=inf: not a finite number"),
    (("launcher.health_timeout_s=-1",), "launcher.health_timeout_s=-1.0: must be more than 0"),
    (("rollout.health_timeout_s=1e12",), "more than 604800 s"),
    (("launcher.base_port=65000", "cluster=gpu8", "cluster.num_nodes=80",
      "rollout.backend=vllm:d600", "actor=none"), "ports past 65535"),
    (("launcher.base_port=70000",), "launcher.base_port=70000"),
])
def test_a_size_without_bounds_is_one_clear_line_in_milliseconds(args, needle):
    begun = time.monotonic()
    line = one_error_line(run("plan", *args))
    assert needle in line
    assert time.monotonic() - begun < 10  # the CLI's start-up; never a minute of allocation


@pytest.mark.parametrize("override, key", [
    ("actor.backend=${oc.env:NOPE_AREAL}", "actor.backend"),
    ("model_path=${oc.env:NOPE_AREAL}", "model_path"),
    ("experiment_name=${oc.env:NOPE_AREAL}", "experiment_name"),
    ("recipe.lr=${oc.env:NOPE_AREAL}", "recipe.lr"),
    ("+launcher.env.X=${oc.env:NOPE_AREAL}", "launcher.env.X"),
    ("hydra.run.dir=${nope}", "hydra.run.dir"),
])
def test_an_interpolation_that_fails_is_one_line_naming_the_key(override, key):
    line = one_error_line(run("plan", override))
    assert line.startswith(f"error: {key}: cannot resolve")


def test_an_environment_variable_interpolation_says_how_to_give_a_default():
    assert "${oc.env:NAME,default}" in one_error_line(run("plan", "model_path=${oc.env:NOPE}"))


def test_a_typo_behind_plus_is_an_unknown_key_with_the_closest_one():
    line = one_error_line(run("plan", "+actor.backnd=fsdp:d8"))
    assert "unknown config key 'actor.backnd'" in line and "'actor.backend'" in line


def test_removing_an_engine_with_tilde_points_to_none():
    assert "write actor=none" in one_error_line(run("plan", "~actor"))


def test_plus_on_a_key_that_exists_says_to_drop_the_plus():
    assert "without the leading +" in one_error_line(run("plan", "+actor.backend=fsdp:d2"))


def test_a_recipe_option_typo_is_caught_at_plan_time_with_the_closest_key():
    line = one_error_line(run("plan", "recipe.stpes=3"))
    assert "unknown config key 'recipe.stpes'" in line and "'recipe.steps'" in line


def test_a_badly_typed_recipe_option_is_caught_at_plan_time():
    assert "recipe.steps" in one_error_line(run("plan", "recipe.steps=many"))


def test_a_mistyped_command_is_named_with_the_closest_one():
    assert one_error_line(run("plna")).startswith(
        "error: unknown command 'plna' (did you mean 'plan'?)")


def test_a_newline_in_a_value_keeps_the_error_on_one_line():
    line = one_error_line(run("plan", "cluster.component_placement.actor=0-2,5\nrm -rf /"))
    assert "\\n" in line  # shown escaped


def test_an_unknown_runner_option_is_an_error_for_that_runner():
    line = one_error_line(run("plan", "launcher=slurm", "launcher.partiton=gpu"))
    assert "launcher.partiton" in line


@pytest.mark.parametrize("args, needle", [
    (("recipe.lr=nan", "--json"), "recipe.lr=nan: not a finite number"),
    (("recipe.lr=-inf",), "recipe.lr=-inf: not a finite number"),
    (("--svg", "--json"), "--svg needs a FILE, not the flag '--json'"),
])
def test_plan_output_stays_valid_and_a_flag_is_no_file_name(tmp_path, args, needle):
    """The plan JSON has no NaN (no JSON parser takes it), and `--svg --json` writes no file
    named --json."""
    assert needle in one_error_line(run("plan", *args, cwd=tmp_path))
    assert list(tmp_path.iterdir()) == []
