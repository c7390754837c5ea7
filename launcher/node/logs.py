"""`areal-launch logs`: a run's log files, prefixed with each process's name, for every runner.

Every node's supervisor writes one log per process to `<run folder>/logs/<name>.log`; a runner
may add logs of its own in front (a Slurm job's output file). `engine` keeps the processes that
serve it (from the run's plan.json, else by name prefix).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from launcher.spec.errors import UserError
from launcher.spec.runfolder import LOGS, PLAN, log_file


def log_files(
    run_dir: Path,
    engine: Optional[str] = None,
    must_match: bool = True,
    extra: Sequence[tuple[str, Path]] = (),
) -> list[tuple[str, Path]]:
    """(name, path) of the logs to show: `extra` first (not with `engine`), then each process's.

    None matching `engine` is an error unless `must_match` is false (a pending job has no logs).
    """
    names = sorted(set(_components(run_dir)) | {p.stem for p in (run_dir / LOGS).glob("*.log")})
    if engine is None:
        return list(extra) + [(n, run_dir / log_file(n)) for n in names]
    chosen = engine_processes(run_dir, engine, names, must_match)
    return [(n, run_dir / log_file(n)) for n in chosen]


def engine_processes(
    run_dir: Path, engine: str, names: Sequence[str] = (), must_match: bool = True
) -> list[str]:
    """The processes among `names` (default: the plan's) that serve `engine` (from the run's
    plan.json, else by name prefix); none is an error unless `must_match` is false."""
    serves = _components(run_dir)
    names = names or sorted(serves)
    chosen = [
        n for n in names if engine in serves.get(n, ()) or n == engine or n.startswith(engine + "-")
    ]
    if not chosen and must_match:
        have = sorted({c for comps in serves.values() for c in comps}) or names
        raise UserError(
            f"{run_dir}: no process serves engine {engine!r}; "
            f"choose one of: {', '.join(have) or 'none yet'}"
        )
    return chosen


def follow_logs(
    run_dir: Path,
    engine: Optional[str],
    active: Callable[[], bool],
    extra: Sequence[tuple[str, Path]] = (),
    poll_s: float = 0.5,
) -> Iterator[str]:
    """Lines of the run's logs. While `active()` holds, keep reading (and pick up logs that
    appear); then drain what is left."""
    from launcher.node.console import FollowedLog

    followed: dict[str, FollowedLog] = {}
    while True:
        going = active()
        for name, path in log_files(run_dir, engine, must_match=not going, extra=extra):
            followed.setdefault(name, FollowedLog(name, path, ""))
        width = max((len(n) for n in followed), default=0)
        for f in followed.values():
            for line in f.read_lines(final=not going):
                yield f"{f.name:<{width}} | {line}"
        if not going:
            return
        time.sleep(poll_s)


def _components(run_dir: Path) -> dict[str, tuple[str, ...]]:
    """Process name -> the engines it serves, from the plan.json the launcher wrote."""
    try:
        data = json.loads((run_dir / PLAN).read_text())
    except (OSError, ValueError):
        return {}
    return {
        p["name"]: tuple(c.strip() for c in str(p.get("component", "")).split(","))
        for p in data.get("processes", [])
        if "name" in p
    }
