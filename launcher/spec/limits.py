"""Bounds on every size a user can type, in one place.

A huge number is refused with a clear error in microseconds, before any list of that size is
built (a plan for a billion nodes would otherwise eat memory for a minute and die). The bounds
are far above any real job: the largest training clusters have about 10^5 GPUs.
"""

from __future__ import annotations

import math

MAX_NODES = 16384
MAX_GPUS_PER_NODE = 1024  # CPU runs count virtual GPU slots too
MAX_GPUS = 131072  # world sizes and whole clusters
MAX_INDEX_DIGITS = 6  # GPU indices in cluster.component_placement
MIN_PORT, MAX_PORT = 1024, 65535
MAX_CPUS_PER_GPU = 1024  # scheduling asks: CPU cores per GPU
MAX_MEM_GIB_PER_GPU = 65536  # and GiB of host memory per GPU
MAX_SECONDS = 7 * 24 * 3600.0  # grace periods, health deadlines, hang timeouts


def seconds_problem(value: object, allow_zero: bool = True) -> str:
    """Why `value` is no usable duration in seconds ('' when it is one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "not a number of seconds"
    if not math.isfinite(value):
        return "not a finite number of seconds"
    if value < 0 or (value == 0 and not allow_zero):
        return "must be more than 0" if not allow_zero else "must not be negative"
    if value > MAX_SECONDS:
        return f"more than {MAX_SECONDS:.0f} s (a week)"
    return ""
