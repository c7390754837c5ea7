"""Which policy this trainer job trains, read from the plan instead of the names "actor" and
"rollout": its component ($AREAL_COMPONENT: actor, actor2, ...) and the serving component it
feeds (the plan's weight_sync whose source it is). Stdlib only.

A second policy's own files (weights, checkpoints, rank records, heartbeats) go to
`<run folder>/<component>/`, so two policies in one run never write the same file; the actor's
stay where they were.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from launcher.trainer.runtime import ENV_RUN_DIR, RuntimePlan

HELPERS = ("ref", "critic", "teacher")  # run inside the actor job by this recipe
INFERENCE = "inference"  # RLinf's forward-only copy of the actor (recipes/grpo/inference.py)


@dataclass(frozen=True)
class Policy:
    train: str  # the training component this job is
    serve: Optional[str]  # the serving component it pushes to; None: it samples itself


def job_role(rt: RuntimePlan) -> Optional[str]:
    """The component this job runs for the recipe: a policy it trains, `inference`, or None
    (a helper engine or nothing this recipe starts)."""
    for name in rt.components():
        if not rt.has_component(name) or rt.component(name).get("kind") != "train":
            continue
        if name not in HELPERS:
            return name
    return None


def of(rt: RuntimePlan, train: str = "actor") -> Policy:
    """`train` and what it feeds: the weight_sync destination, else the built-in rollout."""
    fed = [w.dst for w in rt.plan.weight_sync if w.src == train]
    serve = (
        fed[0] if fed else ("rollout" if train == "actor" and rt.has_component("rollout") else None)
    )
    return Policy(train, serve)


def scoped(rt: RuntimePlan, name: str) -> RuntimePlan:
    """The runtime whose run folder is `<run>/<name>` for any component but the actor."""
    run_dir = rt.run_dir()
    if name == "actor" or not run_dir:
        return rt
    own = Path(run_dir) / name
    own.mkdir(parents=True, exist_ok=True)
    return dataclasses.replace(rt, env={**rt.env, ENV_RUN_DIR: str(own)}, _beat={}, _read={})
