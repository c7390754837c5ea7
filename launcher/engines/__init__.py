"""Engines turn plan entries into ProcessSpecs: one module per backend.

PLACEHOLDER contract (being written): see LaunchContext and build_processes below.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class LaunchContext:
    """What engines need beyond the plan, supplied by the runner (the only I/O-aware part).

    next_port: returns a fresh port each call (local runner: reserved and locked; plan dry
    runs: counts up from a base). host(node): the address of node k (local: 127.0.0.1;
    slurm: a placeholder the script fills from `scontrol show hostnames`).
    """

    run_dir: str
    plan_path: str
    python: str  # interpreter for `python -m ...` entry points (the venv's)
    next_port: Callable[[], int]
    host: Callable[[int], str] = lambda node: "127.0.0.1"
    extra_env: dict[str, str] = field(default_factory=dict)
