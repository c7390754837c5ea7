"""Typer sub-commands: `plan` (and the Slurm job commands, registered from the Slurm runner)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from launcher.errors import LaunchError

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
    from launcher.cli import fail

    overrides = list(ctx.args)
    try:
        bad = [a for a in overrides if a.startswith("-")]
        if bad:
            raise LaunchError(f"unknown option {bad[0]!r} for plan: use --json, --svg FILE, or KEY=VALUE overrides")
        code = show_plan(overrides, json_out, svg)
    except LaunchError as exc:
        code = fail(exc)
    raise typer.Exit(code)


def show_plan(overrides: list[str], json_out: bool, svg: Optional[Path]) -> int:
    from launcher.launch import DEFAULT_BASE_PORT, counting_ports, prepare, warn, with_processes

    prep = prepare(overrides)
    base = prep.cfg.launcher.base_port or DEFAULT_BASE_PORT
    the_plan = with_processes(prep, counting_ports(base))
    warn(the_plan)
    if svg is not None:
        from launcher.render import render_svg

        svg.write_text(render_svg(the_plan))
    if json_out:
        sys.stdout.write(the_plan.to_json() + "\n")
        return 0
    from rich.console import Console

    from launcher.render import render_gpu_map, render_table

    console = Console()
    console.print(render_table(the_plan))
    console.print(render_gpu_map(the_plan))
    return 0


def _register_slurm() -> None:
    try:
        from launcher.cli_slurm import register
    except ImportError:
        return
    register(app)


_register_slurm()
