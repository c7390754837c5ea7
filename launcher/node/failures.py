"""Why a trainer failed, in the failing rank's own words.

torchrun names a failure only as "exited with code 1" in its summary; the worker's exception
is in the error file torchrun asks each worker to write (TORCHELASTIC_ERROR_FILE, filled by
`@record` entry points): `<--log-dir>/<run id>/attempt_<n>/<local rank>/error.json`. The root
cause is the rank that failed first (its file written first), not a peer that failed because
it did (a collective whose peer vanished: "Connection closed by peer"); its global rank is its
local rank plus the ranks of the job's earlier nodes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from launcher.spec.process import ProcessSpec
from launcher.spec.request import LaunchRequest

TRACEBACK_LINES = 20
# how a rank fails when a peer has already died: never the root cause while another is known
COLLATERAL = (
    "Connection closed by peer",
    "remote worker",
    "Connection reset by peer",
    "NCCL communicator was aborted",
    "DistNetworkError",
    "Broken pipe",
)


@dataclass(frozen=True)
class RankError:
    rank: int
    summary: str  # "rank 1 raised ValueError: boom"
    traceback: list[str]


def _flag(argv: Sequence[str], name: str) -> Optional[str]:
    for i, arg in enumerate(argv[:-1]):
        if arg == name:
            return argv[i + 1]
    return None


def _local_ranks(spec: ProcessSpec) -> int:
    return len(spec.gpus) or int(_flag(spec.argv, "--nproc-per-node") or 1)


def _rank_offset(request: LaunchRequest, spec: ProcessSpec) -> int:
    """Ranks on the job's nodes before this one (torchrun numbers nodes by --node-rank)."""
    mine = int(_flag(spec.argv, "--node-rank") or 0)
    return sum(
        _local_ranks(p)
        for p in request.processes
        if p.component == spec.component
        and p.is_trainer
        and int(_flag(p.argv, "--node-rank") or 0) < mine
    )


def node_ranks(request: LaunchRequest, spec: ProcessSpec) -> range:
    """The global ranks a trainer process (one node's torchrun) runs."""
    first = _rank_offset(request, spec)
    return range(first, first + _local_ranks(spec))


def torchrun_root_cause(
    request: LaunchRequest, spec: ProcessSpec, since: float = 0.0
) -> Optional[RankError]:
    """The first failing rank's exception, from torchrun's error files written at or after
    `since` (time.time(); a restarted job's earlier files are not this start's) (None if
    none)."""
    log_dir = _flag(spec.argv, "--log-dir")
    if not spec.is_trainer or log_dir is None:
        return None
    found = []
    for path in Path(log_dir).glob("*/attempt_*/*/error.json"):
        try:
            data = json.loads(path.read_text())["message"]
            if isinstance(data, str):  # a worker that recorded only a string
                data = {"message": data, "extraInfo": {}}
            collateral = any(c in str(data.get("message", "")) for c in COLLATERAL)
            written = path.stat().st_mtime_ns
            if written < since * 1e9:
                continue
            found.append((collateral, written, int(path.parent.name), data))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if not found:
        return None
    *_, local, data = min(found, key=lambda f: f[:3])
    rank = _rank_offset(request, spec) + local
    message = str(data.get("message", "")).strip().splitlines()
    stack = str(data.get("extraInfo", {}).get("py_callstack", "")).rstrip().splitlines()
    summary = f"rank {rank} raised {message[-1] if message else 'an error'}"
    return RankError(rank, summary, stack[-TRACEBACK_LINES:])
