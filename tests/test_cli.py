"""The CLI as a user meets it: `areal-launch` run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.areal_launch import ROOT, one_error_line, run


def plan_json(*args: str) -> dict:
    out = run("plan", "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_plan_prints_table_for_the_readme_example():
    out = run(
        "plan",
        "rollout.backend=sglang:d4t2",
        "actor.backend=fsdp:d8",
        "cluster=gpu8",
        "cluster.num_nodes=2",
    )
    assert out.returncode == 0, out.stderr
    for text in ("rollout", "actor", "sglang:d4t2", "fsdp:d8"):
        assert text in out.stdout


def test_plan_json_has_schema_components_and_inherited_from():
    plan = plan_json(
        "cluster=gpu8",
        "cluster.num_nodes=2",
        "rollout.backend=sglang:d4t2",
        "actor.backend=fsdp:d8",
        "ref=inherit",
    )
    assert plan["schema"] == 1
    assert plan["cluster"] == {"num_nodes": 2, "gpus_per_node": 8, "device": "cuda"}
    comps = plan["components"]
    assert comps["rollout"]["spec"] == "sglang:d4t2" and comps["rollout"]["world_size"] == 8
    assert comps["ref"]["spec"] == "fsdp:d8" and comps["ref"]["inherited_from"] == "actor"
    assert comps["actor"]["inherited_from"] is None
    assert "critic" not in comps and "teacher" not in comps


def test_backend_prefix_alone_picks_the_engine_without_group_choice():
    plan = plan_json("rollout.backend=sglang:d2", "cluster=gpu8")
    assert plan["components"]["rollout"]["backend"] == "sglang"


def test_default_plan_on_a_machine_without_gpus_is_cpu_vllm_d1_fsdp_d2():
    plan = plan_json()
    assert plan["cluster"]["device"] == "cpu"
    assert plan["cluster"]["gpus_per_node"] == 3  # exactly the virtual slots the plan needs
    assert plan["components"]["rollout"]["spec"] == "vllm:d1"
    assert plan["components"]["actor"]["spec"] == "fsdp:d2"
    assert plan["mode"] == "disaggregated"


@pytest.mark.parametrize(
    "override, needle",
    [
        ("rollout.backend=d4t2", "prefix"),
        ("rollout.backend=sglang.d4t2", "':'"),
        ("actor.backend=fsdp:d4p2", "megatron"),
        ("rollout.backend=sglang:d4+fsdp:d8", "rollout.backend"),
        ("rollout.bakend=vllm:d1", "did you mean 'rollout.backend'"),
        ("cluster.num_nodes=abc", "cluster.num_nodes"),
        ("actor.backend=megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)", "\"actor.backend='megatron:(attn"),
        ("rollout.backend=fsdp:d2", "inference backend"),
        ("rollout=nope", "sglang vllm"),
    ],
)
def test_bad_input_is_one_error_line_exit_2_and_nothing_on_stdout(override, needle):
    assert needle in one_error_line(run("plan", "--json", override))


def test_launch_command_reports_bad_input_the_same_way_and_starts_nothing(tmp_path):
    one_error_line(run("actor.backend=fsdp:d0", f"hydra.run.dir={tmp_path}/run"))
    assert not (tmp_path / "run").exists()


def test_cfg_job_prints_the_composed_config():
    out = run("--cfg", "job", "actor.backend=fsdp:d4")
    assert out.returncode == 0, out.stderr
    assert "backend: fsdp:d4" in out.stdout and "component_placement" in out.stdout


def test_help_lists_engines_examples_groups_and_hydras_flags():
    """--help is Hydra's app help (hydra/help=areal): our text, the config groups, the flags."""
    out = run("--help")
    assert out.returncode == 0, out.stderr
    for text in (
        "rollout.backend",
        "actor.backend",
        "component_placement",
        "Examples",
        "rollout: none, sglang, vllm",
        "--config-dir,-cd",
        "--shell-completion,-sc",
        "--info,-i",
    ):
        assert text in out.stdout
    out = run("plan", "--help")
    assert out.returncode == 0
    for flag in ("--json", "--svg FILE", "--config-dir, -cd DIR", "--config-name, -cn NAME"):
        assert flag in out.stdout


def test_legacy_allocation_mode_is_translated_with_a_deprecation_warning():
    out = run(
        "plan",
        "--json",
        "cluster=gpu8",
        "cluster.num_nodes=2",
        "allocation_mode=sglang:d4t2+fsdp:d8",
    )
    assert out.returncode == 0, out.stderr
    assert "deprecated" in out.stderr
    comps = json.loads(out.stdout)["components"]
    assert comps["rollout"]["spec"] == "sglang:d4t2" and comps["actor"]["spec"] == "fsdp:d8"
    assert set(comps["rollout"]["gpus"]).isdisjoint(comps["actor"]["gpus"])


def test_legacy_colocation_shares_gpus_and_per_engine_backend_wins():
    out = run(
        "plan",
        "--json",
        "cluster=gpu8",
        "allocation_mode='sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4'",
        "rollout.backend=sglang:d4",
    )
    assert out.returncode == 0, out.stderr
    assert "wins over allocation_mode" in out.stderr
    comps = json.loads(out.stdout)["components"]
    assert comps["rollout"]["spec"] == "sglang:d4"
    assert comps["critic"]["gpus"] == comps["actor"]["gpus"] == [4, 5, 6, 7]


def test_engine_option_for_an_unselected_backend_is_an_error():
    line = one_error_line(run("plan", "rollout.sglang.mem_fraction_static=0.5"))  # vllm:d1
    assert "rollout.sglang.mem_fraction_static" in line


def test_per_engine_placement_override_without_plus():
    plan = plan_json(
        "cluster=gpu8",
        "actor.backend=fsdp:d4",
        "rollout.backend=sglang:d2",
        "cluster.component_placement.actor=4-7",
        "cluster.component_placement.rollout='0,1'",
    )
    assert plan["components"]["actor"]["gpus"] == [4, 5, 6, 7]
    assert plan["components"]["rollout"]["gpus"] == [0, 1]


def test_launcher_process_never_imports_heavy_engines():
    code = (
        "import sys; from launcher.cli.main import main\n"
        "try:\n    main(['plan', '--json', 'cluster=gpu8', 'rollout.backend=sglang:d2t2', "
        "'ref=inherit'])\n"
        "except SystemExit: pass\n"
        "heavy = [m for m in ('torch', 'vllm', 'sglang', 'megatron', 'transformers') "
        "if m in sys.modules]\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert "HEAVY=" in out.stderr and out.stderr.rstrip().endswith("HEAVY="), out.stderr


def test_every_plan_example_in_the_help_runs():
    import shlex

    text = run("--help").stdout.split("Examples:", 1)[1].replace("\\\n", " ")
    examples = [
        line.split("#")[0].strip()
        for line in text.splitlines()
        if line.strip().startswith("areal-launch plan")
    ]
    assert len(examples) >= 3
    for line in examples:
        out = run(*shlex.split(line)[1:])
        assert out.returncode == 0, f"{line}\n{out.stderr}"


def test_config_files_are_found_from_an_installed_package(tmp_path):
    """A regular (non-editable) install, run from outside the checkout."""
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert (target / "launcher" / "conf" / "experiment" / "gpu2x8_megatron.yaml").is_file()
    assert (target / "hydra_plugins" / "areal_launch" / "areal_launcher.py").is_file()
    env = {**os.environ, "PYTHONPATH": str(target), "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "launcher.cli.main",
            "plan",
            "--json",
            "ref=inherit",
            "experiment=gpu2x8_megatron",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["components"]["actor"]["spec"] == "megatron:d2p2t2"
    # the default recipe ships with the package: its trainers run the installed copy
    trainer = next(p for p in plan["processes"] if p["role"] == "trainer")
    assert str(target / "recipes" / "grpo" / "train.py") in trainer["argv"]
    imported_from = subprocess.run(
        [sys.executable, "-c", "import launcher; print(launcher.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    ).stdout
    assert imported_from.startswith(str(target))
