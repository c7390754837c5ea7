"""Real plans from plain values, for tests of what entry points read from them (no CLI)."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from launcher.config.schema import LaunchConfig
from launcher.planning.build import build_plan
from launcher.runners import local

FIXED = {"rollout.backend": "vllm:d1", "actor.backend": "fsdp:d2"}  # not sized for a machine


def config(**dotted: Any) -> LaunchConfig:
    """The typed config with `dotted` values (dict values replace whole sections)."""
    cfg = OmegaConf.structured(LaunchConfig(launcher=local.Config(), recipe={}))
    for key, value in {**FIXED, **dotted}.items():
        OmegaConf.update(cfg, key, value, merge=False)
    spec = OmegaConf.to_object(cfg)
    assert isinstance(spec, LaunchConfig)
    return spec


def plan_dict(**dotted: Any) -> dict:
    """The plan JSON (as a dict) the launcher builds for `dotted`, no GPU visible."""
    return build_plan(config(**dotted), local_gpus=0).plan.to_dict()
