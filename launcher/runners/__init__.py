"""Runners: the only part of the launcher that starts processes (DESIGN §8).

local: this machine (local.supervise, ports.PortReserver, keeper). slurm: one sbatch script per
run. Names are imported on first use, so importing the slurm runner does not load the local one.
"""
from importlib import import_module
from typing import Any

_HOME = {"RunResult": "local", "dry_run_text": "local", "supervise": "local",
         "write_plan": "local", "PortReserver": "ports"}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'launcher.runners' has no attribute {name!r}")
    return getattr(import_module(f"launcher.runners.{_HOME[name]}"), name)
