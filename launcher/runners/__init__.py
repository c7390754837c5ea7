"""Runners: the only part of the launcher that starts processes (docs/architecture.md, "Runners").

A runner executes a launch request (launcher.spec.request): `dryrun` returns exactly what it would
execute, with no side effect; `run` performs it (this machine: supervise it to the end; a
scheduler: submit it and print the job id); `status`, `cancel` and `logs` find a run by its run
folder or id (launcher.node.runs). The built-in runners share runners.base.RunnerBase, which
makes `run` execute the very object `dryrun` renders.

Runners are found by name, like TorchX's schedulers: `launcher=<name>` picks the module below
and its `Config` (with `_target_`, as Hydra's launcher plugins have), imported on first use, so
the Slurm runner never loads Ray; `module(name)` is typed as RunnerModule, so mypy checks each
call into a runner. Adding a runner is one module with `Config` and `Runner` (a RunnerBase),
its YAML under conf/launcher/, and one line in launcher.spec.registry; or, in another package,
the module and an entry point of our runners' group (registry.RUNNER_GROUP; no YAML: its
Config is the option `launcher=<name>`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Protocol,
    cast,
)

from launcher.spec import registry, tracking
from launcher.spec.errors import ConfigError, UserError
from launcher.spec.limits import MAX_PORT, MIN_PORT, seconds_problem
from launcher.spec.request import GRACE_PERIOD_S

if TYPE_CHECKING:  # for annotations only: a node's runner code (a Ray actor) loads faster
    from launcher.node.runs import RunRecord
    from launcher.spec.cluster import NodeOffer
    from launcher.spec.request import EngineAsk, LaunchRequest

CHECK_MEMORY = ("error", "warn", "off")
CONSOLE = ("auto", "all")
MAX_RESTARTS = 1000  # a bound: a typo of many digits is an error, not a loop
MAX_HOOK_CHARS = 64 * 1024  # launcher.post_exit_hook: one command, not a program


@dataclass
class LauncherBase:
    """Options every runner has (`launcher.*`); each runner's Config adds its own."""

    _target_: str = ""
    dry_run: bool = False  # print what would run (launcher.dry_run=true), start nothing
    grace_period_s: float = GRACE_PERIOD_S  # after SIGTERM, before SIGKILL, when a run stops
    health_timeout_s: Optional[float] = None  # None: rollout.health_timeout_s
    base_port: Optional[int] = None  # None: the runner's default (free ports, or 30000 up)
    # environment for every process: after engine defaults, before the launcher's contract
    env: Dict[str, str] = field(default_factory=dict)
    # a plan whose memory does not fit: error (refused), warn (said, started), off (not checked)
    check_memory: str = "error"
    # restarts per run (docs/architecture.md §11): a failed trainer job restarts with all its ranks
    # and
    # resumes from its newest checkpoint; a failed server restarts alone; 0: the first failure
    # ends the run
    max_restarts: int = 0
    # no trainer progress (runtime heartbeats; for an entry without them, no output and no CPU
    # time, or a rank ended while the others run) this long: stacks in the log, the stopped
    # ranks named, then a failure (restarted within max_restarts); null: no watchdog
    hang_timeout_s: Optional[float] = None
    # auto: the trainers' lines and each process's state (live on a terminal), servers' logs
    # in their files only; all: every process's lines, prefixed
    console: str = "auto"
    # experiment trackers the trainers' rank 0 writes rt.log's metrics to (launcher.spec.tracking:
    # tensorboard, wandb, mlflow), one run each for all restarts and requeues; []: none
    tracking: List[str] = field(default_factory=lambda: list(tracking.DEFAULT))
    # a shell command run once after every process of the run is gone (where the launcher
    # waits: here, Slurm's batch shell, Ray's driver), with LOG_DIR and AREAL_EXIT_STATUS set;
    # killed after 600 s; its failure leaves the run's exit code as it was (node/exithook.py)
    post_exit_hook: Optional[str] = None

    def __post_init__(self) -> None:
        tracking.check(self.tracking)
        if self.console not in CONSOLE:
            raise ConfigError(f"launcher.console={self.console!r}: choose {', '.join(CONSOLE)}")
        if self.check_memory not in CHECK_MEMORY:
            raise ConfigError(
                f"launcher.check_memory={self.check_memory!r}: choose {', '.join(CHECK_MEMORY)}"
            )
        if not 0 <= self.max_restarts <= MAX_RESTARTS:
            raise ConfigError(
                f"launcher.max_restarts={self.max_restarts}: choose 0 (no "
                f"restart) to {MAX_RESTARTS}"
            )
        for key, zero in (
            ("grace_period_s", True),
            ("health_timeout_s", False),
            ("hang_timeout_s", False),
        ):
            value = getattr(self, key)
            problem = seconds_problem(value, allow_zero=zero) if value is not None else ""
            if problem:
                raise ConfigError(f"launcher.{key}={value}: {problem}")
        hook = self.post_exit_hook
        if hook is not None and (len(hook) > MAX_HOOK_CHARS or "\0" in hook):
            raise ConfigError(
                f"launcher.post_exit_hook: {len(hook)} characters, or a NUL byte: one shell "
                f"command of at most {MAX_HOOK_CHARS} characters (put a longer one in a script)"
            )
        port = self.base_port
        if port is not None and not MIN_PORT <= port <= MAX_PORT:
            raise ConfigError(
                f"launcher.base_port={port}: choose a port from {MIN_PORT} to "
                f"{MAX_PORT} (or null: free ports)"
            )


class Runner(Protocol):
    """What every runner does (TorchX's scheduler API is the model)."""

    name: str
    # the run's processes run on this machine, supervised by this command to its end: its
    # console is the run's, its ports are this machine's free ones (reserved, one run at a
    # time); False: a scheduler's nodes run them, and the ports are counted up per node
    runs_here: bool

    def more_nodes(self, device: str) -> bool:
        """Whether a plan may span more nodes than this machine (for advice and checks)."""

    def offer(self) -> Optional[NodeOffer]:
        """What the nodes the run gets have, as the scheduler says (Slurm: the job's
        partition), for cluster.device=auto; None: this machine's GPUs are the run's (local),
        or the scheduler is not asked (Ray). May raise UserError (the scheduler cannot say)."""

    def python(self, asks: Mapping[str, EngineAsk] = {}) -> str:
        """The interpreter the run's processes use where they run (`asks`: the engines'
        resource asks, which may put them in a container)."""

    def cpus(self) -> tuple[int, ...]:
        """The CPU ids a node lets the run use (vLLM's CPU build binds to them); () unknown."""

    def ports(
        self, base_port: Optional[int], dry: bool
    ) -> AbstractContextManager[Callable[[], int]]:
        """Where the request's ports come from while it is built (and, if not dry, held)."""

    def notes(self, request: LaunchRequest) -> list[str]:
        """What this runner does with the request otherwise than it was asked (the engines'
        resource asks it cannot honour, a value of the user's it keeps): one line each."""

    def check(self, request: LaunchRequest) -> list[str]:
        """Refuse (UserError) what this runner cannot run, dry runs the same; return what
        the user should know about running it here (warnings)."""

    def dryrun(self, request: LaunchRequest) -> str:
        """Exactly what `run` would execute, printable (secrets masked); no side effect."""

    def run(self, request: LaunchRequest) -> int:
        """Perform the request; the exit code of the command."""

    def status(self, record: RunRecord) -> tuple[str, int]:
        """What `areal-launch status` prints, and its exit code."""

    def cancel(self, record: RunRecord) -> str:
        """Stop the run everywhere; say what happened."""

    def logs(self, record: RunRecord, follow: bool, engine: Optional[str]) -> Iterator[str]:
        """The run's log lines, prefixed with each process's name."""


class RunnerModule(Protocol):
    """A runner module: its `launcher.*` schema and the runner built from it."""

    @property
    def Config(self) -> type[LauncherBase]: ...

    def Runner(self, config: Any) -> Runner: ...  # the class, called with its Config


def names() -> tuple[str, ...]:
    return registry.runner_names()


def module(name: str) -> RunnerModule:
    return cast(RunnerModule, registry.runner_module(name))


def config_class(name: str) -> type[LauncherBase]:
    return module(name).Config


def name_of(config: Any) -> str:
    """The registry name of the runner a `launcher` config selects (by its _target_)."""
    target = str(getattr(config, "_target_", ""))
    for name, path in registry.RUNNERS.paths().items():
        if target.startswith(path.partition(":")[0] + "."):
            return name
    raise UserError(
        f"launcher._target_={target!r} is no runner of areal-launch (choose "
        f"launcher={' or launcher='.join(names())})"
    )


def create(config: Any) -> Runner:
    """The runner a `launcher` config selects, built with that config."""
    mod = module(name_of(config))
    return mod.Runner(config)


def find(handle: str) -> tuple[Runner, RunRecord]:
    """The run `handle` names (a run folder, or an id a runner printed) and its runner."""
    from launcher.node.runs import find_run

    record = find_run(handle, unrecorded=older_record)
    return for_record(record), record


def older_record(job_id: str, run_dir: Path) -> Optional[RunRecord]:
    """The record of an id an older launcher indexed without one, from the runner that
    indexed ids then (its module's `older_record`); None when no runner claims it."""
    for name in names():
        claim = getattr(module(name), "older_record", None)
        record = claim(job_id, run_dir) if claim is not None else None
        if record is not None:
            return record
    return None


def for_record(record: RunRecord) -> Runner:
    """The runner that started a recorded run, for status/cancel/logs."""
    mod = module(record.runner)
    return mod.Runner(mod.Config())


if TYPE_CHECKING:  # mypy checks the built-in runner modules against RunnerModule
    from launcher.runners import local, ray, slurm

    _local: RunnerModule = local
    _slurm: RunnerModule = slurm
    _ray: RunnerModule = ray
