"""What this machine has: its GPUs, read without importing torch (an edge: it runs a command)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Mapping, Optional

# `nvidia-smi -L`: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)" (MIG devices are indented)
_GPU_LINE = re.compile(r"GPU \d+: (?P<name>.*?)\s*(?:\(UUID: [^)]*\))?\s*\Z")


def count_local_gpus(env: Optional[Mapping[str, str]] = None) -> int:
    """GPUs visible here: CUDA_VISIBLE_DEVICES if set, else `nvidia-smi -L`, else 0."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        return len(ids)
    return len(gpu_names(_nvidia_smi_list()))


def local_gpu_names() -> tuple[str, ...]:
    """The names of this machine's GPUs ("NVIDIA H100 80GB HBM3"), for the memory table where
    NVML is absent; () without nvidia-smi or a GPU."""
    return gpu_names(_nvidia_smi_list())


def gpu_names(listing: str) -> tuple[str, ...]:
    """The GPU names of `nvidia-smi -L`'s text, one per GPU line."""
    found = (_GPU_LINE.match(line) for line in listing.splitlines())
    return tuple(m["name"] for m in found if m is not None)


def _nvidia_smi_list() -> str:
    if shutil.which("nvidia-smi") is None:
        return ""
    try:
        return subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
