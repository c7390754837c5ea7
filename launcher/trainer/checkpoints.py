"""Checkpoints in the run folder, and the launcher's request for one (docs/architecture.md §11).

Layout: `<run folder>/checkpoints/step_<k>/` holds whatever the trainer saved for step k plus a
small `meta.json` ({"step", "time", "restart", ...}). A checkpoint is written under a hidden
temporary name in the same folder (`.tmp-step_<k>-<pid>`) and renamed into place once complete,
so a `step_<k>` folder that exists is complete and the newest one is the one to resume from.

Request: the launcher (Slurm requeue before the time limit, a graceful stop) writes
`<run folder>/control/checkpoint` holding a request id, optionally followed by the seconds
within which it stops the job after the checkpoint; trainers honour it at their next step
boundary (all ranks together), save, and write `control/checkpoint.done` with the same id,
followed by ` final` when that was their last step (so a requeue is not asked for a finished run).
A request with a stop bound is the job's last checkpoint: the trainers hold there, logging
nothing more, until the stop (a step done after it would be done again after the resume, and a
tracker's service killed by the stop could lose it).

Stdlib only: the launcher (status, requeue) and the trainers both import it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional, Union

FOLDER = "checkpoints"  # under the run folder
META = "meta.json"  # inside every complete checkpoint
CONTROL = "control"  # under the run folder: what the launcher asks of the trainers
REQUEST = "checkpoint"  # control/checkpoint: a request id
DONE = "checkpoint.done"  # control/checkpoint.done: the id of the request last honoured
FINAL = "final"  # after the id in DONE: that checkpoint was the trainers' last step
_NAME = re.compile(r"step_(\d+)\Z")
_STAGING = re.compile(r"\.tmp-step_(\d+)-(\d+)\Z")

PathLike = Union[str, "os.PathLike[str]"]


class Checkpoint(NamedTuple):
    """One complete checkpoint: its step and folder (unpacks as `(step, path)`)."""

    step: int
    path: Path


def root(run_dir: PathLike) -> Path:
    """`<run folder>/checkpoints`."""
    return Path(run_dir) / FOLDER


def name(step: int) -> str:
    return f"step_{int(step)}"


def complete(folder: PathLike) -> list[Checkpoint]:
    """Every complete checkpoint under `folder` (a checkpoints root), oldest step first."""
    base = Path(folder)
    if not base.is_dir():
        return []
    found = []
    for entry in base.iterdir():
        match = _NAME.match(entry.name)
        if match and (entry / META).is_file():
            found.append(Checkpoint(int(match.group(1)), entry))
    return sorted(found)


def latest(folder: PathLike) -> Optional[Checkpoint]:
    """The newest complete checkpoint under `folder` (a checkpoints root), or None."""
    found = complete(folder)
    return found[-1] if found else None


def read_meta(checkpoint: PathLike) -> dict[str, Any]:
    """A checkpoint's meta.json ({} when unreadable)."""
    try:
        data = json.loads((Path(checkpoint) / META).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def staging(folder: PathLike, step: int, pid: Optional[int] = None) -> Path:
    """A fresh, empty folder to write step `step` into: `.tmp-step_<k>-<pid>` beside the
    complete ones (same filesystem, so `commit`'s rename is atomic)."""
    path = Path(folder) / f".tmp-{name(step)}-{os.getpid() if pid is None else pid}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def commit(
    staged: PathLike, step: int, restart: int = 0, extra: Optional[Mapping[str, Any]] = None
) -> Path:
    """Write meta.json into the staged folder and rename it to `step_<k>`. A `step_<k>` already
    there (a rerun of that step) is renamed away first and removed after; between the two
    renames the newest complete checkpoint is an older step, never a half-written one."""
    staged = Path(staged)
    meta = {"step": int(step), "time": time.time(), "restart": int(restart), **dict(extra or {})}
    part = staged / f".{META}.part"
    part.write_text(json.dumps(meta, sort_keys=True) + "\n")
    os.replace(part, staged / META)
    final = staged.parent / name(step)
    old = None
    if final.exists():
        old = staged.parent / f".old-{name(step)}-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(staged, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


def prune(folder: PathLike, keep: int) -> list[Path]:
    """Remove all but the newest `keep` complete checkpoints (keep <= 0 keeps all), and the
    staging leftovers of processes that died while writing; returns what was removed."""
    base = Path(folder)
    removed: list[Path] = []
    done = complete(base)
    if keep > 0:
        for old in done[:-keep]:
            shutil.rmtree(old.path, ignore_errors=True)
            removed.append(old.path)
    if base.is_dir():
        for entry in base.iterdir():
            match = _STAGING.match(entry.name)
            if match and not _alive(int(match.group(2))):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ----------------------------------------------------------------------------- requests
def request_path(run_dir: PathLike) -> Path:
    return Path(run_dir) / CONTROL / REQUEST


def done_path(run_dir: PathLike) -> Path:
    return Path(run_dir) / CONTROL / DONE


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    part.write_text(text)
    os.replace(part, path)  # a reader never sees half of it


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def request_checkpoint(run_dir: PathLike, stop_within_s: Optional[int] = None) -> str:
    """Ask the run's trainers for a checkpoint at their next step boundary; `stop_within_s`:
    the launcher stops the job that long after it at most (the trainers hold meanwhile).
    The request id (give it to `checkpoint_done`)."""
    request_id = f"{int(time.time())}-{uuid.uuid4().hex[:8]}"
    bound = "" if stop_within_s is None else f" {int(stop_within_s)}"
    _write(request_path(run_dir), request_id + bound + "\n")
    return request_id


def _request_words(run_dir: PathLike) -> list[str]:
    return (_read(request_path(run_dir)) or "").split()


def _done_id(run_dir: PathLike) -> Optional[str]:
    words = (_read(done_path(run_dir)) or "").split()
    return words[0] if words else None


def checkpoint_done(run_dir: PathLike, request_id: str) -> bool:
    """True once the trainers saved a checkpoint for request `request_id`."""
    return _done_id(run_dir) == request_id


def checkpoint_final(run_dir: PathLike, request_id: str) -> bool:
    """True once the trainers saved request `request_id`'s checkpoint at their last step."""
    words = (_read(done_path(run_dir)) or "").split()
    return words[:1] == [request_id] and words[1:2] == [FINAL]


def pending_request(run_dir: PathLike) -> Optional[str]:
    """The id of a request not honoured yet, or None (read by one trainer rank, which shares
    the answer with the others so that they all save at the same step)."""
    words = _request_words(run_dir)
    return words[0] if words and words[0] != _done_id(run_dir) else None


def stop_within_s(run_dir: PathLike, request_id: str) -> Optional[int]:
    """The seconds within which the launcher stops the job after request `request_id`'s
    checkpoint, or None when it goes on after it (or the request is another one)."""
    words = _request_words(run_dir)
    if len(words) < 2 or words[0] != request_id or not words[1].isdigit():
        return None
    return int(words[1])


def mark_done(run_dir: PathLike, request_id: str, final: bool = False) -> None:
    """Record that request `request_id` was honoured (after the checkpoint is complete);
    `final`: at the trainers' last step."""
    _write(done_path(run_dir), request_id + (f" {FINAL}" if final else "") + "\n")
