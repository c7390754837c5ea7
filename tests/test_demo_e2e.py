"""The default run, for real, through `areal-launch` as `make demo` runs it (fewer steps).

A vLLM CPU server and two FSDP2 ranks on gloo: the trainers sample, score, step, push their
weights into the server and confirm it serves them. Nothing of the run may be left afterwards.
"""
from __future__ import annotations

import json
import re
import uuid

import pytest

from tests.areal_launch import run
from tests.processes import survivors, wait_until


pytestmark = [pytest.mark.vllm, pytest.mark.torch]


def test_default_run_trains_pushes_weights_and_leaves_nothing(tiny_model, tmp_path):
    tag = uuid.uuid4().hex
    run_dir = tmp_path / "run"
    out = run("recipe.steps=2", f"hydra.run.dir={run_dir}", env={"TEST_RUN_TAG": tag}, timeout=900)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    # the trainers reached the server, trained and had every reload confirmed by the server
    steps = re.findall(r"step (\d)/2 reward ([\d.]+) loss (-?[\d.]+).*reload confirmed 1/1", text)
    assert [s[0] for s in steps] == ["1", "2"], text[-4000:]
    assert "reloads confirmed 2/2" in text
    # the run folder holds the plan every process got and one log per process
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["cluster"]["device"] == "cpu"
    assert {p["name"] for p in plan["processes"]} == {"rollout-0", "actor-node0"}
    assert (run_dir / "logs" / "rollout-0.log").stat().st_size > 0
    assert "grpo done" in (run_dir / "logs" / "actor-node0.log").read_text()
    assert wait_until(lambda: not survivors(tag, run_dir), within_s=10), survivors(tag, run_dir)
