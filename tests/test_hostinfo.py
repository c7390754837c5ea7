"""cluster.device=auto: this machine's GPUs, found without importing torch."""

from __future__ import annotations

import json
import os
import stat

from launcher.node.hostinfo import count_local_gpus
from tests.areal_launch import run


def test_cuda_visible_devices_is_counted_first():
    assert count_local_gpus({"CUDA_VISIBLE_DEVICES": "0,1,2"}) == 3
    assert count_local_gpus({"CUDA_VISIBLE_DEVICES": ""}) == 0
    assert count_local_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == 0


def test_nvidia_smi_is_asked_when_cuda_visible_devices_is_unset(tmp_path, monkeypatch):
    # a STAND-IN nvidia-smi (no GPU driver here): it prints what `nvidia-smi -L` prints
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        '#!/bin/sh\n[ "$1" = -L ] || exit 2\n'
        "echo 'GPU 0: NVIDIA H200 (UUID: GPU-a)'\necho 'GPU 1: NVIDIA H200 (UUID: GPU-b)'\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert count_local_gpus({}) == 2


def test_no_gpu_anywhere_is_zero(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi on PATH
    assert count_local_gpus({}) == 0


def test_auto_plans_for_the_gpus_this_machine_shows():
    out = run(
        "plan",
        "--json",
        "actor.backend=fsdp:d2",
        "rollout.backend=vllm:d2",
        env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"},
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["cluster"] == {
        "num_nodes": 1,
        "gpus_per_node": 4,
        "device": "cuda",
    }
