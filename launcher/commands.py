"""Typer sub-commands: `plan` (and the Slurm job commands, registered from the Slurm runner)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


app = typer.Typer(add_completion=False, no_args_is_help=False, rich_markup_mode=None,
                  help="areal-launch: plan and launch RL post-training engines.")

_EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.callback()
def _group() -> None:
    """Sub-commands of areal-launch (the launch itself is `areal-launch OVERRIDES`)."""


@app.command(context_settings=_EXTRA)
def plan(ctx: typer.Context,
         json_out: bool = typer.Option(False, "--json", help="print the plan JSON (schema 1)"),
         svg: Optional[Path] = typer.Option(None, "--svg", help="write the GPU map as SVG to FILE")) -> None:
    """Resolve OVERRIDES (Hydra syntax) and show where every process will run; start nothing.

    Examples: areal-launch plan rollout.backend=sglang:d4t2 actor.backend=fsdp:d8
              areal-launch plan cluster=gpu8 actor.backend=fsdp:d4 rollout.backend=sglang:d2t2 --json
    """
    from launcher.cli import run_plan

    flags = (["--json"] if json_out else []) + (["--svg", str(svg)] if svg is not None else [])
    raise typer.Exit(run_plan(flags + list(ctx.args)))


from launcher.cli_slurm import register  # noqa: E402 - status, cancel, logs

register(app)
