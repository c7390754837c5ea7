"""The Megatron recipe as far as CPU allows, through `areal-launch` as a user runs it:
megatron-core's parallel state on gloo with the plan's layout, every group it forms checked
against the plan, the tiny Llama built on each rank's tp slice and pipeline stage, and its
weights exported to the HF layout a real vLLM CPU server loads and serves (greedy tokens and
log-probs equal). A model step needs CUDA on megatron-core 0.16.1: the run says so and stops.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from launcher.trainer.runtime import plan_from_dict
from tests.areal_launch import run

pytest.importorskip("megatron.core")
pytestmark = pytest.mark.torch

ENTRY = "trainer.entry=recipes/grpo_megatron/train.py"
DENSE = "actor.backend=megatron:d1t2p2"
HYBRID = "actor.backend='megatron:(attn:d2t2|ffn:t2e2)'"


def launch(tmp_path: Path, *overrides: str) -> tuple[str, Path]:
    run_dir = tmp_path / "run"
    out = run(ENTRY, *overrides, f"hydra.run.dir={run_dir}", timeout=1200)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    return text, run_dir


def records(run_dir: Path) -> dict[int, dict]:
    return {int(p.stem): json.loads(p.read_text()) for p in (run_dir / "ranks").glob("*.json")}


def planned(*overrides: str):
    out = run("plan", *overrides, "--json")
    assert out.returncode == 0, out.stderr
    return plan_from_dict(json.loads(out.stdout), env={})


@pytest.mark.vllm
def test_megatron_d1t2p2_checks_its_groups_and_the_server_serves_its_export(tmp_path, tiny_model):
    text, run_dir = launch(tmp_path, DENSE)
    assert "every group checked against the plan" in text
    assert "Megatron's model step needs CUDA" in text
    assert re.search(r"weights v0 pushed in the HF layout, reload confirmed 1/1", text), text[
        -3000:
    ]
    rt = planned(DENSE)
    seen = records(run_dir)
    assert {r: (x["dp"], x["tp"], x["pp"], x["cp"]) for r, x in seen.items()} == {
        e["rank"]: (e["dp"], e["tp"], e["pp"], e["cp"]) for e in rt.ranks()
    }
    # two stages, one layer each; the tp ranks of a stage hold the two halves of its qkv
    assert {r: x["layers"] for r, x in seen.items()} == {0: [0], 1: [0], 2: [1], 3: [1]}
    for stage in ((0, 1), (2, 3)):
        a, b = (seen[r]["weight"] for r in stage)
        assert a["name"] == b["name"] and a["full_shape"] == [384, 128]
        assert (a["offset"][0], b["offset"][0]) == (0, 192) and a["sha256"] != b["sha256"]


def test_moe_hybrid_forms_the_plans_expert_groups(tmp_path, tiny_model):
    text, run_dir = launch(
        tmp_path, HYBRID, "rollout=none", "actor.megatron.recompute_granularity=selective"
    )
    assert "ep 2 etp 2 edp 1" in text
    rt = planned(HYBRID, "rollout=none")
    for rank, seen in records(run_dir).items():
        assert (seen["dp"], seen["tp"], seen["pp"], seen["cp"]) == tuple(
            rt.coords(rank)[a] for a in ("dp", "tp", "pp", "cp")
        )
        for axis in ("tp", "pp", "dp", "cp"):
            assert seen["groups"][axis] == rt.group(axis, rank), (rank, axis)
        for axis in ("ep", "etp", "edp"):
            assert seen["groups"][axis] == rt.expert_group(axis, rank), (rank, axis)
    assert records(run_dir)[1]["groups"]["ep"] == [1, 3]
    # actor.megatron.* as the built model's TransformerConfig has them
    assert {json.dumps(r["megatron"]) for r in records(run_dir).values()} == {
        json.dumps({"sequence_parallel": False, "recompute_granularity": "selective"})
    }


def test_sequence_parallel_the_local_layers_refuse_is_one_line_before_anything_starts(tmp_path):
    out = run(
        ENTRY,
        DENSE,
        "rollout=none",
        "actor.megatron.sequence_parallel=true",
        f"hydra.run.dir={tmp_path}/run",
        timeout=600,
    )
    said = [ln for ln in (out.stdout + out.stderr).splitlines() if "| grpo:" in ln]
    assert out.returncode != 0 and len(said) == 1, out.stdout + out.stderr
    assert said[0].endswith("refuse sequence parallel; set it false")
    assert not (tmp_path / "run" / "ranks").exists()  # no rank trained
