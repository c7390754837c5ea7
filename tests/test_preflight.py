"""Ready to run before anything starts: each process's interpreter finds what it runs, the
model folder exists, and the trainer entry exists (also from an installed, non-editable
package): otherwise one line that says what to install, and nothing is started."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from launcher.node.preflight import declared_requires, problems
from launcher.spec.process import ProcessSpec
from launcher.spec.request import materialize
from tests.areal_launch import ROOT, one_error_line, run

CORE = ROOT / ".venv-core"  # `make test` builds it: `pip install -e .` and nothing else


def proc(python: str, *argv: str, name: str = "rollout-0"):
    spec = ProcessSpec(name, "rollout", "server", 0, (python, *argv))
    return materialize(spec, ["127.0.0.1"], None, "cpu", "r")


def test_a_module_the_interpreter_cannot_find_is_named_with_what_to_install():
    bare = str(CORE / "bin" / "python") if CORE.exists() else "/usr/bin/python3"
    said = problems([proc(bare, "-m", "vllm.entrypoints.openai.api_server")], [])
    assert len(said) == 1
    assert said[0].startswith(f"rollout-0 needs 'vllm', which {bare} cannot import")
    assert "pip install 'areal-launch[cpu]'" in said[0]


@pytest.mark.torch
def test_what_the_interpreter_finds_passes():
    assert problems([proc(sys.executable, "-m", "torch.distributed.run", "x.py")], []) == []


def test_a_recipe_declares_what_its_trainers_import():
    assert declared_requires(ROOT / "recipes" / "grpo" / "train.py") == [
        "torch",
        "transformers",
        "safetensors",
    ]


def test_a_missing_folder_the_run_reads_is_named(tmp_path):
    assert problems([], [str(tmp_path / "nope")]) == [
        f"{tmp_path / 'nope'} does not exist here (the run reads it)"
    ]


def test_a_model_that_is_not_here_stops_the_launch_before_anything_starts(tmp_path):
    line = one_error_line(run(f"model_path={tmp_path}/no-model", f"hydra.run.dir={tmp_path}/r"))
    assert line.startswith(
        f"error: not ready to run: {tmp_path}/no-model does not exist here (the run reads it)"
    )
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(
    not (CORE / "bin" / "areal-launch").exists(), reason="no .venv-core (make test builds it)"
)
def test_after_a_core_only_install_the_launch_says_what_to_install_and_starts_nothing(tmp_path):
    out = subprocess.run(
        [str(CORE / "bin" / "areal-launch"), f"hydra.run.dir={tmp_path}/r"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    line = one_error_line(out)
    assert line.startswith("error: not ready to run: rollout-0 needs 'vllm'")
    assert "areal-launch[cpu]" in line and "(and 4 more)" in line  # torch, ..., tensorboardX
    assert not (tmp_path / "r").exists()
