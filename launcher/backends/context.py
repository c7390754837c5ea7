"""What backends need beyond the plan and the engines' options, supplied by the runner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from launcher.spec.errors import LaunchError

PORT_DRAWS = 64  # how many extra ports ports_in_a_row may draw before giving up


@dataclass
class LaunchContext:
    """What engines need beyond the plan, supplied by the runner (the only I/O-aware part).

    next_port: returns a fresh port each call (local runner: reserved and locked; plans and
    Slurm scripts: counts up from a base). Hosts are not here: backends write the placeholder
    of node k (launcher.spec.process.host_placeholder) and each node's supervisor fills it in.
    cpus: the CPU ids one node lets its processes use (local runner: os.sched_getaffinity);
    vLLM's CPU build binds each tp rank to a share of them. Empty: one CPU per GPU slot,
    numbered from 0.
    """

    run_dir: str
    plan_path: str
    python: str  # interpreter for `python -m ...` entry points (the venv's)
    next_port: Callable[[], int]
    extra_env: dict[str, str] = field(default_factory=dict)
    cpus: tuple[int, ...] = ()
    # the trackers' identity (launcher.spec.tracking): trainers only, kept by every restart
    trainer_env: dict[str, str] = field(default_factory=dict)
    engine_env: dict[str, dict[str, str]] = field(default_factory=dict)  # <engine>.env

    def env_for(self, *components: str) -> dict[str, str]:
        """The user's environment for a process of `components`: launcher.env, then each
        one's own `<engine>.env` (a collocated trainer job holds several)."""
        out = dict(self.extra_env)
        for name in components:
            out.update(self.engine_env.get(name, {}))
        return out

    def ports_in_a_row(self, count: int) -> int:
        """The first of `count` consecutive reserved ports (SGLang derives ports from one).

        Drawn from next_port, which counts up (PortReserver, dry runs), so this normally
        takes exactly `count` ports; ports drawn on the way stay reserved and unused.
        """
        first = last = self.next_port()
        for _ in range(count + PORT_DRAWS):
            if last - first + 1 == count:
                return first
            port = self.next_port()
            if port != last + 1:
                first = port
            last = port
        raise LaunchError(
            f"could not reserve {count} consecutive ports for an SGLang server "
            f"(set launcher.base_port to a quieter range)"
        )
