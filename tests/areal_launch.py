"""`areal-launch` as a user runs it: the installed console script, in a real subprocess.

The environment hides any GPU (CUDA_VISIBLE_DEVICES="") unless a test says otherwise, so plans
come out the same on every machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
EXE = str(Path(sys.executable).parent / "areal-launch")


def run(
    *args: str, env: Optional[dict] = None, cwd: Optional[Path] = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    return subprocess.run(
        [EXE, *args], capture_output=True, text=True, env=full_env, cwd=cwd or ROOT, timeout=timeout
    )


def one_error_line(out: subprocess.CompletedProcess) -> str:
    """The promise for bad input: exit 2, nothing on stdout, one `error:` line on stderr."""
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), out.stderr
    return lines[0]


def prepared_in(folder: Path, name: str, overrides: Sequence[str] = ()):
    """`prepare` (plan only) of the config `name` in `folder` (-cd folder -cn name)."""
    from launcher.cli.launch import prepare
    from launcher.config.compose import Composer, ConfigSource

    composer = Composer(ConfigSource(config_dir=str(folder), config_name=name))
    return prepare(list(overrides), to_run=False, composer=composer)
