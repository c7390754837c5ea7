"""What this machine has: its GPUs, read without importing torch (an edge: it runs a command)."""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Mapping, Optional


def count_local_gpus(env: Optional[Mapping[str, str]] = None) -> int:
    """GPUs visible here: CUDA_VISIBLE_DEVICES if set, else `nvidia-smi -L`, else 0."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        return len(ids)
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))
