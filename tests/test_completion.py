"""Tab completion: the script `areal-launch -sc install=bash` prints (Hydra's), evaluated in a
real bash, asked what it offers for a line the way bash asks (COMP_LINE, COMP_WORDS,
COMP_CWORD), and the candidates it puts in COMPREPLY.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.areal_launch import EXE, run

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

ASK = """\
eval "$(areal-launch -sc install=bash)"
COMP_LINE=$1
COMP_POINT=${#COMP_LINE}
read -ra COMP_WORDS <<< "$COMP_LINE"
[[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
hydra_bash_completion
printf '%s\\n' "${COMPREPLY[@]}"
"""


def complete(line: str) -> list[str]:
    """What bash offers after `line` (the cursor at its end)."""
    env = {
        **os.environ,
        "PATH": f"{Path(EXE).parent}:{os.environ['PATH']}",
        "CUDA_VISIBLE_DEVICES": "",
    }
    out = subprocess.run(
        ["bash", "-c", ASK, "complete", line], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return [w for w in out.stdout.splitlines() if w]


def test_install_script_registers_areal_launch_with_bash():
    out = run("-sc", "install=bash")
    assert out.returncode == 0, out.stderr
    assert "hydra_bash_completion areal-launch" in out.stdout.replace("\n", " ").split("-F ")[-1]


def test_a_group_completes_to_its_options():
    assert complete("areal-launch rollout=") == ["rollout=none", "rollout=sglang", "rollout=vllm"]


def test_keys_complete_inside_a_node_and_in_the_chosen_group():
    assert complete("areal-launch rollout.back") == ["rollout.backend="]
    assert complete("areal-launch launcher=slurm launcher.parti") == ["launcher.partition="]
    assert complete("areal-launch launcher.parti") == []  # the local runner has no partition


def test_the_first_word_offers_sub_commands_and_groups():
    assert complete("areal-launch pl") == ["plan"]
    assert "rollout=" in complete("areal-launch ro")


def test_plan_completes_its_overrides_past_its_own_flags():
    assert complete("areal-launch plan --json actor=") == [
        "actor=archon",
        "actor=fsdp",
        "actor=megatron",
        "actor=none",
    ]
    assert complete("areal-launch plan --svg map.svg cluster=g") == ["cluster=gpu8"]
    assert "plan" not in complete("areal-launch plan pl")


def test_a_line_that_does_not_compose_offers_nothing_and_prints_no_error():
    env = {"COMP_LINE": "areal-launch -cd /no/such/folder rollout="}
    out = run("-sc", "query=bash", env=env)
    assert out.returncode == 0 and out.stdout.strip() == "" and out.stderr == ""


def test_hydras_own_groups_include_our_launchers():
    from launcher import runners

    ours = ["hydra/launcher=areal"] + [f"hydra/launcher=areal_{n}" for n in runners.names()]
    assert complete("areal-launch hydra/launcher=") == sorted(ours + ["hydra/launcher=basic"])
    assert "hydra/sweeper=basic" in complete("areal-launch -m hydra/sweeper=")


def test_a_config_dir_on_the_line_adds_its_options(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\n")
    line = f"areal-launch -cd {shlex.quote(str(tmp_path))} experiment=m"
    assert complete(line) == ["experiment=mine"]


def test_zsh_uses_the_bash_script_and_fish_gets_one_candidate_a_line():
    """Hydra: zsh is compatible with the bash completion; fish reads candidates line by line."""
    assert run("-sc", "install=zsh").stdout == run("-sc", "install=bash").stdout
    assert "complete -c areal-launch" in run("-sc", "install=fish").stdout
    out = run("-sc", "query=fish", env={"COMP_LINE": "areal-launch rollout="})
    assert out.stdout.splitlines() == ["rollout=none", "rollout=sglang", "rollout=vllm"]
