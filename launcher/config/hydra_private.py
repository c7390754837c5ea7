"""Every use of Hydra's private API, each behind one function (tests/test_hydra_private.py
fails if Hydra changes under one of them).

Hydra's public API (`hydra.main`, `hydra.compose`) makes the run folder before the app can
check anything, or composes without Hydra's own command line, sweeps, help, info and shell
completion. areal-launch composes and checks first and starts second (launcher.config.compose),
so it drives Hydra's app object itself, as `hydra.main` does inside (`_run_hydra`): these are
the calls `_run_hydra` makes, and nothing else of Hydra's internals is used anywhere.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from omegaconf import DictConfig

APP_PACKAGE = "launcher"  # Hydra reads the app's own configs from this package's conf/


def open_hydra(task_name: str, primary: str, extra_dir: Optional[Path]) -> Any:
    """Hydra's app object (hydra._internal.hydra.Hydra) for configs searched in `primary` (a
    folder, or `pkg://` a package's) and then `extra_dir` (Hydra's --config-dir: after the
    primary folder, before the schemas), as `_run_hydra` opens it; it is Hydra's global one."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra

    search_path = create_config_search_path(primary)
    if extra_dir is not None:
        search_path.prepend(
            provider="command-line",
            path=f"file://{extra_dir}",
            anchor=SearchPathQuery(provider="schema"),
        )
    GlobalHydra.instance().clear()
    return Hydra.create_main_hydra2(task_name=task_name, config_search_path=search_path)


def compose(hydra: Any, config_name: str, overrides: Sequence[str], multirun: bool) -> DictConfig:
    """The config Hydra composes for a run (or a sweep: multirun), with its `hydra` node."""
    from hydra.types import RunMode

    mode = RunMode.MULTIRUN if multirun else RunMode.RUN
    cfg: DictConfig = hydra.compose_config(
        config_name=config_name, overrides=list(overrides), run_mode=mode
    )
    return cfg


def is_multirun(hydra: Any, config_name: str, overrides: Sequence[str]) -> bool:
    """Whether hydra.mode=MULTIRUN is set (on the command line or in a config)."""
    from hydra.types import RunMode

    return bool(
        hydra.get_mode(config_name=config_name, overrides=list(overrides)) == RunMode.MULTIRUN
    )


def multirun(
    hydra: Any, config_name: str, task: Callable[[DictConfig], Any], overrides: Sequence[str]
) -> None:
    """Hydra's sweep: its sweeper (hydra/sweeper) and launcher plugin (hydra/launcher)."""
    hydra.multirun(config_name=config_name, task_function=task, overrides=list(overrides))


def args_parser() -> argparse.ArgumentParser:
    """Hydra's own command-line parser (its flags: -m, -cd, --cfg, ...)."""
    from hydra._internal.utils import get_args_parser

    return get_args_parser()


def option_strings(parser: argparse.ArgumentParser) -> frozenset[str]:
    """Every flag `parser` takes (`--config-dir`, `-cd`, ...)."""
    return frozenset(s for action in parser._actions for s in action.option_strings)


def show_help(
    hydra: Any, config_name: str, parser: argparse.ArgumentParser, ns: Any, hydra_help: bool
) -> None:
    """--help (the app's help template) or --hydra-help, printed by Hydra, listing the config
    groups' options from one copy of Hydra's config repository (one_repository)."""
    show = hydra.hydra_help if hydra_help else hydra.app_help
    with one_repository(hydra.config_loader):
        show(config_name=config_name, args_parser=parser, args=ns)


@contextlib.contextmanager
def one_repository(loader: Any) -> Iterator[None]:
    """Hydra's help lists the config groups by asking its loader for each group's options, and
    the loader builds (deep-copies) its whole config repository for every one of the ~100
    asks: most of a 2 s --help. While the help is written, the asks share one copy."""
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


def show_info(hydra: Any, info: str, config_name: str, overrides: Sequence[str]) -> None:
    """--info [all|config|defaults|...], printed by Hydra."""
    hydra.show_info(info, config_name=config_name, overrides=list(overrides))


def shell_completion(hydra: Any, config_name: str, overrides: Sequence[str]) -> None:
    """--shell-completion install=|uninstall=|query=SHELL, printed by Hydra's plugin."""
    hydra.shell_completion(config_name=config_name, overrides=list(overrides))


def sanitized(hydra: Any, cfg: DictConfig, kind: str) -> DictConfig:
    """`cfg` as --cfg job|hydra|all shows it."""
    found: DictConfig = hydra.get_sanitized_cfg(cfg, kind)
    return found
