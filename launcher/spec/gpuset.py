"""The GPU-set language of `cluster.component_placement`: `all`, `a-b`, `a`, `0-2,5,7`.

Parsing and printing live together so that every message and picture writes a set the way the
user would type it (`format_gpu_set(parse_gpu_set(t)) == t` for canonical text).
"""

from __future__ import annotations

import re
from typing import Iterable, Union

from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import PlacementError
from launcher.spec.limits import MAX_INDEX_DIGITS

_ITEM = re.compile(r"(\d+)(?:\s*-\s*(\d+))?", re.ASCII)


def _fail(text: str, key: str, problem: str, fix: str) -> PlacementError:
    where = f"cluster.component_placement.{key}=" if key else "GPU set "
    return PlacementError(f"{where}{text!r}: {problem} ({fix})")


def _cluster_words(cluster: ClusterSpec) -> str:
    nodes = "node" if cluster.num_nodes == 1 else "nodes"
    return (
        f"GPUs 0-{cluster.total_gpus - 1} ({cluster.gpu_nodes} {nodes} x {cluster.gpus_per_node})"
    )


def parse_gpu_set(text: Union[str, int], cluster: ClusterSpec, key: str = "") -> tuple[int, ...]:
    """Global GPU indices named by `text`, ascending; `key` names the placement in errors.

    Hydra hands `actor=3` over as an int, so ints are accepted as a one-GPU set.
    """
    total = cluster.total_gpus
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise _fail(str(text), key, "not a GPU set", "write all, a-b, a, or a list like 0-2,5,7")
    if isinstance(text, int):
        text = str(text)
    body = text.strip()
    if body.lower() == "all":
        return tuple(range(total))
    if not body:
        raise _fail(text, key, "empty GPU set", "write all, a-b, a, or a list like 0-2,5,7")
    gpus: list[int] = []
    for part in body.split(","):
        part = part.strip()
        match = _ITEM.fullmatch(part)
        if match is None:
            raise _fail(
                text,
                key,
                f"{part!r} is not a GPU index or range",
                "write all, a-b, a, or a list like 0-2,5,7",
            )
        if max(len(match[1]), len(match[2] or "")) > MAX_INDEX_DIGITS:
            raise _fail(
                text[:40] + ("..." if len(text) > 40 else ""),
                key,
                "a GPU index is too large",
                f"the cluster has {_cluster_words(cluster)}",
            )
        lo = int(match[1])
        hi = int(match[2]) if match[2] is not None else lo
        if hi < lo:
            raise _fail(text, key, f"range {part!r} descends", f"write {hi}-{lo}")
        if gpus and lo <= gpus[-1]:
            problem = (
                f"GPU {lo} is listed twice"
                if lo in gpus
                else f"{part!r} comes after GPU {gpus[-1]}"
            )
            raise _fail(text, key, problem, "list each GPU once, in ascending order")
        if hi >= total:
            raise _fail(
                text,
                key,
                f"GPU {hi} is outside the cluster, which has {_cluster_words(cluster)}",
                "use smaller indices or raise cluster.num_nodes",
            )
        gpus.extend(range(lo, hi + 1))
    return tuple(gpus)


def format_gpu_set(gpus: Iterable[int]) -> str:
    """Compact text for a GPU list: runs of consecutive indices become `a-b` (`0-3,6,8-9`)."""
    out: list[str] = []
    start = prev = None
    for g in gpus:
        if prev is not None and g == prev + 1:
            prev = g
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = g
    if start is not None:
        out.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(out)
