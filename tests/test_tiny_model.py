"""launcher.trainer.tiny_model: the demo's model, built locally, complete or absent, reused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.trainer.tiny_model import MARKER, default_path, ensure, is_built

ROOT = Path(__file__).resolve().parents[1]
PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").is_dir() else sys.executable


def build(out: Path, *args: str) -> str:
    proc = subprocess.run(
        [PYTHON, "-m", "launcher.trainer.tiny_model", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_default_folder_follows_areal_tiny_model(monkeypatch, tmp_path):
    monkeypatch.setenv("AREAL_TINY_MODEL", str(tmp_path / "m"))
    assert default_path() == tmp_path / "m"


@pytest.mark.torch
def test_built_model_has_vllm_cpu_head_size_and_a_chat_template(tmp_path):
    out = tmp_path / "tiny"
    assert "built" in build(out)
    assert "reused" in build(out)
    config = json.loads((out / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] == config["head_dim"] == 32
    assert is_built(out) and (out / "model.safetensors").is_file()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat.endswith("assistant:")
    assert len(tok(" seven", add_special_tokens=False).input_ids) == 1  # the reward's words


@pytest.mark.torch
def test_complete_model_is_reused_and_a_partial_one_rebuilt(tmp_path):
    out = ensure(tmp_path / "tiny")
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    ensure(out)
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    (out / MARKER).unlink()  # as if a build had died before its last file
    ensure(out)
    assert is_built(out) and (out / "model.safetensors").stat().st_mtime_ns != stamp
    assert not list(tmp_path.glob(".tiny.*"))  # no staging folder left behind


@pytest.mark.torch
def test_seed_gives_other_weights_and_force_rebuilds(tmp_path):
    a, b = ensure(tmp_path / "a"), ensure(tmp_path / "b", seed=1)
    assert (a / "model.safetensors").read_bytes() != (b / "model.safetensors").read_bytes()
    ensure(a, seed=1, force=True)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
