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
from launcher.spec.errors import LaunchError, UserError, error_line

COMMANDS = ("run", "multirun", "cfg", "shell_completion", "info")
EXIT_SWEEPER = 1  # the sweeper ended a sweep that had started points
SHELLS_SEP = {"fish": "\n"}  # how a shell's completion query lists candidates (else spaces)


def hydra_parser() -> argparse.ArgumentParser:
    """Hydra's own parser, named areal-launch, whose mistakes raise UserError (one line)."""
    from hydra import __version__ as hydra_version
    from hydra._internal.utils import get_args_parser

    from launcher import __version__

    parser = get_args_parser()
    parser.prog = "areal-launch"
    for action in parser._actions:
        if isinstance(action, argparse._VersionAction):
            action.version = f"areal-launch {__version__} (Hydra {hydra_version})"

    def error(message: str) -> NoReturn:
        raise UserError(f"{message} (areal-launch --help)")

    parser.error = error  # type: ignore[method-assign]
    return parser


def run_app(args: list[str], subcommands: tuple[str, ...] = ()) -> int:
    """The launch command; returns its exit code (a UserError or LaunchError: the caller
    prints one line)."""
    from launcher.config.compose import open_config

    parser = hydra_parser()
    ns = parser.parse_intermixed_args(args)
    overrides: list[str] = list(ns.overrides)
    if ns.shell_completion:
        return completion(overrides, subcommands)
    hydra = open_config(source_of(ns))
    if ns.experimental_rerun:
        raise UserError(
            "--experimental-rerun: not supported; run again with the overrides "
            "a run folder keeps in .hydra/overrides.yaml"
        )
    if ns.resolve and ns.cfg is None and not ns.help:
        raise UserError("--resolve works with --cfg or --help (Hydra's rule)")
    if ns.help or ns.hydra_help:
        from launcher.config.compose import resolved

        validated(overrides)
        show = hydra.app_help if ns.help else hydra.hydra_help
        with one_repository(hydra.config_loader):
            resolved(
                lambda: show(config_name=config_name(), args_parser=parser, args=ns), overrides
            )
        return 0
    chosen = [c for c in COMMANDS if getattr(ns, c)]
    if len(chosen) > 1:
        raise UserError(
            "only one of --run, --multirun, --cfg, --info and --shell-completion "
            "at a time (Hydra's rule)"
        )
    if ns.cfg:
        return show_config(hydra, overrides, ns.cfg, ns.package, ns.resolve)
    if ns.info:
        validated(overrides)
        hydra.show_info(ns.info, config_name=config_name(), overrides=overrides)
        return 0
    if ns.multirun or (not ns.run and _mode_is_multirun(hydra, overrides)):
        return multirun(hydra, overrides)
    from launcher.cli.launch import prepare, start

    return start(prepare(overrides))


@contextlib.contextmanager
def one_repository(loader: Any) -> Any:
    """Hydra's help lists the config groups by asking its loader for each group's options, and
    the loader builds (deep-copies) its whole config repository for every one of the ~100
    asks: 1.5 s of a 2 s --help. While the help is written, the asks share one."""
    from hydra.core.object_type import ObjectType

    repos: dict[Any, Any] = {}

    def options(
        group_name: str,
        results_filter: Any = ObjectType.CONFIG,
        config_name: Optional[str] = None,
        overrides: Optional[list[str]] = None,
    ) -> list[str]:
        key = (config_name, tuple(overrides or ()))
        if key not in repos:
            repos[key] = loader._parse_overrides_and_create_caching_repo(
                config_name, list(overrides or ())
            )[1]
        return list(repos[key].get_group_options(group_name, results_filter))

    loader.get_group_options = options
    try:
        yield
    finally:
        del loader.get_group_options  # the class's own again


def source_of(ns: argparse.Namespace) -> Any:
    from launcher.config.compose import ConfigSource

    return ConfigSource(ns.config_path, ns.config_name or "config", ns.config_dir)


def config_name() -> str:
    from launcher.config.compose import config_name as name

    return name()


def validated(overrides: list[str]) -> None:
    """Compose once ourselves, so a mistake is our one line before Hydra prints anything."""
    from launcher.config.compose import compose_config

    compose_config(overrides)


def show_config(
    hydra: Any, overrides: list[str], kind: str, package: Optional[str], resolve: bool
) -> int:
    """--cfg job|hydra|all [--package P] [--resolve]: Hydra's printing (its show_cfg) of the
    config as the run sees it (compose.shown_config)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import Container, OmegaConf

    from launcher.config.compose import compose_config, resolved, shown_config

    cfg = compose_config(overrides, with_hydra=True)
    if package not in (None, "_global_") and OmegaConf.select(cfg, str(package)) is None:
        raise UserError(f"--package {package}: no such package in the config (try --cfg job)")
    HydraConfig.instance().set_config(cfg)  # for ${hydra:...}
    cfg = hydra.get_sanitized_cfg(shown_config(cfg), kind)
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


def _mode_is_multirun(hydra: Any, overrides: list[str]) -> bool:
    """hydra.mode=MULTIRUN (on the command line or in a config) makes a sweep without -m."""
    from hydra.types import RunMode

    return bool(hydra.get_mode(config_name=config_name(), overrides=overrides) == RunMode.MULTIRUN)


# ----------------------------------------------------------------------------- -m
def multirun(hydra: Any, overrides: list[str]) -> int:
    """Hydra's multirun: its sweeper (hydra/sweeper) and launcher (hydra/launcher; ours by
    default); the table of every point ends it, with the best one."""
    from launcher.cli.sweep import RECORD, RunFailed, SweepStopped, picture, run_hydra_job, summary
    from launcher.config.compose import check_overrides, explained
    from launcher.config.hydra_errors import flatten

    check_overrides(overrides)
    RECORD.given = list(overrides)
    code = 0
    try:
        from launcher.config.compose import hydra_primary

        hydra.multirun(
            config_name=hydra_primary(),
            task_function=run_hydra_job,
            overrides=overrides + ["hydra.mode=MULTIRUN"],
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
            explained(lambda: _raise(failure), overrides)
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
    from launcher.config.compose import ConfigSource, open_config
    from launcher.config.hydra_errors import flatten

    verb, _, shell = overrides[0].partition("=") if len(overrides) == 1 else ("", "", "")
    if verb not in ("install", "uninstall", "query") or not shell:
        raise UserError(
            "--shell-completion takes one of install=SHELL, uninstall=SHELL, "
            "query=SHELL (SHELL: bash, zsh, fish), e.g. "
            'eval "$(areal-launch -sc install=bash)"'
        )
    if verb != "query":  # Hydra prints the shell's script
        try:
            open_config(ConfigSource()).shell_completion(config_name="config", overrides=overrides)
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
    from launcher.config.compose import open_config

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
        hydra = open_config(source_of(ns))
        out = io.StringIO()
        os.environ["COMP_LINE"] = f"{app} {rest}"
        with contextlib.redirect_stdout(out):
            hydra.shell_completion(config_name=config_name(), overrides=overrides)
    except Exception:  # noqa: BLE001 - a line that does not compose yet offers nothing
        return sorted(extra)
    return sorted(set(out.getvalue().split()) | set(extra))


def _without_plan_flags(words: list[str]) -> list[str]:
    """Plan's own flags (--json, --svg FILE) are not Hydra's: drop them before Hydra parses."""

    hydra_options = set(hydra_parser()._option_string_actions)
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
