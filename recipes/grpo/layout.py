"""The plan is the contract: a trainer's live groups must be the plan's, and each rank says
which layout actually trained. Stdlib only (the groups and shapes come in as plain lists).

Both recipes (FSDP2 + tensor parallel, Megatron-core) read their groups back from what they
built (the DeviceMesh, Megatron's parallel state), compare them with the plan's through
launcher.trainer.runtime, and write `<run folder>/ranks/<rank>.json` with the coordinates read from
the live mesh and the shapes of one attention projection weight.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Optional

from launcher.trainer.runtime import AXES, EXPERT_AXES, RuntimePlan


class LayoutMismatch(RuntimeError):
    """The trainer's groups are not the plan's; the message is one line naming rank and axis."""


@dataclass(frozen=True)
class WeightShard:
    """What one rank holds of one weight: its shape, the full tensor's, where it starts in the
    full tensor, and a digest of its bytes (tp ranks of one dp group must differ)."""

    name: str
    local_shape: list[int]
    full_shape: list[int]
    offset: list[int]
    sha256: str


def plan_groups(
    rt: RuntimePlan, rank: int, axes: tuple[str, ...], engine: str = "actor"
) -> dict[str, list[int]]:
    """The plan's group of `rank` on each axis (dense axes and Megatron's expert axes)."""
    return {
        axis: (
            rt.expert_group(axis, rank, engine)
            if axis in EXPERT_AXES
            else rt.group(axis, rank, engine)
        )
        for axis in axes
    }


def mismatches(
    rt: RuntimePlan,
    rank: int,
    live_groups: Mapping[str, list[int]],
    live_coords: Mapping[str, int],
    source: str,
    engine: str = "actor",
) -> list[str]:
    """One line per axis where the live groups or coordinates differ from the plan's, e.g.
    `rank 3: tp group [2, 3] from the mesh, the plan says [1, 3]`."""
    out = []
    expected = plan_groups(rt, rank, tuple(live_groups), engine)
    for axis, live in live_groups.items():
        if list(live) != expected[axis]:
            out.append(
                f"rank {rank}: {axis} group {list(live)} from {source}, "
                f"the plan says {expected[axis]}"
            )
    planned = rt.coords(rank, engine)
    for axis, value in live_coords.items():
        if axis in AXES and value != planned[axis]:
            out.append(
                f"rank {rank}: {axis} coordinate {value} from {source}, "
                f"the plan says {planned[axis]}"
            )
    return out


def world_mismatch(rt: RuntimePlan, rank: int, world: int, engine: str = "actor") -> Optional[str]:
    """A line when torchrun started another number of workers than the plan has ranks."""
    planned = rt.world_size(engine)
    if world != planned:
        return (
            f"rank {rank}: torchrun started {world} workers, the plan's {engine} has "
            f"{planned} ranks"
        )
    return None


def write_rank_record(
    run_dir: str,
    rank: int,
    coords: Mapping[str, int],
    weight: WeightShard,
    extra: Optional[Mapping[str, object]] = None,
) -> Path:
    """`<run_dir>/ranks/<rank>.json`: coordinates as the live mesh has them, and one weight's
    shard; written whole (temporary name, then rename) so a reader never sees half of it."""
    folder = Path(run_dir) / "ranks"
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "rank": rank,
        **{axis: int(coords[axis]) for axis in ("dp", "tp", "pp", "cp")},
        "weight": asdict(weight),
        **dict(extra or {}),
    }
    path = folder / f"{rank}.json"
    staging = folder / f".{rank}.json.partial"
    staging.write_text(json.dumps(record) + "\n")
    os.replace(staging, path)
    return path
