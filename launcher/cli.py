"""`areal-launch`: plan, launch (local, Slurm or Ray), sweep, and manage runs.

    areal-launch [OVERRIDES...]            resolve, validate, start everything, supervise
    areal-launch -m OVERRIDES...           a Hydra sweep: every point resolved before any starts
    areal-launch plan OVERRIDES... [--json] [--svg FILE]
    areal-launch status|cancel|logs RUN    a run of any runner, by its id or run folder

A user mistake is one `error:` line on stderr and exit code 2; nothing is started.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence

from launcher.errors import LaunchError, error_line

EXIT_USAGE = 2
SUBCOMMANDS = ("plan", "status", "cancel", "logs")

HELP = """\
Usage: areal-launch [OVERRIDES...]                 launch (this machine; launcher=slurm or launcher=ray)
       areal-launch -m KEY=A,B [OVERRIDES...]     sweep: every point validated first, then run/submitted
       areal-launch plan [OVERRIDES...] [--json] [--svg FILE]   show where every process will run
       areal-launch status|cancel|logs RUN        a run: by the id printed at its start, or its folder
       areal-launch --cfg job [OVERRIDES...]      print the composed config (every settable key)

Overrides use Hydra's command-line syntax; every key is declared, no `+` needed.
Engines and their backend strings (<backend>:<dims>, d data, t tensor, p pipeline, c context,
e expert; world = d*t*p*c):
  rollout.backend   sglang:d4t2 | vllm:d2          inference servers, one per d
  actor.backend     fsdp:d8 | megatron:d2p2t2 | archon:d4
  critic.backend, ref.backend, teacher.backend    off by default; "" (or ref=inherit) = actor's
  cluster.num_nodes, cluster.gpus_per_node, cluster.device=auto|cuda|cpu
  cluster.component_placement.actor=0-7           GPU sets: all, a-b, a, lists ('0-2,5,7' quoted)
  rollout.offload=true, actor.offload.weight=true  needed when engines share GPUs
  launcher=slurm launcher.partition=gpu launcher.dry_run=true
  launcher=ray launcher.address=HOST:PORT launcher.detach=true
  model_path=DIR trainer.entry=recipes/grpo/train.py recipe.steps=5
  +launcher.env.NAME=value                        environment for every process (free-form key)
  experiment=gpu1x8_collocated_sglang_fsdp        presets: also gpu2x8_disaggregated_sglang_fsdp,
                                                  gpu2x8_megatron

Examples:
  areal-launch                                                  # the default CPU run (make demo)
  areal-launch plan rollout.backend=sglang:d4t2 actor.backend=fsdp:d8
  areal-launch plan "actor.backend='megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)'" rollout=none cluster=gpu8 \\
      cluster.num_nodes=4
  areal-launch plan cluster=gpu8 actor.backend=fsdp:d8 rollout.backend=sglang:d2t4 \\
      rollout.offload=true actor.offload.weight=true "cluster.component_placement.rollout=all" \\
      "cluster.component_placement.actor=all"
  areal-launch -m actor.backend=fsdp:d2,fsdp:d1 rollout=none
"""


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help", "help"):
        print(HELP, end="")
        raise SystemExit(0)
    if args and args[0] == "plan" and not {"-h", "--help"} & set(args):
        raise SystemExit(run_plan(args[1:]))  # the hot path: no typer start-up cost
    if args and args[0] in SUBCOMMANDS:
        from launcher.commands import app

        app(args=args, prog_name="areal-launch")
        return
    if args and _looks_like_a_command(args[0]):
        raise SystemExit(fail(LaunchError(_unknown_command(args[0]))))
    raise SystemExit(run_launch(args))


def _looks_like_a_command(word: str) -> bool:
    """A bare word where overrides are KEY=VALUE: a mistyped sub-command, not an override."""
    return word.isidentifier() and "=" not in word


def _unknown_command(word: str) -> str:
    import difflib

    close = difflib.get_close_matches(word, SUBCOMMANDS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"unknown command {word!r}{hint}: commands are {', '.join(SUBCOMMANDS)}; a launch "
            "takes KEY=VALUE overrides (areal-launch --help)")


def run_launch(args: list[str]) -> int:
    """The launch command: one run, or a sweep with -m/--multirun."""
    from launcher.launch import launch_one, print_config
    from launcher.sweep import launch_sweep

    cfg_mode, args = _pop_option(args, "--cfg", "-c")
    multirun = any(a in ("-m", "--multirun") for a in args)
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    bad = [a for a in overrides if a.startswith("-")]
    try:
        if bad:
            raise LaunchError(f"unknown option {bad[0]!r}: overrides are KEY=VALUE (see areal-launch --help)")
        if cfg_mode:
            return print_config(overrides, cfg_mode)
        return launch_sweep(overrides) if multirun else launch_one(overrides)
    except LaunchError as exc:
        return fail(exc)


def run_plan(args: list[str]) -> int:
    """`plan [--json] [--svg FILE] OVERRIDES...` (its --help is typer's, in launcher.commands)."""
    from launcher.launch import show_plan

    json_out, svg, overrides = False, None, []
    try:
        rest = iter(args)
        for a in rest:
            if a == "--json":
                json_out = True
            elif a == "--svg" or a.startswith("--svg="):
                svg = a.partition("=")[2] or next(rest, "")
                if not svg:
                    raise LaunchError("--svg needs a file name: areal-launch plan ... --svg map.svg")
            elif a.startswith("-"):
                raise LaunchError(f"unknown option {a!r} for plan: use --json, --svg FILE, or KEY=VALUE overrides")
            else:
                overrides.append(a)
        return show_plan(overrides, json_out, Path(svg) if svg else None)
    except LaunchError as exc:
        return fail(exc)


def fail(exc: BaseException) -> int:
    print(error_line(exc), file=sys.stderr)
    return EXIT_USAGE


def _pop_option(args: list[str], *names: str) -> tuple[Optional[str], list[str]]:
    """Take `--cfg job` / `--cfg=job` out of args (Hydra's flag, kept for the launch command)."""
    out, value, i = [], None, 0
    while i < len(args):
        a = args[i]
        if a in names and i + 1 < len(args):
            value, i = args[i + 1], i + 2
            continue
        if any(a.startswith(n + "=") for n in names):
            value = a.split("=", 1)[1]
        else:
            out.append(a)
        i += 1
    return value, out


if __name__ == "__main__":
    main()
