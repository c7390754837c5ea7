"""`areal-launch`: plan, launch (local, Slurm or Ray), sweep, and manage runs.

    areal-launch [HYDRA FLAGS] [OVERRIDES...]   a Hydra app (launcher.cli.app): launch, -m sweep,
                                                --cfg, --info, -cd DIR, --shell-completion, ...
    areal-launch plan [FLAGS] OVERRIDES...      the hot path: no typer, no argparse start-up
    areal-launch status|cancel|logs RUN         a run of any runner, by its id or run folder

A user mistake (UserError) is one `error:` line on stderr and exit code 2; nothing is started.
A failure on a node or of a scheduler (LaunchError) is one `error:` line too
(docs/architecture.md §14).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from launcher.cli.flags import PLAN_FLAGS, Flag, exit_code, parse_flags
from launcher.spec.errors import LaunchError, UserError, error_line

SUBCOMMANDS = ("plan", "status", "cancel", "logs")


PLAN_HELP = """\
Usage: areal-launch plan [FLAGS] [OVERRIDES...]

Resolve OVERRIDES (Hydra syntax, as for a launch) and show where every process will run: the
table and the GPU map, or the plan JSON. Starts nothing.

Flags:
{flags}
Examples:
  areal-launch plan cluster=gpu8 cluster.num_nodes=2 rollout.backend=sglang:d4t2 \\
      actor.backend=fsdp:d8
  areal-launch plan cluster=gpu8 actor.backend=fsdp:d4 rollout.backend=sglang:d2t2 --json
  areal-launch plan -cd ~/my-configs experiment=my_preset
  areal-launch plan --suggest cluster=gpu8 cluster.num_nodes=2 cluster.gpu_type=h100
"""


def main(argv: Optional[Sequence[str]] = None) -> None:
    tolerant_streams()
    try:
        _main(argv)
    except BrokenPipeError:  # `areal-launch plan | head`: the reader has what it wanted
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0) from None


def tolerant_streams() -> None:
    """Output never assumes UTF-8: where stdout/stderr cannot encode a character (LANG=C,
    PYTHONIOENCODING=ascii) it is written escaped, never a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if encoding != "utf8" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def _main(argv: Optional[Sequence[str]] = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["help"]:
        args[0] = "--help"
    if args[:1] == ["plan"]:
        raise SystemExit(run_plan(args[1:]))  # the hot path: no typer start-up cost
    if args and args[0] in SUBCOMMANDS:
        from launcher.cli.commands import app

        app(args=args, prog_name="areal-launch")
        return
    raise SystemExit(guarded(lambda: launch_command(args)))


def launch_command(args: list[str]) -> int:
    from launcher.cli.app import run_app

    first = next((a for a in args if not a.startswith("-")), None)
    if args and first == args[0] and _looks_like_a_command(first):
        raise UserError(_unknown_command(first))
    return run_app(args, SUBCOMMANDS)


def _looks_like_a_command(word: str) -> bool:
    """A bare word where overrides are KEY=VALUE: a mistyped sub-command, not an override."""
    return word.isidentifier() and "=" not in word


def _unknown_command(word: str) -> str:
    import difflib

    close = difflib.get_close_matches(word, SUBCOMMANDS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"unknown command {word!r}{hint}: commands are {', '.join(SUBCOMMANDS)}; a launch "
        "takes KEY=VALUE overrides (areal-launch --help)"
    )


def run_plan(args: list[str]) -> int:
    """`plan [FLAGS] OVERRIDES...`."""
    if {"-h", "--help"} & set(args):
        print(PLAN_HELP.format(flags="".join(map(flag_help, PLAN_FLAGS))), end="")
        return 0

    def plan() -> int:
        from launcher.cli.launch import show_plan, show_suggestions
        from launcher.config.compose import Composer, ConfigSource

        given, overrides = parse_flags(args, PLAN_FLAGS, "plan")
        source = ConfigSource(
            given.get("config_path"), given.get("config_name") or "config", given.get("config_dir")
        )
        composer = Composer(source)
        if given.get("suggest"):
            return show_suggestions(overrides, composer)
        svg = given.get("svg")
        return show_plan(overrides, bool(given.get("json")), Path(svg) if svg else None, composer)

    return guarded(plan)


def flag_help(flag: Flag) -> str:
    """One flag in `plan --help`: its spellings, then its help wrapped under them."""
    import textwrap

    names = f"  {', '.join(flag.names)}{' ' + flag.metavar if flag.metavar else ''}\n"
    return (
        names
        + textwrap.fill(flag.help, 94, initial_indent=" " * 6, subsequent_indent=" " * 6)
        + "\n"
    )


def guarded(call: Any) -> int:
    """`call()`'s exit code; an error the launcher says (a UserError, or a LaunchError from a
    node or a scheduler) as one `error:` line and its exit code (cli.flags.exit_code)."""
    try:
        return int(call())
    except LaunchError as exc:
        print(error_line(exc), file=sys.stderr)
        return exit_code(exc)


if __name__ == "__main__":
    main()
