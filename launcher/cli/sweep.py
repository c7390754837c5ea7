"""Hydra sweeps (`areal-launch -m ...`): Hydra's sweeper picks the points, we run them.

Hydra's sweeper (hydra/sweeper=basic, optuna, ...) expands the command line into points and
hands them, a batch at a time, to a Hydra launcher. Ours (hydra_plugins/areal_launch) passes
each batch to `run_batch`: every point is composed, planned and rehearsed (its processes built,
the runner's checks, a Slurm script rendered) before the first one starts, so a bad point stops
the sweep with nothing started; then the points run one after another here, or are submitted
one Slurm job each. Each run's objective (launcher.trainer.objective) goes back to the sweeper, and
`RECORD` keeps every point for the table that ends the sweep, with the best point.
"""

from __future__ import annotations

import copy
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from launcher.cli.launch import Prepared, build_request, prepare, start
from launcher.node.ports import DEFAULT_BASE_PORT, counted_ports
from launcher.spec.errors import LaunchError, UserError, restated
from launcher.spec.tracking import sweep_id
from launcher.trainer.objective import METRICS_FILE, read_objective

EXIT_FAILED = 1  # a point that could not be started (sbatch refused it, ...)
INTERRUPTED = 128  # exit codes from here on: the launcher got a signal


@dataclass(frozen=True)
class Point:
    """One job of a sweep, as Hydra's sweeper gave it: its number and its overrides."""

    index: int
    overrides: tuple[str, ...]
    label: str  # the overrides that make it this point, as the user typed them


@dataclass
class Outcome:
    point: Point
    result: str  # exit N, job ID, dry run, not started
    run_dir: Path
    code: int
    objective: Optional[float] = None


class RunFailed(Exception):
    """A point's run ended with a non-zero exit code; its own messages said why."""

    def __init__(self, outcome: Outcome):
        super().__init__(
            f"sweep point {outcome.point.index} ({outcome.point.label}): "
            f"{outcome.result} (run folder {outcome.run_dir})"
        )
        self.outcome = outcome


class SweepStopped(Exception):
    """The launcher got a signal during a point: the sweep ends there, the rest not started."""

    def __init__(self, code: int):
        super().__init__(f"interrupted (exit {code})")
        self.code = code


@dataclass
class SweepRecord:
    """Every point of this process's sweep, over all of Hydra's batches."""

    outcomes: list[Outcome] = field(default_factory=list)
    sweep_dir: Optional[Path] = None
    next_port: Optional[int] = None  # the first port no scheduled point has taken yet
    maximize: Optional[bool] = True  # how the sweeper ranks objectives; None: several
    optimises: bool = False  # the sweeper reads objectives (Optuna, ...), not a grid
    given: list[str] = field(default_factory=list)  # the overrides on the command line
    composer: Any = None  # launcher.config.compose.Composer: how the sweep's points compose
    # Hydra's sweeper writes <sweep dir>/multirun.yaml before a point is checked: the folder,
    # and which of it and its parents existed before
    written: Optional[Path] = None
    existed: frozenset[Path] = frozenset()

    def before_sweeper(self, folder: Path) -> None:
        self.written = folder.absolute()
        self.existed = frozenset(p for p in (self.written, *self.written.parents) if p.is_dir())

    def unwrite(self) -> None:
        """A sweep that failed before any point started leaves nothing behind: the sweeper's
        multirun.yaml goes, and the folders to it that it made (when empty)."""
        if self.written is None or self.outcomes:
            return
        (self.written / "multirun.yaml").unlink(missing_ok=True)
        for made in (self.written, *self.written.parents):
            if made in self.existed:
                return
            try:
                made.rmdir()  # only when empty
            except OSError:
                return

    def exit_code(self) -> int:
        return max((o.code for o in self.outcomes), default=0)

    def best(self) -> Optional[Outcome]:
        scored = [o for o in self.outcomes if o.objective is not None and o.code == 0]
        if not scored or self.maximize is None:
            return None
        pick = max if self.maximize else min
        return pick(scored, key=lambda o: o.objective or 0.0)


RECORD = SweepRecord()


def follow_sweeper(sweeper: Any) -> Optional[str]:
    """Take how the sweeper (hydra.sweeper) ranks objectives: Optuna's `direction`; none:
    maximize, as the default objective is a reward. A warning when it minimises that reward."""
    RECORD.optimises = not str(OmegaConf.select(sweeper, "_target_")).endswith(".BasicSweeper")
    direction = OmegaConf.select(sweeper, "direction")
    text = str(direction).rpartition(".")[2].lower() if direction is not None else "maximize"
    if isinstance(direction, (list, tuple)) or OmegaConf.is_list(direction):
        RECORD.maximize = None
        return None
    RECORD.maximize = text != "minimize"
    if not RECORD.maximize:
        return (
            "hydra.sweeper.direction=minimize: the objective is the recipe's final mean "
            "reward (higher is better); add hydra.sweeper.direction=maximize to maximise it"
        )
    return None


# ----------------------------------------------------------------------------- points
def labels(points: Sequence[Sequence[str]], given: Sequence[str]) -> list[str]:
    """Each point in a few words: its overrides not given as such on the command line (the
    swept or sampled ones), as the user would type them."""
    typed = {_meaning(g) for g in given}
    out = []
    for p in points:
        mine = [as_typed(o) for o in p if _meaning(o) not in typed]
        out.append(" ".join(mine) or " ".join(as_typed(o) for o in p) or "(defaults)")
    return out


def _meaning(override: str) -> tuple[str, str]:
    """An override as Hydra reads it (`x=true` and the sweeper's `x=True` are one)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_override(override)
        return (str(parsed.input_line).partition("=")[0], repr(parsed.value()))
    except Exception:  # noqa: BLE001 - not an override Hydra reads: compare the text
        return (override, "")


def as_typed(override: str) -> str:
    """`key=value` without Hydra's backslash escapes, when Hydra reads that back the same."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    key, _, value = override.partition("=")
    plain = key + "=" + re.sub(r"\\(.)", r"\1", value)
    if plain == override:
        return override
    parser = OverridesParser.create()
    try:
        again = parser.parse_override(plain)
        same = (
            not again.is_sweep_override()
            and again.value() == parser.parse_override(override).value()
        )
    except Exception:  # noqa: BLE001 - not readable unescaped: keep Hydra's form
        same = False
    return plain if same else override


# ----------------------------------------------------------------------------- a batch
def run_batch(points: Sequence[Point], compose: Callable[[Point], DictConfig]) -> list[Outcome]:
    """Compose, plan and rehearse every point (an error naming the first bad one: nothing
    started), then start them in turn. SweepStopped when the launcher is interrupted."""
    prepared = [_prepared(p, compose) for p in points]
    outcomes: list[Outcome] = []
    for k, (point, prep) in enumerate(zip(points, prepared)):
        print(
            f"[sweep] point {point.index} ({k + 1} of {len(points)} in this batch): {point.label}",
            file=sys.stderr,
        )
        try:
            code = start(prep)
            result = (
                f"job {prep.job_id}"
                if prep.job_id
                else ("dry run" if prep.dry_run else f"exit {code}")
            )
        except LaunchError as exc:  # e.g. sbatch refused it: the next points are still tried
            print(f"error: sweep point {point.index} ({point.label}): {exc}", file=sys.stderr)
            code, result = EXIT_FAILED, "not started: error above"
        objective = read_objective(prep.run_dir)
        outcomes.append(Outcome(point, result, prep.run_dir, code, objective))
        if code >= INTERRUPTED:
            rest = [
                Outcome(p, "not started", q.run_dir, code)
                for p, q in zip(points[k + 1 :], prepared[k + 1 :])
            ]
            RECORD.outcomes.extend(outcomes + rest)
            raise SweepStopped(code)
    RECORD.outcomes.extend(outcomes)
    _warn_without_objective(outcomes)
    return outcomes


def _prepared(point: Point, compose: Callable[[Point], DictConfig]) -> Prepared:
    """The point resolved and rehearsed, with its run folder <sweep dir>/<subdir>.

    A scheduler's points may run at once on one host (Slurm jobs with launcher.cpus_per_gpu
    share nodes), so each takes its own ports, one range after the other from
    launcher.base_port; points that run here (Runner.runs_here) run in turn and reserve free
    ports as they start."""
    try:
        cfg = compose(point)
        prep = prepare(list(point.overrides), composed=cfg, composer=RECORD.composer)
        prep.point = point.index
        sweep_dir = Path(prep.run.sweep_dir).absolute()
        RECORD.sweep_dir = RECORD.sweep_dir or sweep_dir
        prep.sweep = sweep_id(str(RECORD.sweep_dir))
        prep.run_dir = sweep_dir / str(OmegaConf.select(cfg, "hydra.sweep.subdir"))
        if prep.runner.runs_here:
            rehearse(prep)
        else:
            launcher = prep.run.config.launcher
            base = RECORD.next_port or launcher.base_port or DEFAULT_BASE_PORT
            launcher.base_port = base
            RECORD.next_port = base + rehearse(prep)
            if RECORD.next_port > 65536:
                raise UserError(
                    f"the points need ports {base}..{RECORD.next_port - 1}, past "
                    "65535: set a lower launcher.base_port"
                )
    except LaunchError as exc:
        raise restated(
            exc, f"sweep point {point.index} ({point.label}): {exc}; nothing was started"
        ) from None
    return prep


def rehearse(prep: Prepared) -> int:
    """Build a point's request (processes, and for Slurm its script) without starting anything:
    engine option and script errors then stop a sweep before its first point starts. Returns
    how many ports the point takes, counted up from launcher.base_port."""
    base = prep.run.config.launcher.base_port or DEFAULT_BASE_PORT
    taken: list[int] = []
    counted = counted_ports(base)

    def take() -> int:
        taken.append(counted())
        return taken[-1]

    _, request = build_request(prep, prep.run_dir, take)
    prep.runner.check(request)
    return len(taken)


def _warn_without_objective(outcomes: Sequence[Outcome]) -> None:
    """A sweeper that optimises gets None from a point: say why, once per point."""
    if not RECORD.optimises:
        return
    for o in outcomes:
        if o.code != 0 or o.objective is not None:
            continue
        why = (
            f"was submitted ({o.result}) and ends later: a sweeper that optimises needs runs "
            "that end while it waits (launcher=local)"
            if o.result.startswith("job")
            else f"wrote no objective ({o.run_dir}/{METRICS_FILE}); the default recipe writes it"
            if o.result.startswith("exit")
            else "was a dry run: it has no objective"
        )
        print(f"warning: sweep point {o.point.index} {why}", file=sys.stderr)


# ----------------------------------------------------------------------------- another launcher
def run_hydra_job(cfg: DictConfig) -> Optional[float]:
    """The task function Hydra's own launchers (hydra/launcher=basic, ...) call for each point,
    inside the folder Hydra made for it: the run, without a rehearsal of the whole batch."""
    from hydra.core.hydra_config import HydraConfig

    hydra = HydraConfig.get()
    composed = copy.deepcopy(cfg)
    with open_dict(composed):
        composed.hydra = hydra
    overrides = [str(o) for o in hydra.overrides.task]
    index = int(hydra.job.num)
    point = Point(index, tuple(overrides), labels([overrides], RECORD.given)[0])
    prep = prepare(overrides, composed=composed, composer=RECORD.composer)
    prep.point = index
    prep.run_dir = Path(hydra.runtime.output_dir)
    RECORD.sweep_dir = RECORD.sweep_dir or prep.run_dir.parent
    prep.sweep = sweep_id(str(RECORD.sweep_dir))
    code = start(prep, own_folder=True)
    outcome = Outcome(
        point,
        f"job {prep.job_id}" if prep.job_id else f"exit {code}",
        prep.run_dir,
        code,
        read_objective(prep.run_dir),
    )
    RECORD.outcomes.append(outcome)
    if code:
        raise RunFailed(outcome)
    return outcome.objective


# ----------------------------------------------------------------------------- the end
def picture(record: SweepRecord) -> Optional[str]:
    """`<sweep folder>/sweep.png`: every point's logged metrics in one picture (matplotlib,
    here); a line saying where it is, or why there is none; None when no point logged any."""
    from launcher.spec.tracking import SWEEP_PICTURE
    from launcher.trainer.plot import PlotUnavailable, draw_sweep
    from launcher.trainer.tracking import read_metrics

    points = [
        (f"{o.point.index}: {o.point.label}", read_metrics(o.run_dir)) for o in record.outcomes
    ]
    points = [p for p in points if p[1]]
    if not points or record.sweep_dir is None:
        return None
    try:
        path = draw_sweep(points, record.sweep_dir / SWEEP_PICTURE, str(record.sweep_dir))
    except PlotUnavailable as exc:
        return f"sweep picture: {exc}"
    return f"sweep picture: {path}"


def summary(record: SweepRecord) -> str:
    """Plain aligned text: nothing is cut, so run folders and job ids can be copied. An
    objective column when any point has one; the best point last."""
    scored = any(o.objective is not None for o in record.outcomes)
    head = ["point", "overrides", "job id / exit code"] + (["objective"] if scored else [])
    table = [head + ["run folder"]]
    for o in record.outcomes:
        row = [str(o.point.index), o.point.label, o.result]
        if scored:
            row.append("-" if o.objective is None else f"{o.objective:.6g}")
        table.append(row + [str(o.run_dir)])
    n = len(head)
    widths = [max(len(r[c]) for r in table) for c in range(n)]
    lines = ["  ".join(r[c].ljust(widths[c]) for c in range(n)) + "  " + r[n] for r in table]
    out = [f"sweep: {len(record.outcomes)} points in {record.sweep_dir}"] + lines
    best = record.best()
    if best is not None:
        out.append(
            f"best: point {best.point.index} ({best.point.label}) objective "
            f"{best.objective:.6g}, run folder {best.run_dir}"
        )
    return "\n".join(out)
