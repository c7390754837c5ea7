"""Every plan says, for every GPU, what each engine on it needs and whether it fits; a plan that
does not fit is refused before anything starts with the smallest change that fits; `plan
--suggest` prints layouts that fit as commands that plan (and fit) as they are."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from tests.areal_launch import one_error_line, run
from tests.model_configs import MODELS


@pytest.fixture(scope="module")
def qwen8b(tmp_path_factory) -> str:
    """A model folder with Qwen3-8B's published config.json (the weights are never read)."""
    folder = tmp_path_factory.mktemp("Qwen3-8B")
    (folder / "config.json").write_text(json.dumps(MODELS["Qwen3-8B"]["config"]))
    return str(folder)


def on_h100(model: str, *args: str) -> list[str]:
    return ["plan", f"model_path={model}", "cluster=gpu8", "cluster.gpu_type=h100", *args]


def test_the_plan_json_has_every_gpu_and_every_engines_parts(qwen8b):
    out = run(
        *on_h100(
            qwen8b,
            "--json",
            "rollout.backend=sglang:d4",
            "actor.backend=fsdp:d4",
            "actor.gradient_checkpointing=true",
        )
    )
    assert out.returncode == 0, out.stderr
    memory = json.loads(out.stdout)["memory"]
    assert memory["gpu_capacity_gib"] == 79.11 and memory["fits"] is True
    assert memory["capacity_source"] == "table: h100"
    assert [g["gpu"] for g in memory["gpus"]] == list(range(8))
    rollout = memory["gpus"][0]
    assert rollout["node"] == 0 and list(rollout["engines"]) == ["rollout"]
    assert rollout["total_gib"] == pytest.approx(sum(rollout["engines"].values()), abs=0.02)
    parts = memory["engines"]["actor"]["parts"]
    for name in ("weights", "grads", "optimizer", "activations", "overhead"):
        assert name in parts
    assert memory["engines"]["rollout"]["parts"]["kv_cache"] > 0


def test_the_table_and_the_map_show_gib_against_the_capacity(qwen8b, tmp_path):
    out = run(
        *on_h100(
            qwen8b,
            "rollout.backend=sglang:d4",
            "actor.backend=fsdp:d4",
            "actor.gradient_checkpointing=true",
            "--svg",
            str(tmp_path / "m.svg"),
        )
    )
    assert out.returncode == 0, out.stderr
    assert "GiB/GPU" in out.stdout and "  GiB " in out.stdout
    assert "memory: fits: the fullest GPU needs" in out.stdout and "of 79.1 GiB" in out.stdout
    assert (tmp_path / "m.svg").read_text().count(" GiB</text>") == 8


# refused at the estimate's low end: 16384 tokens without checkpointing (10240 only may not fit)
TOO_BIG = (
    "rollout.backend=sglang:d4",
    "actor.backend=fsdp:d4",
    "actor.mb_spec.max_tokens_per_mb=16384",
)


def test_a_plan_that_does_not_fit_is_refused_with_the_smallest_change_that_fits(qwen8b):
    args = on_h100(qwen8b, *TOO_BIG)
    line = one_error_line(run(*args))
    assert line.startswith("error: does not fit: ") and "actor" in line
    assert "smallest change that fits: actor.gradient_checkpointing=true" in line
    fix = line.split("smallest change that fits: ")[1].split(" (")[0].split(";")[0]
    assert run(*args, *shlex.split(fix)).returncode == 0  # the fix is a real override


def test_a_plan_that_may_not_fit_starts_with_one_warning_naming_the_term_and_shows_the_range(
    qwen8b,
):
    """Without checkpointing at 10240 tokens the actor fits at the estimate's low end, not at
    its high end: said, not refused; the table, the memory line and the JSON carry the range."""
    args = on_h100(qwen8b, "rollout.backend=sglang:d4", "actor.backend=fsdp:d4")
    out = run(*args)
    assert out.returncode == 0, out.stderr
    warned = [ln for ln in out.stderr.splitlines() if "may not fit" in ln]
    assert len(warned) == 1 and warned[0].startswith("warning: GPU 4 (node 0) may not fit: ")
    assert "the range of actor's activations decides" in warned[0]
    assert warned[0].endswith("to be sure it fits: actor.gradient_checkpointing=true")
    assert re.search(r"actor .*│ +\d+\.\d \(\d+\.\d-\d+\.\d\) │", out.stdout), out.stdout
    assert re.search(
        r"memory: may not fit: the fullest GPU needs [\d.]+ GiB \([\d.]+-[\d.]+ by the "
        r"estimate's range\) of 79\.1 GiB",
        out.stdout,
    ), out.stdout
    memory = json.loads(run(*args, "--json").stdout)["memory"]
    assert memory["fits"] is True and memory["sure"] is False
    assert [r["term"] for r in memory["risks"]] == ["activations"]
    low, high = memory["engines"]["actor"]["range_gib"]
    assert low < memory["engines"]["actor"]["per_gpu_gib"] < high


def test_check_memory_warn_says_it_and_off_does_not_look(qwen8b):
    args = on_h100(qwen8b, *TOO_BIG)
    warned = run(*args, "launcher.check_memory=warn")
    assert warned.returncode == 0 and "warning: does not fit:" in warned.stderr
    off = run(*args, "launcher.check_memory=off", "--json")
    assert off.returncode == 0 and "memory" not in json.loads(off.stdout)


def test_a_model_without_config_json_leaves_memory_unknown_with_one_warning(tmp_path):
    out = run("plan", f"model_path={tmp_path}", "cluster=gpu8", "cluster.gpu_type=h100")
    assert out.returncode == 0
    warnings = [ln for ln in out.stderr.splitlines() if ln.startswith("warning: memory unknown")]
    assert warnings == [
        f"warning: memory unknown: no config.json at {tmp_path} here, so no GPU is checked"
    ]


@pytest.mark.parametrize("value", ["abc", "1e9", "-3"])
def test_a_gpu_memory_that_is_not_one_is_one_line(qwen8b, value):
    assert "cluster.gpu_memory_gib" in one_error_line(
        run(*on_h100(qwen8b, f"cluster.gpu_memory_gib={value}"))
    )


def test_suggest_prints_commands_that_plan_and_fit_as_they_are(qwen8b):
    out = run(*on_h100(qwen8b, "--suggest", "cluster.num_nodes=2"))
    assert out.returncode == 0, out.stderr
    commands = [ln for ln in out.stdout.splitlines() if ln.startswith("areal-launch ")]
    assert 1 <= len(commands) <= 5
    assert "sqrt(generation x training tokens)" in out.stdout.splitlines()[0]
    for command in commands:
        words = shlex.split(command)[1:]
        assert f"model_path={qwen8b}" in words  # the user's own overrides are kept
        planned = run("plan", *words, "--json")
        assert planned.returncode == 0, (command, planned.stderr)
        assert json.loads(planned.stdout)["memory"]["fits"] is True


def test_suggest_needs_the_gpu_memory(qwen8b):
    assert "cluster.gpu_memory_gib" in one_error_line(
        run("plan", "--suggest", f"model_path={qwen8b}", "cluster=gpu8")
    )
