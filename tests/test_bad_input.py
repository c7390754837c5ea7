"""Bad input, found by fault injection: each is one `error:` line that names the offending text
and the fix, exit 2, nothing started, and never a traceback or a MemoryError after a minute."""

from __future__ import annotations

import pytest

from launcher.cli.launch import counted_request, prepare
from tests.areal_launch import one_error_line, run


@pytest.mark.parametrize(
    "args, needle",
    [
        (("actor.backend=fsdp:d999999t999999",), "world size d*t*p*c = 999998000001 is more than"),
        (("actor.backend=megatron:d999999t999999p999999c999999",), "is more than the 131072 GPUs"),
        (("cluster.num_nodes=1000000000", "cluster.device=cuda"), "cluster.num_nodes=1000000000"),
        (
            ("cluster.device=cuda", "cluster.gpus_per_node=1000000", "cluster.num_nodes=2"),
            "cluster.gpus_per_node=1000000",
        ),
        (("cluster.component_placement.actor=" + "9" * 5000,), "a number far too large"),
        (("cluster.component_placement.actor=0-" + "9" * 20,), "a GPU index is too large"),
        (("launcher.grace_period_s=nan",), "launcher.grace_period_s=nan: not a finite number"),
        (("launcher.grace_period_s=inf",), "launcher.grace_period_s=inf: not a finite number"),
        (("launcher.health_timeout_s=-1",), "launcher.health_timeout_s=-1.0: must be more than 0"),
        (("rollout.health_timeout_s=1e12",), "more than 604800 s"),
        (
            (
                "launcher.base_port=65000",
                "cluster=gpu8",
                "cluster.num_nodes=80",
                "rollout.backend=vllm:d600",
                "actor=none",
            ),
            "ports past 65535",
        ),
        (("launcher.base_port=70000",), "launcher.base_port=70000"),
    ],
)
def test_a_size_without_bounds_is_one_clear_line(args, needle):
    """Refused before anything is allocated: a size taken as it comes would allocate for
    minutes (run()'s timeout); how long the refusal takes is benchmarks/bench_cli.py's."""
    line = one_error_line(run("plan", *args))
    assert needle in line


@pytest.mark.parametrize(
    "override, key",
    [
        ("actor.backend=${oc.env:NOPE_AREAL}", "actor.backend"),
        ("model_path=${oc.env:NOPE_AREAL}", "model_path"),
        ("experiment_name=${oc.env:NOPE_AREAL}", "experiment_name"),
        ("recipe.lr=${oc.env:NOPE_AREAL}", "recipe.lr"),
        ("+launcher.env.X=${oc.env:NOPE_AREAL}", "launcher.env.X"),
        ("hydra.run.dir=${nope}", "hydra.run.dir"),
    ],
)
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
        "error: unknown command 'plna' (did you mean 'plan'?)"
    )


def test_a_newline_in_a_value_keeps_the_error_on_one_line():
    line = one_error_line(run("plan", "cluster.component_placement.actor=0-2,5\nrm -rf /"))
    assert "\\n" in line  # shown escaped


def test_an_unknown_runner_option_is_an_error_for_that_runner():
    line = one_error_line(run("plan", "launcher=slurm", "launcher.partiton=gpu"))
    assert "launcher.partiton" in line


@pytest.mark.parametrize(
    "args, needle",
    [
        (("recipe.lr=nan", "--json"), "recipe.lr=nan: not a finite number"),
        (("recipe.lr=-inf",), "recipe.lr=-inf: not a finite number"),
        (("--svg", "--json"), "--svg needs a FILE, not the flag '--json'"),
    ],
)
def test_plan_output_stays_valid_and_a_flag_is_no_file_name(tmp_path, args, needle):
    """The plan JSON has no NaN (no JSON parser takes it), and `--svg --json` writes no file
    named --json."""
    assert needle in one_error_line(run("plan", *args, cwd=tmp_path))
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- issue 19
def test_an_unknown_key_in_a_whole_config_of_ones_own_is_one_line_naming_it_and_the_file(tmp_path):
    """`defaults: [config, _self_]` and a key we do not have: the closest-key search composes
    too, and its own failure once asked it again, without end (RecursionError after 20 s)."""
    (tmp_path / "mine.yaml").write_text("defaults: [config, _self_]\nseed: 1\n")
    (tmp_path / "rlinf.yaml").write_text(
        "defaults: [config, _self_]\nactor:\n  offload_everything: true\n"
    )
    assert "unknown config key 'seed' in config 'mine'" in one_error_line(
        run("plan", "-cd", str(tmp_path), "-cn", "mine")
    )
    assert "unknown config key 'actor.offload_everything' in config 'rlinf'" in one_error_line(
        run("plan", "-cd", str(tmp_path), "-cn", "rlinf")
    )


@pytest.mark.parametrize("flag", ["--cfg job", "--hydra-help", "--help", "--info config", ""])
def test_an_unknown_top_level_key_on_the_command_line_is_one_line_under_every_flag(flag):
    line = one_error_line(run(*flag.split(), "seed=1", "launcher.dry_run=true", timeout=20))
    assert "unknown config key 'seed'" in line


@pytest.mark.parametrize(
    "override, key",
    [
        ("+cluster.env.X=1", "cluster.env"),
        ("+trainer.env.X=1", "trainer.env"),
        ("+foo.bar=1", "foo"),
        ("++actor.bla=1", "actor.bla"),
        ("++foo=1", "foo"),
    ],
)
def test_a_plus_key_below_a_key_that_does_not_exist_is_unknown_not_dropped(override, key):
    """OmegaConf drops a key a dataclass does not declare when it builds it: no silence."""
    line = one_error_line(run("plan", override))
    assert f"unknown config key {key!r}" in line and "<engine>.env.*" in line


@pytest.mark.parametrize(
    "args, key",
    [
        (("critic.dtype=float16",), "critic.dtype"),
        (("+ref.env.X=1",), "ref.env"),
        (("rollout=none", "rollout.offload=true"), "rollout.offload"),
        (("teacher.mb_spec.max_tokens_per_mb=5",), "teacher.mb_spec"),
    ],
)
def test_an_option_of_an_engine_that_is_off_is_an_error(args, key):
    line = one_error_line(run("plan", *args))
    assert f"{key} is set but" in line and "is off" in line


def test_without_utf8_output_the_map_is_ascii_and_nothing_raises():
    """LANG=C in a container or a Slurm job: the GPU map's dot is `.`, a user's own text
    escaped, never a UnicodeEncodeError."""
    out = run(
        "plan",
        "cluster=gpu8",
        "rollout.backend=vllm:d2",
        "actor.backend=fsdp:d2",
        "experiment_name='r\u00e9sum\u00e9'",
        env={"PYTHONIOENCODING": "ascii"},
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "  .  " in out.stdout


@pytest.mark.parametrize("preset", ["critic=fsdp", "ref=fsdp", "teacher=megatron", "critic=archon"])
def test_a_shipped_bare_critic_ref_or_teacher_is_sized_to_the_actor_on_a_gpu_cluster(preset):
    """conf/critic/fsdp.yaml promises it: a bare critic takes the actor's world size."""
    plan = prepare(["cluster=gpu8", preset], to_run=False).plan
    name = preset.partition("=")[0]
    assert plan.components[name].alloc.world_size == plan.components["actor"].alloc.world_size


@pytest.mark.parametrize("runner", ["local", "slurm", "ray"])
def test_an_engines_own_environment_reaches_only_its_processes_under_every_runner(runner):
    """`+actor.env.NAME=value`: every runner starts the request's processes with their env."""
    prep = prepare(
        [
            f"launcher={runner}",
            "cluster.device=cpu",
            "critic=fsdp",
            "+actor.env.ONLY_ACTOR=a",
            "+rollout.env.ONLY_ROLLOUT=r",
            "+critic.env.ONLY_CRITIC=c",
            "+launcher.env.EVERY=e",
        ],
        to_run=False,
    )
    _, request = counted_request(prep)
    envs = {p.component: p.env for p in request.processes}
    assert envs["rollout"]["ONLY_ROLLOUT"] == "r" and "ONLY_ACTOR" not in envs["rollout"]
    trainer = envs["actor,critic"]  # one torchrun job for the collocated critic
    assert trainer["ONLY_ACTOR"] == "a" and trainer["ONLY_CRITIC"] == "c"
    assert "ONLY_ROLLOUT" not in trainer and all(e["EVERY"] == "e" for e in envs.values())


def test_an_engines_own_environment_shows_in_the_dry_run(tmp_path):
    out = run("launcher.dry_run=true", "+actor.env.ONLY_ACTOR=yes", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    trainer = next(line for line in out.stdout.splitlines() if "AREAL_COMPONENT=actor" in line)
    assert "ONLY_ACTOR=yes" in trainer and list(tmp_path.iterdir()) == []


def test_a_planned_cluster_is_not_called_this_machine():
    """cluster=gpu8 on a machine with no GPU: the advice names the local runner's GPUs."""
    line = one_error_line(
        run("plan", "cluster=gpu8", "rollout.backend=vllm:d4", "actor.backend=fsdp:d16")
    )
    assert "this machine" not in line and "on 8 GPU(s) with the local runner" in line


@pytest.mark.parametrize(
    "value, says",
    [
        ("time_limit=nope", "not a Slurm time"),
        ("time_limit=99:99:99", "below 60"),
        ("mem_per_gpu=lots", "not a Slurm size"),
        ("cpus_per_gpu=-1", "choose 1 to 1024"),
        ("mem_per_gpu=64G", "asks Slurm for no GPU"),
    ],
)
def test_a_slurm_value_sbatch_would_refuse_fails_the_dry_run(tmp_path, value, says):
    line = one_error_line(
        run(
            "launcher=slurm",
            "launcher.dry_run=true",
            "cluster.device=cpu",
            f"launcher.{value}",
            cwd=tmp_path,
        )
    )
    assert f"launcher.{value.partition('=')[0]}" in line and says in line
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_that_fails_its_rehearsal_writes_nothing(tmp_path):
    """Hydra's sweeper writes multirun.yaml before the launcher rehearses the first point."""
    (tmp_path / "multirun").mkdir()  # the user's: stays
    line = one_error_line(
        run(
            "-m",
            "launcher=slurm",
            "launcher.dry_run=true",
            "cluster.device=cpu",
            "launcher.time_limit=1:00:00,nope",
            cwd=tmp_path,
        )
    )
    assert "sweep point 1" in line and "nothing was started" in line
    assert [p.name for p in tmp_path.rglob("*")] == ["multirun"]


@pytest.mark.parametrize(
    "args",
    [
        ("launcher.dry_run=true", "experiment_name=" + "x" * 300),
        ("plan", "trial_name=" + "y" * 256),
        ("-m", "launcher.dry_run=true", "trial_name=a," + "z" * 300),
    ],
)
def test_a_run_folder_name_longer_than_a_file_name_may_be_is_one_line(tmp_path, args):
    line = one_error_line(run(*args, cwd=tmp_path))
    assert "more than the 255 a file name may have" in line and list(tmp_path.iterdir()) == []


def test_help_and_hydra_help_list_each_groups_options():
    """Each group's options, from one copy of the config repository the groups share (each
    ask copied it whole, 2 s each: how long help takes is benchmarks/bench_cli.py's)."""
    for flag, group in (
        ("--help", "rollout: none, sglang, vllm"),
        ("--hydra-help", "hydra/launcher: areal"),
    ):
        out = run(flag)
        assert out.returncode == 0 and group in out.stdout, out.stderr


@pytest.mark.parametrize("value", ["\x1c", "a\rb", "x\u2028y", "\x1aT\x8d#"])
def test_a_control_character_in_a_value_cannot_break_the_error_line(value):
    """Found by tests/test_any_input.py: \\x1c and \\u2028 are line breaks to splitlines."""
    line = one_error_line(run("plan", f"trainer.entry={value}"))
    assert line.isprintable()


@pytest.mark.parametrize(
    "args",
    [("--cfg", "job", "--resolve"), ("--help", "--resolve"), ("-m", "launcher.dry_run=true")],
)
def test_an_interpolation_that_fails_is_one_line_under_every_flag(tmp_path, args):
    line = one_error_line(run(*args, "model_path=${oc.env:NOPE_AREAL}", cwd=tmp_path))
    assert line.startswith("error: model_path: cannot resolve") and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "overrides, start, needle",
    [
        # Hydra names the override it failed on: that one is blamed, not an earlier list
        (
            ["actor.extra_args=[--lr,1]", "trainer.args=[--config,x.yaml,lr=1]"],
            "cannot parse override 'trainer.args=[--config,x.yaml,lr=1]'",
            "type \"trainer.args=['--config','x.yaml','lr=1']\"",
        ),
        # the shell split `trainer.args=[--config x.yaml]` at its space
        (
            ["trainer.args=[--config", "x.yaml]"],
            "cannot parse override 'trainer.args=[--config'",
            "trainer.args is a list of strings, one argument: 'trainer.args=[--config,...]'",
        ),
        (
            ["trainer.args=--config"],
            "invalid value in 'trainer.args=--config'",
            "trainer.args is a list of strings: write trainer.args=[--config,...]",
        ),
    ],
)
def test_a_list_of_strings_written_wrong_names_its_key_and_how_to_write_it(
    overrides, start, needle
):
    from launcher.spec.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        prepare(overrides, to_run=False)
    assert str(err.value).startswith(start) and needle in str(err.value)
