"""Slurm runner: the thin edge between a rendered script and Slurm's own commands.

Its request object is the sbatch job (runners/sbatch.py, pure: the script and the request);
the dry run prints both, and `run` hands that script to `sbatch --parsable` and records the run
(launcher.node.runs), so `status`, `cancel` and `logs` need only the job id, even after Slurm
has forgotten the job. `status` asks squeue (the
controller's memory, including jobs that ended in the last MinJobAge seconds), then sacct
(accounting), then the job's own last words in its output file; a Slurm that does not answer
is said to be unreachable, not to have forgotten the job.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, Optional

from launcher.node.logs import follow_logs
from launcher.node.report import progress_lines
from launcher.node.runs import RunRecord, write_private, write_record
from launcher.runners import LauncherBase
from launcher.runners.base import RunnerBase
from launcher.runners.sbatch import SbatchJob, cpu_warning, render_sbatch
from launcher.runners.slurmasks import job_options
from launcher.spec.cluster import NodeOffer
from launcher.spec.errors import ConfigError, LaunchError, UserError
from launcher.spec.limits import MAX_CPUS_PER_GPU
from launcher.spec.request import EngineAsk, LaunchRequest
from launcher.spec.runfolder import JOB_SCRIPT, LOGS, REQUEST, slurm_output

MIN_REQUEUE_SIGNAL_S, MAX_REQUEUE_SIGNAL_S = 30, 65535  # Slurm's --signal takes up to 65535
# states in which a job may still write to its logs
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
    }
)
_JOB_ID = re.compile(r"[0-9]+\Z")  # ASCII digits only: Python's \d takes any script's digits


@dataclass
class Config(LauncherBase):
    """launcher=slurm: one sbatch job per run, one task per node (docs/architecture.md §8)."""

    _target_: str = "launcher.runners.slurm.Runner"
    partition: Optional[str] = None  # #SBATCH --partition
    account: Optional[str] = None
    qos: Optional[str] = None
    time_limit: Optional[str] = None  # #SBATCH --time, e.g. "04:00:00"
    cpus_per_gpu: Optional[int] = None  # None: whole nodes when the plan fills them
    mem_per_gpu: Optional[str] = None  # e.g. 64G
    container_image: Optional[str] = None  # srun --container-image (pyxis/enroot)
    container_mounts: Optional[str] = None  # more srun --container-mounts, comma-separated
    container_python: str = "python3"  # the interpreter inside the container
    sbatch_extra: List[str] = field(default_factory=list)  # more #SBATCH options
    # node group label -> more #SBATCH options for that group's nodes (its component of a
    # heterogeneous job), e.g. {cpu: [--partition=cpu]} for a CPU-only group
    group_sbatch: Dict[str, List[str]] = field(default_factory=dict)
    srun_extra: List[str] = field(default_factory=list)  # more options for the srun step
    reservation: Optional[str] = None  # #SBATCH --reservation (None: the engines' ask, if any)
    # #SBATCH --exclusive on every node (None: the engines' ask; whole nodes get it anyway)
    exclusive: Optional[bool] = None
    setup: List[str] = field(default_factory=list)  # shell commands before each node's tasks
    job_name: Optional[str] = None  # None: <experiment_name>-<trial_name>
    # before the time limit, ask the trainers for a checkpoint and requeue the job; it starts
    # again in the same run folder and resumes (docs/architecture.md §11). Slurm signals
    # requeue_signal_s
    # before the limit (--signal=B:USR1@N; its timer ticks about every 30 s)
    requeue: bool = False
    requeue_signal_s: int = 300

    def __post_init__(self) -> None:
        super().__post_init__()
        if not MIN_REQUEUE_SIGNAL_S <= self.requeue_signal_s <= MAX_REQUEUE_SIGNAL_S:
            raise ConfigError(
                f"launcher.requeue_signal_s={self.requeue_signal_s}: choose "
                f"{MIN_REQUEUE_SIGNAL_S} to {MAX_REQUEUE_SIGNAL_S} seconds "
                "(Slurm's lead before the time limit)"
            )
        check_values(self)
        limit = time_limit_s(self.time_limit) if self.time_limit is not None else None
        if self.requeue and limit is not None and self.requeue_signal_s >= limit:
            raise ConfigError(
                f"launcher.requeue_signal_s={self.requeue_signal_s} is not below "
                f"launcher.time_limit={self.time_limit} ({limit} s): the job "
                "would be requeued as it starts; lower requeue_signal_s"
            )


_MEM = re.compile(r"[0-9]{1,12}[KMGT]?\Z", re.IGNORECASE)  # sbatch's --mem-per-gpu: no decimals
NO_LIMIT = ("infinite", "unlimited")


def check_values(config: "Config") -> None:
    """What sbatch would refuse (or read other than meant) is one line here, in a dry run too,
    before a launch writes its run folder."""
    text = config.time_limit
    if text is not None and str(text).strip().lower() not in NO_LIMIT:
        m = _TIME.match(str(text).strip())
        parts = [int(g) for g in m.groups()[2:] if g is not None] if m else []
        if m is None or any(p > 59 for p in parts):
            raise ConfigError(
                f"launcher.time_limit={text}: not a Slurm time; write "
                "MINUTES, H:MM:SS or D-HH:MM:SS (e.g. 4:00:00, 2-00:00:00), "
                "minutes and seconds below 60, or UNLIMITED"
            )
    mem = config.mem_per_gpu
    if mem is not None and not _MEM.match(str(mem).strip()):
        raise ConfigError(
            f"launcher.mem_per_gpu={mem}: not a Slurm size; write a "
            "whole number with an optional unit K, M, G or T (e.g. 64G, 512M)"
        )
    cpus = config.cpus_per_gpu
    if cpus is not None and not 1 <= cpus <= MAX_CPUS_PER_GPU:
        raise ConfigError(
            f"launcher.cpus_per_gpu={cpus}: choose 1 to {MAX_CPUS_PER_GPU} "
            "(or null: whole nodes when the plan fills them)"
        )


def check_request(config: "Config", request: LaunchRequest) -> None:
    """Per-GPU resources on a job that asks for no GPU: sbatch refuses the job."""
    if request.device == "cuda":
        return
    for key in ("mem_per_gpu", "cpus_per_gpu"):
        if getattr(config, key) not in (None, ""):
            raise ConfigError(
                f"launcher.{key} is set but the plan asks Slurm for no GPU "
                "(cluster.device=cpu), and sbatch refuses per-GPU resources "
                "without one; remove it (launcher.sbatch_extra=[--mem=64G] "
                "sizes a CPU job)"
            )


_TIME = re.compile(r"(?:(\d{1,6})-)?(\d{1,9})(?::(\d{1,9}))?(?::(\d{1,9}))?\Z")


def time_limit_s(text: str) -> Optional[int]:
    """Seconds of a Slurm --time value (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S); None for what
    Slurm would read as no limit ("infinite", "UNLIMITED") or cannot be read here."""
    m = _TIME.match(str(text).strip())
    if m is None:
        return None
    days, a, b, c = (int(g) if g is not None else None for g in m.groups())
    assert a is not None
    if days is not None:  # D-H[:M[:S]]
        return days * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    if c is not None:  # H:M:S
        return a * 3600 + (b or 0) * 60 + c
    if b is not None:  # M:S
        return a * 60 + b
    return a * 60  # M


class Runner(RunnerBase[Config, SbatchJob]):
    name = "slurm"

    def offer(self) -> Optional[NodeOffer]:
        """The job's partition's nodes, from sinfo (runners/slurmnodes.py)."""
        from launcher.runners.slurmnodes import job_partition, read_offer

        return read_offer(
            job_partition(self.config.partition, self.config.sbatch_extra, os.environ)
        )

    def python(self, asks: Mapping[str, EngineAsk] = {}) -> str:
        """Inside a container (the user's, or one the engines ask for), the container's."""
        contained = self.config.container_image or any(a.image for a in asks.values())
        return self.config.container_python if contained else sys.executable

    def notes(self, request: LaunchRequest) -> list[str]:
        return job_options(request, self.config)[1]

    def job(self, request: LaunchRequest) -> SbatchJob:
        opts, _ = job_options(request, self.config)
        python = self.python(request.asks)
        script = render_sbatch(request, opts, python, package_dirs(), sys.executable)
        return SbatchJob(request, script)

    def check(self, request: LaunchRequest) -> list[str]:
        opts, _ = job_options(request, self.config)  # the engines' asks: one error line here
        check_request(opts, request)
        self.job(request)
        return cpu_warning(request, opts)

    def render(self, job: SbatchJob) -> str:
        return (
            job.script
            + f"\n# {job.request.run_dir}/{REQUEST} (secrets masked):\n"
            + job.request.to_json(mask_secrets=True)
            + "\n"
        )

    def execute(self, job: SbatchJob) -> int:
        request = job.request
        job_id = submit(job.script, Path(request.run_dir))
        write_record(RunRecord("slurm", request.run_id, request.run_dir, job_id=job_id))
        print(job_id)
        return 0

    def status(self, record: RunRecord) -> tuple[str, int]:
        return job_status(_job(record), Path(record.run_dir))

    def cancel(self, record: RunRecord) -> str:
        return cancel(_job(record))

    def logs(self, record: RunRecord, follow: bool, engine: Optional[str]) -> Iterator[str]:
        job_id = _job(record)
        run_dir = Path(record.run_dir)
        return follow_logs(
            run_dir,
            engine,
            lambda: follow and (job_state(job_id) or "") in ACTIVE_STATES,
            extra=[("job", run_dir / slurm_output(job_id))],
        )


def package_dirs() -> list[str]:
    """The folders of the launcher's own packages (launcher, recipes), for container mounts."""
    import launcher

    root = Path(launcher.__file__).resolve().parent.parent
    return [str(root / name) for name in ("launcher", "recipes") if (root / name).is_dir()]


def older_record(job_id: str, run_dir: Path) -> RunRecord:
    """An indexed id whose run folder has no launch.json: the launcher before launch.json
    indexed Slurm job ids only, so the id is a Slurm job's (runners.older_record asks)."""
    return RunRecord(runner=Runner.name, run_id=job_id, run_dir=str(run_dir), job_id=job_id)


def _job(record: RunRecord) -> str:
    if not record.job_id:
        raise LaunchError(f"{record.run_dir}: the run has no Slurm job id recorded")
    return checked_job_id(record.job_id)


# ----------------------------------------------------------------------------- submit
def submit(script_text: str, run_dir: Path) -> str:
    """Write run_dir/job.sbatch (private: it may hold secrets), sbatch it, return the job id."""
    run_dir = Path(run_dir).absolute()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / LOGS).mkdir(exist_ok=True)
    path = write_private(run_dir / JOB_SCRIPT, script_text)
    out = _run(["sbatch", "--parsable", str(path)])
    if out.returncode != 0:
        raise LaunchError(f"sbatch refused the job: {_last_line(out.stderr)} (script: {path})")
    job_id = out.stdout.strip().split(";")[0]  # "<id>;<cluster>" on multi-cluster setups
    if not _JOB_ID.match(job_id):
        raise LaunchError(f"sbatch printed {out.stdout.strip()!r}, not a job id (script: {path})")
    return job_id


# ----------------------------------------------------------------------------- status
class SlurmUnreachable(LaunchError):
    """squeue and sacct both failed: nothing is known about the job, either way."""


def job_state(job_id: str) -> Optional[str]:
    """RUNNING, COMPLETED, FAILED, CANCELLED, ... from squeue, else sacct; None if neither
    knows the job. SlurmUnreachable when neither answers at all."""
    job_id = checked_job_id(job_id)
    queue = _run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"])
    if queue.returncode == 0 and queue.stdout.split():
        return queue.stdout.split()[0]
    acct = _run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State"])
    if acct.returncode == 0 and acct.stdout.split():
        return acct.stdout.split()[0]  # "CANCELLED by 0" -> CANCELLED
    if queue.returncode != 0 and "Invalid job id" not in queue.stderr:
        why = _last_line(queue.stderr) or f"exit code {queue.returncode}"
        raise SlurmUnreachable(f"job {job_id}: cannot ask Slurm (squeue: {why}); is slurmctld up?")
    return None


def job_status(job_id: str, run_dir: Optional[Path]) -> tuple[str, int]:
    """What `areal-launch status JOB` prints, and its exit code (0 known to Slurm, 1 not):
    the state, one line per step, the job's own verdict line, the run folder."""
    job_id = checked_job_id(job_id)
    state = job_state(job_id)
    last = _last_job_word(run_dir, job_id) if run_dir else None
    facts = "".join(f"\n{line}" for line in progress_lines(run_dir)) if run_dir else ""
    tail = (
        (f"\nthe job's last word: {last}" if last else "")
        + facts
        + (f"\nrun folder: {run_dir}" if run_dir else "")
    )
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
    return "".join(
        f"\n  step {r[0]} {r[1]}: {r[2].split()[0]} (exit {r[3]}) on {r[4]}" for r in rows
    )


def _last_job_word(run_dir: Path, job_id: str) -> Optional[str]:
    """The script's last `areal-launch:` line (its verdict) from the job's output file."""
    try:
        lines = (run_dir / slurm_output(job_id)).read_text(errors="replace").splitlines()
    except OSError:
        return None
    said = [ln for ln in lines if ln.startswith("areal-launch:")]
    return said[-1] if said else None


# ----------------------------------------------------------------------------- cancel
def cancel(job_id: str) -> str:
    """scancel the job (Slurm stops every step); the message says what happened."""
    job_id = checked_job_id(job_id)
    state = job_state(job_id)
    if state is not None and state not in ACTIVE_STATES:
        return f"job {job_id}: already {state}; nothing to cancel"
    out = _run(["scancel", job_id])
    if out.returncode != 0:
        raise LaunchError(f"job {job_id}: scancel failed: {_last_line(out.stderr)}")
    return f"job {job_id}: cancel requested (was {state or 'unknown to Slurm'})"


# ----------------------------------------------------------------------------- edges
def checked_job_id(job_id: str) -> str:
    text = str(job_id).strip()
    if not _JOB_ID.match(text):
        raise UserError(
            f"job id {text!r}: expected the number areal-launch printed when it "
            "submitted the job, e.g. 1234"
        )
    return text


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "SLURM_TIME_FORMAT": "standard"},
        )
    except FileNotFoundError:
        raise UserError(
            f"{argv[0]} not found: launcher=slurm needs Slurm's commands "
            "(sbatch, squeue, sacct, scancel) on PATH"
        ) from None
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{argv[0]} did not answer within 60 s: is slurmctld up?") from None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""
