"""Slurm runner: the thin edge between a rendered script and Slurm's own commands.

`render_sbatch` (pure, runners/sbatch.py) makes the script; `submit` hands it to
`sbatch --parsable` and records the run folder under `~/.cache/areal-launch/jobs/<id>`, so
`status`, `cancel` and `logs` need only the job id, even after Slurm has forgotten the job.
`status` asks squeue (the controller's memory, including jobs that ended in the last
MinJobAge seconds), then sacct (accounting), then the job's own last words in its output file.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Iterator, Optional

from launcher.errors import LaunchError
from launcher.runners.sbatch import render_sbatch, slurm_host_placeholder  # noqa: F401 (API)

SCRIPT_NAME = "job.sbatch"
# states in which a job may still write to its logs
ACTIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                           "REQUEUED", "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT"})
_JOB_ID = re.compile(r"\d+\Z")


# ----------------------------------------------------------------------------- submit
def submit(script_text: str, run_dir: Path) -> str:
    """Write run_dir/job.sbatch (private: it may hold secrets), sbatch it, return the job id."""
    run_dir = Path(run_dir).absolute()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    path = run_dir / SCRIPT_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(script_text)
    out = _run(["sbatch", "--parsable", str(path)])
    if out.returncode != 0:
        raise LaunchError(f"sbatch refused the job: {_last_line(out.stderr)} (script: {path})")
    job_id = out.stdout.strip().split(";")[0]  # "<id>;<cluster>" on multi-cluster setups
    if not _JOB_ID.match(job_id):
        raise LaunchError(f"sbatch printed {out.stdout.strip()!r}, not a job id (script: {path})")
    index = jobs_index_dir()
    index.mkdir(parents=True, exist_ok=True)
    (index / job_id).write_text(str(run_dir) + "\n")
    return job_id


def jobs_index_dir() -> Path:
    """Where submit records job id -> run folder ($XDG_CACHE_HOME or ~/.cache)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "areal-launch" / "jobs"


def run_dir_of(job_id: str) -> Path:
    """The run folder of a job this user submitted with areal-launch."""
    entry = jobs_index_dir() / _checked(job_id)
    try:
        return Path(entry.read_text().strip())
    except FileNotFoundError:
        raise LaunchError(f"job {job_id}: no run folder recorded in {entry.parent} (was it "
                          "submitted with areal-launch launcher=slurm by this user?)") from None


# ----------------------------------------------------------------------------- status
def job_state(job_id: str) -> Optional[str]:
    """RUNNING, COMPLETED, FAILED, CANCELLED, ... from squeue, else sacct; None if neither knows."""
    job_id = _checked(job_id)
    out = _run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"])
    state = out.stdout.split()[0] if out.returncode == 0 and out.stdout.split() else None
    if state is None:
        out = _run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State"])
        if out.returncode == 0 and out.stdout.split():
            state = out.stdout.split()[0]  # "CANCELLED by 0" -> CANCELLED
    return state


def job_status(job_id: str) -> tuple[str, int]:
    """What `areal-launch status JOB` prints, and its exit code (0 known to Slurm, 1 not):
    the state, one line per step, the job's own verdict line, the run folder."""
    job_id = _checked(job_id)
    state = job_state(job_id)
    try:
        run_dir: Optional[Path] = run_dir_of(job_id)
    except LaunchError:
        run_dir = None
    last = _last_job_word(run_dir, job_id) if run_dir else None
    tail = (f"\nthe job's last word: {last}" if last else "") + \
        (f"\nrun folder: {run_dir}" if run_dir else "")
    if state is None:
        why = _last_line(_run(["sacct", "-X", "-n", "-j", job_id]).stderr) or "no record"
        return f"job {job_id}: not known to Slurm (squeue: no such job; sacct: {why})" + tail, 1
    return f"job {job_id}: {state}" + _steps_text(job_id, state) + tail, 0


def _steps_text(job_id: str, state: str) -> str:
    """One line per step: running ones from squeue, finished ones from sacct when it has them."""
    if state in ACTIVE_STATES:
        out = _run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i|%j|%N|%M"])
        rows = [ln.split("|") for ln in out.stdout.splitlines() if ln.count("|") == 3]
        rows = [r for r in rows if not r[0].endswith((".batch", ".extern"))]
        return "".join(f"\n  step {r[0]} {r[1]}: RUNNING on {r[2]} for {r[3]}" for r in rows)
    out = _run(["sacct", "-n", "-P", "-j", job_id, "-o", "JobID,JobName,State,ExitCode,NodeList"])
    rows = [ln.split("|") for ln in out.stdout.splitlines() if ln.count("|") == 4]
    rows = [r for r in rows if "." in r[0] and not r[0].endswith((".batch", ".extern"))]
    return "".join(f"\n  step {r[0]} {r[1]}: {r[2].split()[0]} (exit {r[3]}) on {r[4]}"
                   for r in rows)


def _last_job_word(run_dir: Path, job_id: str) -> Optional[str]:
    """The script's last `areal-launch:` line (its verdict) from run_dir/slurm-<id>.out."""
    try:
        lines = (run_dir / f"slurm-{job_id}.out").read_text(errors="replace").splitlines()
    except OSError:
        return None
    said = [ln for ln in lines if ln.startswith("areal-launch:")]
    return said[-1] if said else None


# ----------------------------------------------------------------------------- cancel
def cancel(job_id: str) -> str:
    """scancel the job (Slurm stops every step); the message says what happened."""
    job_id = _checked(job_id)
    state = job_state(job_id)
    if state is not None and state not in ACTIVE_STATES:
        return f"job {job_id}: already {state}; nothing to cancel"
    out = _run(["scancel", job_id])
    if out.returncode != 0:
        raise LaunchError(f"job {job_id}: scancel failed: {_last_line(out.stderr)}")
    return f"job {job_id}: cancel requested (was {state or 'unknown to Slurm'})"


# ----------------------------------------------------------------------------- logs
def log_files(job_id: str, engine: Optional[str] = None,
              must_match: bool = True) -> list[tuple[str, Path]]:
    """(name, path) of the logs to show: the job's own output first, then each step's.

    `engine` keeps the steps that serve it (`rollout`, `actor`, ...; from the run's plan.json,
    else by name prefix) and leaves out the job's output; none matching is an error unless
    `must_match` is false (a pending job has no logs yet).
    """
    run_dir = run_dir_of(job_id)
    steps = _step_components(run_dir)
    logs_dir = run_dir / "logs"
    names = sorted(set(steps) | {p.stem for p in logs_dir.glob("*.log")})
    if engine is None:
        return [("job", run_dir / f"slurm-{job_id}.out")] + [(n, logs_dir / f"{n}.log")
                                                           for n in names]
    chosen = [n for n in names if engine in steps.get(n, ())
              or n == engine or n.startswith(engine + "-")]
    if not chosen and must_match:
        have = sorted({c for comps in steps.values() for c in comps}) or names
        raise LaunchError(f"job {job_id}: no step serves engine {engine!r}; "
                          f"choose one of: {', '.join(have) or 'none yet'}")
    return [(n, logs_dir / f"{n}.log") for n in chosen]


def logs(job_id: str, follow: bool = False, engine: Optional[str] = None,
         poll_s: float = 0.5) -> Iterator[str]:
    """Lines of the job's logs, each prefixed with its step name. `follow` keeps reading (and
    picks up logs that appear) until the job has ended, then drains what is left."""
    from launcher.runners.console import FollowedLog

    followed: dict[str, FollowedLog] = {}
    while True:
        active = follow and (job_state(job_id) or "") in ACTIVE_STATES
        for name, path in log_files(job_id, engine, must_match=not active):
            followed.setdefault(name, FollowedLog(name, path, ""))
        width = max((len(n) for n in followed), default=0)
        for f in followed.values():
            for line in f.read_lines(final=not active):
                yield f"{f.name:<{width}} | {line}"
        if not active:
            return
        time.sleep(poll_s)


def _step_components(run_dir: Path) -> dict[str, tuple[str, ...]]:
    """Step name -> the engines it serves, from the plan.json the launcher wrote."""
    try:
        data = json.loads((run_dir / "plan.json").read_text())
    except (OSError, ValueError):
        return {}
    return {p["name"]: tuple(c.strip() for c in str(p.get("component", "")).split(","))
            for p in data.get("processes", []) if "name" in p}


# ----------------------------------------------------------------------------- edges
def _checked(job_id: str) -> str:
    job_id = str(job_id).strip()
    if not _JOB_ID.match(job_id):
        raise LaunchError(f"job id {job_id!r}: expected the number areal-launch printed "
                          "when it submitted the job, e.g. 1234")
    return job_id


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise LaunchError(f"{argv[0]} not found: launcher=slurm needs Slurm's commands "
                          "(sbatch, squeue, sacct, scancel) on PATH") from None
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{argv[0]} did not answer within 60 s: is slurmctld up?") from None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""
