"""actor.fsdp.* and actor.offload.* reach the trainers: the FSDP2 settings are read back from the
live model (the dtype the first attention projection computes in, whether its layer is sharded
again when the forward ends) and written to ranks/<rank>.json; offload on cpu is a no-op the
recipe says once."""

from __future__ import annotations

import json

import pytest

from tests.areal_launch import one_error_line, run


@pytest.mark.torch
@pytest.mark.parametrize("backend", ["fsdp:d2", "fsdp:d1t2"])
def test_mixed_precision_and_reshard_after_forward_are_what_the_model_does(
    backend, tmp_path, tiny_model
):
    out = run(
        "rollout=none",
        f"actor.backend={backend}",
        "recipe.steps=1",
        "actor.fsdp.mixed_precision=bf16",
        "actor.fsdp.reshard_after_forward=false",
        "actor.offload.weight=true",
        "actor.offload.optimizer=true",
        f"hydra.run.dir={tmp_path}/run",
        timeout=600,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    for path in sorted((tmp_path / "run" / "ranks").glob("*.json")):
        assert json.loads(path.read_text())["fsdp"] == {
            "dtype": "bfloat16",
            "resharded_after_forward": False,
        }, path.name
    said = [ln for ln in text.splitlines() if "actor.offload" in ln]
    assert (
        len(said) == 1
        and "actor.offload.weight, actor.offload.optimizer: nothing to do on cpu" in said[0]
    ), said
    assert "grpo done: steps 1" in text


def test_mixed_precision_the_recipe_does_not_know_is_one_line_at_plan_time(tmp_path):
    line = one_error_line(
        run(
            "rollout=none",
            "recipe.steps=1",
            "actor.fsdp.mixed_precision=fp8",
            f"hydra.run.dir={tmp_path}/run",
        )
    )
    assert line.startswith("error: actor.fsdp.mixed_precision=fp8: choose bf16 or fp16")
    assert not (tmp_path / "run").exists()
