"""Typer sub-commands: `status`, `cancel`, `logs` for runs of every runner (`plan` is
launcher.cli.main's own fast path; the launch is a Hydra app, launcher.cli.app).

Thin: `status|cancel|logs RUN` find the run by the id a runner printed (a Slurm job id, a local
run id, ...) or by its run folder (launcher.node.runs), ask the runner that started it, and print
its text. A user mistake (no id, a bad id, an unknown run, no Slurm) is one `error:` line and
exit code 2, and so is a scheduler that refuses or does not answer (docs/architecture.md §14).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Optional, TypeVar

import typer

from launcher.cli.flags import exit_code
from launcher.node.runs import RunRecord
from launcher.runners import Runner
from launcher.spec.errors import LaunchError, UserError, error_line

T = TypeVar("T")

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    rich_markup_mode=None,
    help="areal-launch: plan and launch RL post-training engines.",
)

RUN_HELP = "the id areal-launch printed when it started the run, or its run folder"


@app.callback()
def _group() -> None:
    """Sub-commands of areal-launch (the launch itself is `areal-launch OVERRIDES`; see
    `areal-launch --help`)."""


@app.command()
def status(
    run: Optional[str] = typer.Argument(None, help=RUN_HELP),
    plot: bool = typer.Option(
        False,
        "--plot",
        help="also draw the run's metrics "
        "(reward, loss, step time; restarts and requeues marked) "
        "into <run folder>/metrics.png",
    ),
) -> None:
    """Show a run's state: its processes (or Slurm steps), how it ended, its run folder, its
    metrics and where its trackers are."""
    runner, record = _guarded(lambda: _runner(run, "status"))
    text, code = _guarded(lambda: runner.status(record))
    typer.echo(text)
    if plot:
        typer.echo(f"picture: {picture(Path(record.run_dir))}")
    raise typer.Exit(code)


def picture(run_dir: Path) -> str:
    """Draw `<run folder>/metrics.png` (matplotlib, here); its path, or why there is none."""
    from launcher.node import restarts
    from launcher.spec.tracking import METRICS_JSONL, PICTURE
    from launcher.trainer.plot import PlotUnavailable, draw
    from launcher.trainer.tracking import read_metrics

    records = read_metrics(run_dir)
    if not records:
        return f"none: the run logged no metrics ({run_dir / METRICS_JSONL})"
    labels = {
        r.epoch: f"{'requeue' if r.kind == restarts.REQUEUE else 'restart'} {r.n}"
        for r in restarts.read_all(run_dir)
        if r.kind in (restarts.TRAINERS, restarts.REQUEUE)
    }
    try:
        return str(draw(records, run_dir / PICTURE, run_dir.name, labels))
    except PlotUnavailable as exc:
        return str(exc)


@app.command()
def cancel(run: Optional[str] = typer.Argument(None, help=RUN_HELP)) -> None:
    """Stop a run on every node (a Slurm job is scancel'ed)."""
    runner, record = _guarded(lambda: _runner(run, "cancel"))
    typer.echo(_guarded(lambda: runner.cancel(record)))


@app.command()
def logs(
    run: Optional[str] = typer.Argument(None, help=RUN_HELP),
    follow: bool = typer.Option(False, "--follow", "-f", help="keep printing until the run ends"),
    engine: Optional[str] = typer.Option(
        None, "--engine", "-e", help="only the processes of this engine (rollout, actor, ...)"
    ),
) -> None:
    """Print a run's logs, each line prefixed with its process's name."""
    runner, record = _guarded(lambda: _runner(run, "logs"))

    def lines() -> None:
        for line in runner.logs(record, follow, engine):
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    try:
        _guarded(lines)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _runner(run: Optional[str], verb: str) -> tuple[Runner, RunRecord]:
    from launcher import runners

    if run is None:
        raise UserError(f"{verb} needs a run: areal-launch {verb} JOB_ID (or RUN_FOLDER)")
    return runners.find(run)


def _guarded(call: Callable[[], T]) -> T:
    try:
        return call()
    except LaunchError as exc:  # a mistake, or a scheduler that does not answer: one line
        typer.echo(error_line(exc), err=True)
        raise typer.Exit(exit_code(exc)) from None
