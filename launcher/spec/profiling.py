"""What a run profiles (`cluster.profiling`, docs/architecture.md §18), as the plan carries it
to its processes, and the two ways of recording it:

    nsight   the named components' processes run under `nsys profile` (RLinf's rendering of
             options and flags), one report per process: <output_dir>/<process>-<pid>.nsys-rep
    torch    the default recipe records torch.profiler's chrome trace of each named step on
             each trainer rank: <output_dir>/<component>-rank<r>-step<s>.json

The plan holds the record in its run facts (`profiling`); nothing here touches the disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from launcher.spec.codec import JsonRecord, from_json, to_json

TORCH, NSIGHT = "torch", "nsight"
BACKENDS = (TORCH, NSIGHT)
PROFILES = "profiles"  # <run folder>/profiles: where the reports go unless output_dir says
META_KEY = "profiling"  # the plan's run fact that holds the record
NSYS = ("nsys", "profile")
OUTPUT = "--output="  # nsys's -o, written long: the last token of nsys's own (unwrapped)
MAX_STEP = 10**7  # a step number past any run's
MAX_STEPS_LISTED = 4096
# the options that gate nsys on the trainers' cudaProfilerStart/Stop around the named steps
# (RLinf's own defaults for `steps`); several steps: a report for each (repeat)
CAPTURE_RANGE = "capture-range"
CAPTURE_RANGE_END = "capture-range-end"


@dataclass(frozen=True)
class Profiling(JsonRecord):
    """What is profiled: `components` (resolved: never empty), at `steps` (empty: every step),
    into `output_dir`; nsys's `options` (name -> value) and `flags` for nsight."""

    backend: str
    components: tuple[str, ...]
    output_dir: str
    steps: tuple[int, ...] = ()
    options: dict[str, str] = field(default_factory=dict)
    flags: tuple[str, ...] = ()

    def covers(self, component: str) -> bool:
        """Whether a process of `component` ("actor" or a shared job's "actor,ref") is."""
        return any(c in self.components for c in component.split(","))

    def at(self, step: int) -> bool:
        """Whether step `step` (the recipe's global step, 1 first) is recorded."""
        return not self.steps or step in self.steps

    def trace_path(self, component: str, rank: int, step: int) -> str:
        """The torch backend's chrome trace of `rank` of `component` at `step`."""
        return f"{self.output_dir}/{component}-rank{rank}-step{step}.json"

    def nsys_argv(self, process: str, argv: Sequence[str], trainer: bool) -> tuple[str, ...]:
        """`argv` under `nsys profile` as RLinf renders it (flags, then options: a one-letter
        name `-t v`, a longer one `--name=v`, then the report's name: `--output=` the process's
        name and its pid, so a restart writes another). A trainer's capture is gated on the recipe's
        cudaProfilerStart/Stop around the named steps; a server's or worker's is its life."""
        options = dict(self.options)
        if self.steps and trainer:
            options.setdefault(CAPTURE_RANGE, "cudaProfilerApi")
            options.setdefault(CAPTURE_RANGE_END, "stop" if len(self.steps) == 1 else "repeat")
        tokens = [f"--{f}" if len(f) > 1 else f"-{f}" for f in self.flags]
        for name, value in options.items():
            tokens += [f"--{name}={value}"] if len(name) > 1 else [f"-{name}", value]
        return (*NSYS, *tokens, f"{OUTPUT}{self.output_dir}/{process}-%p", *argv)

    @classmethod
    def of_plan(cls, meta: Mapping[str, Any]) -> Optional["Profiling"]:
        """The record in a plan's run facts (None: nothing is profiled)."""
        found = meta.get(META_KEY)
        return from_json(cls, found) if isinstance(found, Mapping) else None

    def as_meta(self) -> dict[str, Any]:
        return {META_KEY: to_json(self)}


def unwrapped(argv: Sequence[str]) -> tuple[str, ...]:
    """The process's own argv inside `nsys_argv`'s (argv itself when it is not wrapped): what
    the preflight asks of its interpreter and entry."""
    if tuple(argv[: len(NSYS)]) != NSYS:
        return tuple(argv)
    for i, token in enumerate(argv):
        if token.startswith(OUTPUT):
            return tuple(argv[i + 1 :])
    return tuple(argv)
