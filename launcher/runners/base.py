"""The runners' base class: the head every built-in runner shares, and the promise each keeps by
construction that a launch is its dry run's request executed (docs/architecture.md §8).

A runner turns the launch request into a request object of its own with one pure method,
`job`: the local processes materialized (local.py), the sbatch job (sbatch.py), the Ray job
(rayjob.py). `dryrun` renders that object; `run` writes the launch request it carries into the
run folder (what every node's supervisor reads) and executes that object. So no runner can
launch what its dry run did not show, as TorchX's Scheduler defines `submit()` as
`schedule(submit_dryrun(...))`. A runner writes `job`, `render`, `execute` and the run's
`status`, `cancel` and `logs`, and overrides the defaults below where its scheduler differs.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from contextlib import contextmanager
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Callable,
    Collection,
    Generic,
    Iterator,
    Mapping,
    Optional,
    Protocol,
    TypeVar,
    final,
)

from launcher.node.ports import DEFAULT_BASE_PORT, counted_ports
from launcher.node.runs import write_private
from launcher.runners import LauncherBase
from launcher.spec.runfolder import REQUEST

if TYPE_CHECKING:
    from launcher.node.runs import RunRecord
    from launcher.spec.cluster import NodeOffer
    from launcher.spec.request import EngineAsk, LaunchRequest

NODE_MODULE = "launcher.node.agent"  # what a scheduler runs on each node: its supervisor


class Job(Protocol):
    """A runner's own request object: whatever else it holds, the launch request it runs."""

    @property
    def request(self) -> LaunchRequest: ...


C = TypeVar("C", bound=LauncherBase)
J = TypeVar("J", bound=Job)


class RunnerBase(ABC, Generic[C, J]):
    """A runner of `Config` C whose request object is J (see the module doc)."""

    name: str = ""
    # the run's processes run on this machine, supervised by this command to its end: its
    # console is the run's, its ports are this machine's free ones (reserved, one run at a
    # time); False: a scheduler's nodes run them, and the ports are counted up per node
    runs_here: bool = False

    def __init__(self, config: C):
        self.config = config

    # ------------------------------------------------------------------ what a plan asks
    def more_nodes(self, device: str) -> bool:
        """Whether a plan may span more nodes than this machine (for advice and checks)."""
        return not self.runs_here

    def offer(self) -> Optional[NodeOffer]:
        """What the run's nodes have, as the scheduler says, for cluster.device=auto; None:
        this machine's GPUs are the run's."""
        return None

    def python(self, asks: Mapping[str, EngineAsk] = {}) -> str:
        """The interpreter the run's processes use where they run (`asks`: the engines' resource
        asks, which may put them in a container)."""
        return sys.executable

    def cpus(self) -> tuple[int, ...]:
        """The CPU ids a node lets the run use (vLLM's CPU build binds to them); () unknown."""
        return ()

    @contextmanager
    def ports(self, base_port: Optional[int], dry: bool) -> Iterator[Callable[[], int]]:
        """Counted up from base_port: the nodes are not this machine, nothing to reserve here."""
        yield counted_ports(base_port or DEFAULT_BASE_PORT)

    # ------------------------------------------------------------------ the request
    def notes(self, request: LaunchRequest) -> list[str]:
        """What this runner does with the request otherwise than it was asked (the engines'
        resource asks it cannot honour, a value of the user's it keeps): one line each."""
        return []

    def check(self, request: LaunchRequest) -> list[str]:
        """Refuse (UserError) what this runner cannot run, dry runs the same; return what
        the user should know about running it here (warnings)."""
        self.job(request)
        return []

    @abstractmethod
    def job(self, request: LaunchRequest) -> J:
        """The runner's own request object for `request`: pure, no side effect."""

    @abstractmethod
    def render(self, job: J) -> str:
        """`job` as the dry run prints it (secrets masked)."""

    @abstractmethod
    def execute(self, job: J) -> int:
        """Perform `job` (its request is in the run folder already); the command's exit code."""

    @final
    def dryrun(self, request: LaunchRequest) -> str:
        """Exactly what `run` executes, printable; no side effect."""
        return self.render(self.job(request))

    @final
    def run(self, request: LaunchRequest) -> int:
        """Write the request the nodes read, then execute the object the dry run renders."""
        job = self.job(request)
        run_dir = Path(job.request.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        write_private(run_dir / REQUEST, job.request.to_json())
        return self.execute(job)

    # ------------------------------------------------------------------ a run
    @abstractmethod
    def status(self, record: RunRecord) -> tuple[str, int]:
        """What `areal-launch status` prints, and its exit code."""

    @abstractmethod
    def cancel(self, record: RunRecord) -> str:
        """Stop the run everywhere; say what happened."""

    @abstractmethod
    def logs(self, record: RunRecord, follow: bool, engine: Optional[str]) -> Iterator[str]:
        """The run's log lines, prefixed with each process's name."""


def unhonoured(
    request: LaunchRequest, runner: str, honoured: Collection[str], why: str
) -> list[str]:
    """One note per engine that asks for what `runner` does not honour (EngineAsk.asked names
    them), saying why."""
    out = []
    for name, ask in request.asks.items():
        left = [what for what in ask.asked() if what not in honoured]
        if left:
            out.append(
                f"{ask.key or name}: {', '.join(left)} not honoured by the {runner} runner ({why})"
            )
    return out
