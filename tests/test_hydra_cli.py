"""Hydra's command line, flag by flag, through the installed `areal-launch`, checked against
Hydra's documented behaviour (https://hydra.cc/docs/advanced/hydra-command-line-flags/), and
our promise on top: a mistake is one `error:` line, exit code 2, nothing started.
"""

from __future__ import annotations

import importlib.util
import json
import shutil

import hydra
import pytest
import yaml

from tests.areal_launch import ROOT, one_error_line, run

CONF = ROOT / "launcher" / "conf"
OPTUNA = importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None


def ok(*args: str, **kw) -> str:
    out = run(*args, **kw)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


# ----------------------------------------------------------------------------- information
def test_version_shows_hydras_version_and_exits():
    """Hydra: `--version` shows Hydra's version and exits (ours too, on the same line)."""
    from launcher import __version__

    assert ok("--version").strip() == f"areal-launch {__version__} (Hydra {hydra.__version__})"


def test_cfg_job_hydra_all_print_what_hydra_documents():
    """--cfg job: the app's config, no `hydra` node; hydra: only `hydra`; all: both."""
    job = yaml.safe_load(ok("--cfg", "job", "actor.backend=fsdp:d4"))
    assert "hydra" not in job and job["actor"]["backend"] == "fsdp:d4"
    hydra_only = yaml.safe_load(ok("--cfg", "hydra"))
    assert list(hydra_only) == ["hydra"]
    assert hydra_only["hydra"]["runtime"]["choices"]["hydra/launcher"] == "areal"
    both = yaml.safe_load(ok("--cfg", "all", "rollout=sglang"))
    assert "hydra" in both and both["rollout"]["backend"] == "sglang"


def test_cfg_package_prints_one_package_with_its_header():
    out = ok("--cfg", "job", "--package", "cluster", "cluster=gpu8")
    assert out.startswith("# @package cluster\n")
    assert yaml.safe_load(out)["gpus_per_node"] == 8
    assert "--package no.such" in one_error_line(run("--cfg", "job", "-p", "no.such"))


def test_resolve_resolves_interpolations_and_needs_cfg_or_help():
    env = {"AREAL_TINY_MODEL": "/models/tiny"}
    assert "${oc.env:AREAL_TINY_MODEL" in yaml.safe_load(ok("--cfg", "job", env=env))["model_path"]
    assert yaml.safe_load(ok("--cfg", "job", "--resolve", env=env))["model_path"] == "/models/tiny"
    assert "--resolve works with --cfg or --help" in one_error_line(run("--resolve"))


def test_info_prints_search_path_defaults_and_plugins(tmp_path):
    out = ok("--info", "searchpath", "-cd", str(tmp_path))
    assert "pkg://launcher.conf" in out and f"file://{tmp_path}" in out
    assert out.index("pkg://launcher.conf") < out.index(f"file://{tmp_path}")  # Hydra's order
    defaults = ok("--info", "defaults", "rollout=sglang")
    assert "rollout/sglang" in defaults and "hydra/launcher/areal" in defaults
    assert "ArealLauncher" in ok("--info", "plugins")


@pytest.mark.skipif(not OPTUNA, reason="hydra-optuna-sweeper not installed (the test extra has it)")
def test_an_installed_sweeper_plugin_is_found():
    assert "OptunaSweeper" in ok("--info", "plugins")
    assert "optuna" in ok("--hydra-help").split("hydra/sweeper:", 1)[1].splitlines()[0]


def test_hydra_help_lists_our_launchers_beside_hydras():
    from launcher import runners

    out = ok("--hydra-help")
    ours = ", ".join(["areal"] + sorted(f"areal_{n}" for n in runners.names()))
    assert f"hydra/launcher: {ours}, basic" in out


def test_only_one_command_at_a_time_as_hydra_says():
    assert "only one of" in one_error_line(run("--cfg", "job", "--info"))


@pytest.mark.torch  # the preflight wants torch where the trainers run
def test_run_flag_is_one_run_even_when_the_config_says_multirun(tmp_path):
    out = run(
        "--run",
        "hydra.mode=MULTIRUN",
        "rollout=none",
        "launcher.dry_run=true",
        f"hydra.sweep.dir={tmp_path}/sweep",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("# actor-node0: trainer") == 1 and "sweep:" not in out.stderr


# ----------------------------------------------------------------------------- config folders
PRESET = """\
# @package _global_
# RLinf's spelling: one GPU set shared by two engines, under a comma key
cluster:
  component_placement:
    "actor,rollout": all
rollout:
  offload: true
actor:
  backend: fsdp:d1
  offload:
    weight: true
"""


@pytest.mark.torch  # the preflight wants torch where the trainers run
def test_config_dir_adds_a_users_preset_with_a_comma_key(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "shared.yaml").write_text(PRESET)
    plan = json.loads(ok("plan", "--json", "-cd", str(tmp_path), "experiment=shared"))
    comps = plan["components"]
    assert plan["mode"] == "collocated" and comps["rollout"]["gpus"] == comps["actor"]["gpus"] == [
        0
    ]
    launched = run(
        "--config-dir",
        str(tmp_path),
        "experiment=shared",
        "launcher.dry_run=true",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert launched.returncode == 0, launched.stderr
    assert "rollout-0: server" in launched.stdout and "actor-node0: trainer" in launched.stdout
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


def test_config_dir_adds_clusters_and_whole_configs(tmp_path):
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "lab4.yaml").write_text(
        "num_nodes: 2\ngpus_per_node: 4\ndevice: cuda\n"
    )
    (tmp_path / "mine.yaml").write_text(
        "defaults:\n  - config\n  - _self_\nexperiment_name: mine\nrollout:\n  backend: sglang:d2\n"
    )
    plan = json.loads(ok("plan", "--json", "-cd", str(tmp_path), "cluster=lab4"))
    assert plan["cluster"] == {"num_nodes": 2, "gpus_per_node": 4, "device": "cuda"}
    job = yaml.safe_load(ok("-cd", str(tmp_path), "-cn", "mine", "--cfg", "job"))
    assert job["experiment_name"] == "mine" and job["rollout"]["backend"] == "sglang:d2"


def test_config_path_replaces_the_primary_folder(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "config.yaml").write_text(
        (CONF / "config.yaml")
        .read_text()
        .replace("model_path:", "experiment_name: from_cp\nmodel_path:")
    )
    assert (
        yaml.safe_load(ok("--config-path", str(conf), "--cfg", "job"))["experiment_name"]
        == "from_cp"
    )
    assert "absolute path" in one_error_line(run("-cp", "conf", "--cfg", "job"))


@pytest.mark.parametrize(
    "args, needle",
    [
        (("-cd", "/no/such/folder"), "--config-dir /no/such/folder: no such folder"),
        (("-cn", "nope"), "no primary config 'nope'"),
        (("plan", "-cd"), "-cd needs a DIR"),
        (("--cfg", "jb"), "invalid choice: 'jb'"),
        (("--nope",), "unrecognized arguments: --nope"),
        (("plna",), "unknown command 'plna' (did you mean 'plan'?)"),
        (("launcher=slurm", "launcher.partiton=x"), "did you mean 'launcher.partition'?"),
        (
            ("plan", "cluster=gpu8", "launcher=slurm", "launcher.partiton=x"),
            "did you mean 'launcher.partition'?",
        ),
        (("rollot.backend=vllm",), "did you mean 'rollout.backend'?"),
        (("rollout=vlm",), "choose one of none sglang vllm (did you mean 'vllm'?)"),
        (("hydra.job.chdir=true",), "hydra.job.chdir=true"),
        (("--experimental-rerun", "x.pickle"), "--experimental-rerun: not supported"),
        (("-sc",), "--shell-completion takes one of install=SHELL"),
        (("-sc", "install=tcsh"), "No completion plugin for 'tcsh'"),
    ],
)
def test_mistakes_are_one_line_exit_2(args, needle, tmp_path):
    where = () if args[0] in ("plan", "-sc") else (f"hydra.run.dir={tmp_path}/run",)
    assert needle in one_error_line(run(*args, *where))
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------- hydra.* overrides
@pytest.mark.torch  # the preflight wants torch where the trainers run
def test_hydra_run_dir_is_the_run_folder_and_holds_hydras_record(tmp_path):
    """Hydra: the run's output folder is hydra.run.dir, with .hydra/{config,hydra,overrides}.yaml
    (hydra.output_subdir); ours also holds the plan. hydra.output_subdir=null: no record."""
    trainer = tmp_path / "t.py"
    trainer.write_text("print('hello', flush=True)\n")
    common = ("rollout=none", "actor.backend=fsdp:d1", f"trainer.entry={trainer}")
    ok(*common, f"hydra.run.dir={tmp_path}/run", timeout=300)
    run_dir = tmp_path / "run"
    assert (run_dir / "plan.json").is_file()
    record = run_dir / ".hydra"
    assert yaml.safe_load((record / "overrides.yaml").read_text())[:2] == list(common[:2])
    assert yaml.safe_load((record / "config.yaml").read_text())["actor"]["backend"] == "fsdp:d1"
    assert yaml.safe_load((record / "hydra.yaml").read_text())["hydra"]["runtime"][
        "output_dir"
    ] == str(run_dir)
    assert oct((record / "config.yaml").stat().st_mode & 0o777) == "0o600"  # may hold secrets
    ok(*common, f"hydra.run.dir={tmp_path}/bare", "hydra.output_subdir=null", timeout=300)
    assert (tmp_path / "bare" / "plan.json").is_file() and not (
        tmp_path / "bare" / ".hydra"
    ).exists()


WAITS_FOR_THE_SERVER = """\
import json, os, urllib.request
from launcher.trainer.runtime import load_plan
rt = load_plan()
addrs = rt.wait_for_servers(timeout_s=400)
models = json.load(urllib.request.urlopen(f"http://{addrs[0]}/v1/models", timeout=30))
with open(os.path.join(os.environ["AREAL_RUN_DIR"], "seen.json"), "w") as f:
    json.dump({"servers": addrs, "models": [m["id"] for m in models["data"]]}, f)
"""


@pytest.mark.vllm
@pytest.mark.torch
@pytest.mark.timeout(900)
def test_a_users_preset_from_a_folder_outside_the_repo_runs_for_real(tmp_path, tiny_model):
    """`-cd DIR experiment=shared`: the comma key puts the vLLM CPU server and the trainer on
    one slot; both really start, the trainer reaches the server, the run ends ok."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "shared.yaml").write_text(PRESET)
    trainer = tmp_path / "trainer.py"
    trainer.write_text(WAITS_FOR_THE_SERVER)
    ok(
        "-cd",
        str(tmp_path),
        "experiment=shared",
        f"trainer.entry={trainer}",
        f"model_path={tiny_model}",
        f"hydra.run.dir={tmp_path}/run",
        cwd=tmp_path,
        timeout=800,
    )
    run_dir = tmp_path / "run"
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["mode"] == "collocated"
    assert plan["components"]["rollout"]["gpus"] == plan["components"]["actor"]["gpus"] == [0]
    seen = json.loads((run_dir / "seen.json").read_text())
    assert len(seen["servers"]) == 1 and seen["models"]
    assert "experiment=shared" in (run_dir / ".hydra" / "overrides.yaml").read_text()
