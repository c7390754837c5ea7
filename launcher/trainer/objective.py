"""What a run tells a sweep: `<run folder>/metrics.json`, whose `objective` is the number a
sweeper optimises (the default recipe: the mean reward of its last step; higher is better).

A recipe writes it once, at the end, from one rank; the launcher reads it when the run has
ended. Stdlib only: trainers import it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Optional

METRICS_FILE = "metrics.json"
OBJECTIVE = "objective"


def write_metrics(run_dir: str | Path, objective: float, **more: Any) -> Path:
    """Write run_dir/metrics.json atomically: {"objective": objective, **more}."""
    path = Path(run_dir) / METRICS_FILE
    part = path.with_name(f".{METRICS_FILE}.part")
    part.write_text(json.dumps({OBJECTIVE: objective, **more}, indent=1) + "\n")
    os.replace(part, path)
    return path


def read_objective(run_dir: str | Path) -> Optional[float]:
    """The run's objective; None when it wrote none (or not a finite number)."""
    try:
        value = json.loads((Path(run_dir) / METRICS_FILE).read_text()).get(OBJECTIVE)
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)
