"""Each use of Hydra's private API (launcher/config/hydra_private.py) does what the launcher
relies on: a Hydra release that changes one of them fails here, by name, not somewhere deep in
a launch."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from launcher.config import hydra_private
from launcher.config.compose import CONFIG_PATH, TASK_NAME, Composer, ConfigSource


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    """A folder of one's own: a cluster option launcher/conf lacks, and a whole config."""
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "mine.yaml").write_text("num_nodes: 3\n")
    (tmp_path / "whole.yaml").write_text("defaults: [config, _self_]\nexperiment_name: whole\n")
    return tmp_path


def opened(extra: Path | None = None):
    from launcher.config.schema import register_configs

    register_configs()
    return hydra_private.open_hydra(TASK_NAME, f"pkg://launcher/{CONFIG_PATH}", extra)


def test_open_hydra_searches_our_configs_then_the_extra_folder(folder):
    hydra = opened(folder)
    cfg = hydra_private.compose(hydra, "config", ["cluster=mine"], multirun=False)
    assert cfg.cluster.num_nodes == 3  # from the extra folder
    assert cfg.rollout.backend == "vllm"  # ours
    assert hydra_private.compose(hydra, "whole", [], False).experiment_name == "whole"


def test_compose_gives_the_hydra_node_a_run_reads(folder):
    cfg = hydra_private.compose(opened(), "config", ["trial_name=t7"], multirun=False)
    assert isinstance(cfg, DictConfig)
    assert OmegaConf.select(cfg, "hydra.runtime.choices.launcher") == "local"
    assert list(cfg.hydra.overrides.task) == ["trial_name=t7"]
    assert "t7" in str(OmegaConf.select(cfg, "hydra.run.dir"))
    swept = hydra_private.compose(opened(), "config", ["trial_name=a,b"], multirun=True)
    assert "multirun" in str(OmegaConf.select(swept, "hydra.sweep.dir"))


def test_is_multirun_reads_hydra_mode():
    hydra = opened()
    assert not hydra_private.is_multirun(hydra, "config", [])
    assert hydra_private.is_multirun(hydra, "config", ["hydra.mode=MULTIRUN"])


def test_args_parser_is_hydras_own_with_its_flags():
    parser = hydra_private.args_parser()
    flags = hydra_private.option_strings(parser)
    assert {"--config-dir", "-cd", "--config-name", "-cn", "--multirun", "-m", "--cfg"} <= flags
    ns = parser.parse_args(["-cd", "/x", "a=1"])
    assert ns.config_dir == "/x" and ns.overrides == ["a=1"]


def test_info_is_hydras_defaults_list(capsys):
    import logging

    for handler in list(logging.getLogger().handlers):  # Hydra logs to the stdout it first saw
        logging.getLogger().removeHandler(handler)
    hydra_private.show_info(opened(), "defaults", "config", [])
    assert "base_config" in capsys.readouterr().out


def test_help_completion_and_sanitized_config_print_what_hydra_prints():
    hydra = opened()
    parser = hydra_private.args_parser()
    for hydra_help in (False, True):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            hydra_private.show_help(hydra, "config", parser, parser.parse_args([]), hydra_help)
        assert ("Hydra" in out.getvalue()) if hydra_help else ("rollout" in out.getvalue())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        hydra_private.shell_completion(hydra, "config", ["install=bash"])
    assert "complete" in out.getvalue()
    cfg = hydra_private.compose(hydra, "config", [], False)
    assert "hydra" not in hydra_private.sanitized(hydra, cfg, "job")


def test_a_sweep_runs_the_task_once_a_point(tmp_path):
    seen: list[str] = []

    def task(cfg: DictConfig) -> None:
        seen.append(str(cfg.trial_name))

    composer = Composer(ConfigSource())
    hydra_private.multirun(
        composer.hydra,
        "config",
        task,
        ["trial_name=a,b", "hydra/launcher=basic", f"hydra.sweep.dir={tmp_path}"],
    )
    assert sorted(seen) == ["a", "b"]


def test_the_help_lists_each_groups_options_from_one_copy_of_the_repository():
    """one_repository: the same options as Hydra's own loader gives, the repository built once."""
    hydra = opened()
    loader = hydra.config_loader
    own = loader.get_group_options("rollout")
    built = []
    make = loader._parse_overrides_and_create_caching_repo

    def counted(*args):
        built.append(args)
        return make(*args)

    loader._parse_overrides_and_create_caching_repo = counted
    try:
        with hydra_private.one_repository(loader):
            assert loader.get_group_options("rollout") == own
            assert loader.get_group_options("actor") and loader.get_group_options("cluster")
    finally:
        del loader._parse_overrides_and_create_caching_repo
    assert len(built) == 1 and loader.get_group_options("rollout") == own
