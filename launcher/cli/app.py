"""The launch command as a Hydra app: Hydra's own command line, flags and semantics.

`areal-launch [FLAGS] [OVERRIDES]` is parsed by Hydra's own argument parser and dispatched as
Hydra's `_run_hydra` does (--help, --hydra-help, --version, --cfg/--package/--resolve, --info,
--shell-completion, -m, -cd/-cn/-cp, hydra.* overrides), with two differences that are the
launcher's promises: every user mistake is one `error:` line and exit code 2, because the config
is composed (and every sweep point rehearsed) before Hydra prints or starts anything; and one run
composes, plans and checks before its run folder exists, where `@hydra.main` would make the
folder first (so a single run does not go through Hydra's run_job; its folder still is
hydra.run.dir, with Hydra's .hydra/ record in it).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from typing import Any, NoReturn, Optional

from launcher.cli.flags import PLAN_FLAGS, exit_code
from launcher.config.compose import Composer, ConfigSource, resolved
from launcher.spec.errors import LaunchError, UserError, error_line

COMMANDS = ("run", "multirun", "cfg", "shell_completion", "info")
EXIT_SWEEPER = 1  # the sweeper ended a sweep that had started points
SHELLS_SEP = {"fish": "\n"}  # how a shell's completion query lists candidates (else spaces)


def hydra_parser() -> argparse.ArgumentParser:
    """Hydra's own parser, named areal-launch, whose mistakes raise UserError (one line)."""
    from launcher.config.hydra_private import args_parser

    parser = args_parser()
    parser.prog = "areal-launch"

    def error(message: str) -> NoReturn:
        raise UserError(f"{message} (areal-launch --help)")

    parser.error = error  # type: ignore[method-assign]
    return parser


def version() -> str:
    from hydra import __version__ as hydra_version

    from launcher import __version__

    return f"areal-launch {__version__} (Hydra {hydra_version})"


def run_app(args: list[str], subcommands: tuple[str, ...] = ()) -> int:
    """The launch command; returns its exit code (a UserError or LaunchError: the caller
    prints one line)."""
    from launcher.config import hydra_private

    if "--version" in args:  # Hydra's own parser would name Hydra alone
        print(version())
        return 0
    parser = hydra_parser()
    ns = parser.parse_intermixed_args(args)
    overrides: list[str] = list(ns.overrides)
    if ns.shell_completion:
        return completion(overrides, subcommands)
    composer = Composer(source_of(ns))
    if ns.experimental_rerun:
        raise UserError(
            "--experimental-rerun: not supported; run again with the overrides a run folder "
            "keeps in .hydra/overrides.yaml"
        )
    if ns.resolve and ns.cfg is None and not ns.help:
        raise UserError("--resolve works with --cfg or --help (Hydra's rule)")
    if ns.help or ns.hydra_help:
        validated(composer, overrides)
        resolved(
            lambda: hydra_private.show_help(
                composer.hydra, composer.config_name, parser, ns, bool(ns.hydra_help)
            ),
            overrides,
        )
        return 0
    chosen = [c for c in COMMANDS if getattr(ns, c)]
    if len(chosen) > 1:
        raise UserError(
            "only one of --run, --multirun, --cfg, --info and --shell-completion at a time "
            "(Hydra's rule)"
        )
    if ns.cfg:
        return show_config(composer, overrides, ns.cfg, ns.package, ns.resolve)
    if ns.info:
        validated(composer, overrides)
        hydra_private.show_info(composer.hydra, ns.info, composer.config_name, overrides)
        return 0
    if ns.multirun or (
        not ns.run and hydra_private.is_multirun(composer.hydra, composer.config_name, overrides)
    ):
        return multirun(composer, overrides)
    from launcher.cli.launch import prepare, start

    return start(prepare(overrides, composer=composer))


def source_of(ns: argparse.Namespace) -> ConfigSource:
    return ConfigSource(ns.config_path, ns.config_name or "config", ns.config_dir)


def validated(composer: Composer, overrides: list[str]) -> None:
    """Compose and type once ourselves, so a mistake is our one line before Hydra prints
    anything."""
    from launcher.config.run import run_spec

    run_spec(composer, composer.compose(overrides, with_hydra=True))


def show_config(
    composer: Composer, overrides: list[str], kind: str, package: Optional[str], resolve: bool
) -> int:
    """--cfg job|hydra|all [--package P] [--resolve]: Hydra's printing of the config as the
    run sees it (config.shown.shown_config)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import Container, OmegaConf

    from launcher.config.hydra_private import sanitized
    from launcher.config.shown import shown_config

    validated(composer, overrides)
    cfg = composer.compose(overrides, with_hydra=True)
    if package not in (None, "_global_") and OmegaConf.select(cfg, str(package)) is None:
        raise UserError(f"--package {package}: no such package in the config (try --cfg job)")
    HydraConfig.instance().set_config(cfg)  # for ${hydra:...}
    cfg = sanitized(composer.hydra, shown_config(cfg), kind)
    found = cfg if package in (None, "_global_") else OmegaConf.select(cfg, str(package))
    if not isinstance(found, Container):
        print(found)
        return 0
    if package not in (None, "_global_"):
        print(f"# @package {package}")
    if resolve:
        resolved(lambda: OmegaConf.resolve(found), overrides)
    sys.stdout.write(OmegaConf.to_yaml(found))
    return 0


# ----------------------------------------------------------------------------- -m
def multirun(composer: Composer, overrides: list[str]) -> int:
    """Hydra's multirun: its sweeper (hydra/sweeper) and launcher (hydra/launcher; ours by
    default); the table of every point ends it, with the best one."""
    from launcher.cli.sweep import RECORD, RunFailed, SweepStopped, picture, run_hydra_job, summary
    from launcher.config.compose import check_overrides
    from launcher.config.hydra_errors import flatten
    from launcher.config.hydra_private import multirun as hydra_multirun

    check_overrides(overrides)
    RECORD.given = list(overrides)
    RECORD.composer = composer
    code = 0
    try:
        hydra_multirun(
            composer.hydra, composer.config_name, run_hydra_job, [*overrides, "hydra.mode=MULTIRUN"]
        )
    except (RunFailed, SweepStopped):
        pass  # the run said why, the table below says which
    except LaunchError as exc:  # a bad point: before the first one, the sweep's one line
        if not RECORD.outcomes:
            RECORD.unwrite()
            raise
        print(error_line(exc), file=sys.stderr)
        code = exit_code(exc)
    except Exception as exc:  # composing (nothing started yet), or the sweeper's own end
        failure = exc
        if not RECORD.outcomes:
            RECORD.unwrite()
            composer.explained(lambda: _raise(failure), overrides)
        print(f"error: the sweeper stopped: {flatten(exc)}", file=sys.stderr)
        code = EXIT_SWEEPER
    finally:
        if RECORD.outcomes:
            drawn = picture(RECORD)
            if drawn:
                print(drawn, file=sys.stderr)
            print(summary(RECORD), file=sys.stderr)
    return max(code, RECORD.exit_code())


def _raise(exc: BaseException) -> Any:
    raise exc


# ----------------------------------------------------------------------------- completion
def completion(overrides: list[str], subcommands: tuple[str, ...]) -> int:
    """`-sc install=SHELL|uninstall=SHELL|query=SHELL`: Hydra's completion plugins. A query
    completes the line in $COMP_LINE with the folders its own -cd/-cp/-cn name; after `plan`
    it completes plan's overrides; as the first word it offers the sub-commands too."""
    from launcher.config.hydra_errors import flatten
    from launcher.config.hydra_private import shell_completion

    verb, _, shell = overrides[0].partition("=") if len(overrides) == 1 else ("", "", "")
    if verb not in ("install", "uninstall", "query") or not shell:
        raise UserError(
            "--shell-completion takes one of install=SHELL, uninstall=SHELL, "
            "query=SHELL (SHELL: bash, zsh, fish), e.g. "
            'eval "$(areal-launch -sc install=bash)"'
        )
    if verb != "query":  # Hydra prints the shell's script
        try:
            shell_completion(Composer().hydra, "config", overrides)
        except ValueError as exc:  # a shell Hydra has no plugin for
            raise UserError(f"--shell-completion {overrides[0]}: {flatten(exc)}") from None
        return 0
    query = shell
    found = _candidates(os.environ.get("COMP_LINE", ""), overrides, subcommands)
    print(SHELLS_SEP.get(query, " ").join(found))
    return 0


def _candidates(line: str, overrides: list[str], subcommands: tuple[str, ...]) -> list[str]:
    """What to offer after `line`; nothing (never an error on the user's terminal) when the
    line does not compose yet."""
    from launcher.config.hydra_private import shell_completion

    app, _, rest = line.lstrip().partition(" ")
    words = rest.split()
    first = len(words) <= 1 and not rest.endswith(" ")
    extra = [s for s in subcommands if s.startswith(rest.strip())] if first else []
    if words and words[0] in subcommands and not first:
        if words[0] != "plan":
            return []  # status|cancel|logs take a run id: nothing to complete
        rest = " ".join(_without_plan_flags(words[1:])) + (" " if rest.endswith(" ") else "")
    try:
        ns, _ = hydra_parser().parse_known_args(rest.split())
        composer = Composer(source_of(ns))
        out = io.StringIO()
        os.environ["COMP_LINE"] = f"{app} {rest}"
        with contextlib.redirect_stdout(out):
            shell_completion(composer.hydra, composer.config_name, overrides)
    except Exception:  # noqa: BLE001 - a line that does not compose yet offers nothing
        return sorted(extra)
    return sorted(set(out.getvalue().split()) | set(extra))


def _without_plan_flags(words: list[str]) -> list[str]:
    """Plan's own flags (--json, --svg FILE) are not Hydra's: drop them before Hydra parses."""

    from launcher.config.hydra_private import option_strings

    hydra_options = option_strings(hydra_parser())
    own = {n: f.metavar is not None for f in PLAN_FLAGS for n in f.names if n not in hydra_options}
    out, skip = [], False
    for w in words:
        name = w.partition("=")[0]
        if skip:
            skip = False
        elif name in own:
            skip = own[name] and "=" not in w
        else:
            out.append(w)
    return out
