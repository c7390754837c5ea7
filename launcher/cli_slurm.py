"""`areal-launch status|cancel|logs JOB`: the Slurm job commands, added to the typer app.

Thin: each command calls launcher.runners.slurm and prints its text; a user mistake (bad job
id, unknown job, no Slurm) is one `error:` line and exit code 2.
"""
from __future__ import annotations

import sys
from typing import Callable, Optional

import typer

from launcher.errors import LaunchError

EXIT_USAGE = 2


def register(app: typer.Typer) -> None:
    app.command(help="Show a Slurm job's state and its steps (exit 1: Slurm does not know it).")(status)
    app.command(help="Cancel a Slurm job started with launcher=slurm; Slurm stops every step.")(cancel)
    app.command(help="Print a Slurm job's logs, prefixed with each step's name.")(logs)


def status(job: str = typer.Argument(..., help="job id printed at submission")) -> None:
    from launcher.runners import slurm

    text, code = _guarded(lambda: slurm.job_status(job))
    typer.echo(text)
    raise typer.Exit(code)


def cancel(job: str = typer.Argument(..., help="job id printed at submission")) -> None:
    from launcher.runners import slurm

    typer.echo(_guarded(lambda: slurm.cancel(job)))


def logs(job: str = typer.Argument(..., help="job id printed at submission"),
         follow: bool = typer.Option(False, "--follow", "-f", help="keep printing until the job ends"),
         engine: Optional[str] = typer.Option(None, "--engine", "-e",
                                              help="only the steps of this engine (rollout, actor, ...)")) -> None:
    from launcher.runners import slurm

    def lines() -> None:
        for line in slurm.logs(job, follow=follow, engine=engine):
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    try:
        _guarded(lines)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _guarded(call: Callable):
    try:
        return call()
    except LaunchError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
