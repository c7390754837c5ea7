"""The command line's own flags (`plan`'s table, read by the fast path and by the Hydra app)
and the exit codes every entry shares for an error the launcher says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from launcher.spec.errors import LaunchError, UserError

EXIT_USAGE = 2  # a user mistake (UserError): one `error:` line on stderr, nothing started
# a failure on a node or of a scheduler (LaunchError): one `error:` line too, and 2, the code it
# has always had, so scripts that read 2 for "areal-launch said why" keep working
EXIT_FAILURE = 2


def exit_code(exc: LaunchError) -> int:
    """The exit code of a command that ends with `exc` (printed as its one `error:` line)."""
    return EXIT_USAGE if isinstance(exc, UserError) else EXIT_FAILURE


@dataclass(frozen=True)
class Flag:
    """One flag of `plan`: its spellings, where its value goes, and its help."""

    names: tuple[str, ...]
    dest: str
    metavar: Optional[str]  # None: a switch
    help: str


# `plan`'s flags: a new one is one row here (its help and the parser follow)
PLAN_FLAGS = (
    Flag(("--json",), "json", None, "print the plan JSON (schema 1) instead of the table"),
    Flag(("--svg",), "svg", "FILE", "also write the GPU map as SVG to FILE"),
    Flag(
        ("--suggest",),
        "suggest",
        None,
        "print the layouts that fit this model on this cluster, best first, as commands to "
        "paste; ranked by a throughput proxy, score = sqrt(generation x training): "
        "generation = rollout instances x the KV tokens each can use (capped at 512K), "
        "training = actor.mb_spec.max_tokens_per_mb x the actor's data parallel size; "
        "collocated layouts count half (their phases take turns)",
    ),
    Flag(
        ("--config-dir", "-cd"),
        "config_dir",
        "DIR",
        "a folder of your own configs (presets, clusters, whole configs), as Hydra's -cd",
    ),
    Flag(
        ("--config-name", "-cn"),
        "config_name",
        "NAME",
        "the primary config (default: config), as Hydra's -cn",
    ),
    Flag(
        ("--config-path", "-cp"),
        "config_path",
        "DIR",
        "the primary config's folder instead of launcher/conf, as Hydra's -cp",
    ),
)


def parse_flags(
    args: list[str], flags: Sequence[Flag], command: str
) -> tuple[dict[str, Any], list[str]]:
    """`--flag`, `--flag VALUE` and `--flag=VALUE` from a table; the rest are overrides."""
    by_name = {n: f for f in flags for n in f.names}
    given: dict[str, Any] = {}
    overrides: list[str] = []
    rest = iter(args)
    for a in rest:
        name, eq, value = a.partition("=")
        flag = by_name.get(name) if a.startswith("-") else None
        if flag is None:
            if a.startswith("-"):
                raise UserError(
                    f"unknown option {a!r} for {command}: flags are "
                    f"{', '.join(f.names[0] for f in flags)}; the rest are "
                    "KEY=VALUE overrides"
                )
            overrides.append(a)
        elif flag.metavar is None:
            given[flag.dest] = True
        else:
            given[flag.dest] = value if eq else next(rest, "")
            if not eq and given[flag.dest].startswith("-"):  # `--svg --json`: not a FILE
                raise UserError(
                    f"{name} needs a {flag.metavar}, not the flag "
                    f"{given[flag.dest]!r}: areal-launch {command} ... {name} "
                    f"{flag.metavar} (or {name}=./{given[flag.dest]})"
                )
            if not given[flag.dest]:
                raise UserError(
                    f"{name} needs a {flag.metavar}: areal-launch {command} ... "
                    f"{name} {flag.metavar}"
                )
    return given, overrides
