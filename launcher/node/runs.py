"""Run folders: one per run, always its own, and the record that lets `status`, `cancel` and
`logs` find a run by its folder or by the id a runner printed (an edge: it touches the disk).

A run folder is made with mkdir, which fails when the folder exists, so two launches started in
the same second (the default folder name has one-second resolution) never share one: the
second gets `<name>-1`, the next `<name>-2`. What the folder holds is named in
launcher.spec.runfolder; the record (`launch.json`: which runner, the run and job ids, the
launcher's pid) is this module's. Runners that print an id (a Slurm job id, a Ray job id, a
local run id) also record it in `<cache root>/jobs/<id>` -> run folder (runfolder.cache_root).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

from launcher.spec.errors import LaunchError, UserError
from launcher.spec.request import Folders
from launcher.spec.runfolder import PREPARED, RECORD, cache_root

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
MAX_SUFFIX = 10000
# who started a run an id is indexed for when its folder holds no record (None: nobody knows)
Unrecorded = Callable[[str, Path], Optional["RunRecord"]]


@dataclass(frozen=True)
class RunRecord:
    """What a runner wrote about a run when it started it."""

    runner: str  # the runner's registry name: local, slurm, ray
    run_id: str
    run_dir: str
    job_id: Optional[str] = None  # the id a scheduler gave it (Slurm, Ray jobs); None locally
    pid: Optional[int] = None  # the launcher process (local runs)
    pid_start: Optional[int] = None  # its start time (clock ticks after boot): pid reuse check
    address: Optional[str] = None  # where the scheduler answers about job_id (Ray's Job API)


def free_run_dir(wanted: Path) -> Path:
    """The first of `wanted`, `wanted-1`, `wanted-2`, ... that does not exist yet."""
    wanted = Path(wanted).absolute()
    for k in range(MAX_SUFFIX):
        path = wanted if k == 0 else wanted.with_name(f"{wanted.name}-{k}")
        if not path.exists():
            return path
    raise UserError(f"{wanted}: {MAX_SUFFIX} run folders of that name exist; set hydra.run.dir")


def claim_run_dir(path: Path) -> bool:
    """Create the run folder; False when another launch created it first (mkdir is atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir()
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        raise LaunchError(f"cannot create the run folder {path}: {exc.strerror}") from None


def make_run_dir(wanted: Path) -> Path:
    """Create a run folder of our own at `wanted`, or at `wanted-1`, `wanted-2`, ..."""
    while True:
        path = free_run_dir(wanted)
        if claim_run_dir(path):
            return path


def write_private(path: Path, text: str) -> Path:
    """Write `text` to `path` atomically, readable by its owner only (it may hold secrets).
    Each writer has a part file of its own: processes that share a folder may write at once."""
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)
    os.replace(part, path)  # a reader never sees half of it
    return path


def write_record(record: RunRecord) -> None:
    """run_dir/launch.json, and the index entry for the id the run is known by (its job id
    where a scheduler gave one, else its run id)."""
    write_private(Path(record.run_dir) / RECORD, json.dumps(asdict(record), indent=1))
    index = jobs_index_dir()
    index.mkdir(parents=True, exist_ok=True)
    (index / (record.job_id or record.run_id)).write_text(record.run_dir + "\n")


def jobs_index_dir() -> Path:
    """Where runners record id -> run folder, in this user's cache."""
    return cache_root(os.environ) / "jobs"


def checked_id(handle: str) -> str:
    """A job or run id as typed: ASCII letters, digits, '.', '_', '-' (no paths, no newlines)."""
    text = str(handle).strip()
    if not _ID.match(text):
        raise UserError(
            f"{text!r} is not a job id or run folder: give the id areal-launch "
            "printed when it started the run (e.g. 1234), or the run folder"
        )
    return text


def find_run(handle: str, unrecorded: Optional[Unrecorded] = None) -> RunRecord:
    """The record of the run `handle` names: a run folder, or an id a runner printed.

    An indexed id whose folder holds no record was indexed by an older launcher: `unrecorded`
    (the runners' business, not the run folder's) says whose run it is."""
    text = str(handle).strip()
    if not text:
        raise UserError(
            "no run given: pass the job id areal-launch printed, or the run "
            "folder (e.g. outputs/my-experiment/run/2026-12-01_10-00-00)"
        )
    folder = Path(text)
    if "/" in text or folder.is_dir():
        if not (folder / RECORD).is_file():
            raise UserError(f"{text}: not a run folder of areal-launch (no {RECORD} in it)")
        return read_record(folder)
    entry = jobs_index_dir() / checked_id(text)
    try:
        run_dir = Path(entry.read_text().strip())
    except FileNotFoundError:
        raise UserError(
            f"{text}: no run with that id was started here by this user (the "
            f"index is {entry.parent}); give its run folder instead"
        ) from None
    if not (run_dir / RECORD).is_file():
        older = unrecorded(text, run_dir) if unrecorded else None
        if older is None:
            raise UserError(
                f"{text}: its run folder {run_dir} has no {RECORD}, so no runner "
                "of areal-launch knows the run"
            )
        return older
    return read_record(run_dir)


def read_record(run_dir: Path) -> RunRecord:
    try:
        data = json.loads((Path(run_dir) / RECORD).read_text())
        return RunRecord(**data)
    except (OSError, ValueError, TypeError) as exc:
        raise LaunchError(f"{run_dir}/{RECORD}: unreadable ({exc})") from None


def make_folders(folders: Optional[Folders], clear: bool) -> None:
    """The request's folders, on this node, before anything starts; `clear` (the run's first
    node): the folders of earlier records removed first. LaunchError when one cannot be made."""
    if folders is None:
        return
    import getpass
    import shutil

    try:
        for path in folders.cleared(getpass.getuser()) if clear else ():
            shutil.rmtree(path, ignore_errors=True)
        for folder in folders.make:
            Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LaunchError(
            f"cannot make the folder {exc.filename} the run's processes share: {exc.strerror}"
        ) from None


def prepare_folders(
    folders: Optional[Folders],
    run_dir: str,
    first: bool,
    attempt: str,
    timeout_s: float,
    poll_s: float = 0.2,
) -> None:
    """The request's folders on one node of several, before that node starts anything: the
    first node clears the earlier records and then says so in the run folder (shared by the
    nodes); every other node makes the folders and waits for that word, so no node clears
    what another node's processes already wrote there. `attempt` names this start of the job
    (a Slurm requeue clears again). LaunchError when the first node has not said so within
    timeout_s."""
    import getpass
    import time

    if folders is None:
        return
    said = Path(run_dir, PREPARED, attempt)
    if first:
        make_folders(folders, clear=True)
        said.parent.mkdir(parents=True, exist_ok=True)
        said.write_text("ok\n")
        return
    make_folders(folders, clear=False)
    deadline = time.monotonic() + timeout_s
    while not said.exists():
        if time.monotonic() > deadline:
            raise LaunchError(
                f"the run's first node did not clear "
                f"{', '.join(folders.cleared(getpass.getuser()))} within "
                f"{timeout_s:.0f} s ({said} is missing): is it running, and is the run folder "
                "shared between the nodes?"
            )
        time.sleep(poll_s)
