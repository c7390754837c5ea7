"""fsdp with context parallel (`c`): the recipe shards parameters over dp x cp and, since it
does not split sequences, gives the cp ranks samples of their own. The ranks train at the
plan's cp coordinates and each holds a different shard."""

from __future__ import annotations

import json

import pytest

from tests.areal_launch import run

pytestmark = pytest.mark.torch


def test_cp_ranks_train_at_the_plans_coordinates_on_their_own_shards(tmp_path, tiny_model):
    out = run(
        "rollout=none",
        "actor.backend=fsdp:c2",
        "recipe.steps=1",
        f"hydra.run.dir={tmp_path}/run",
        timeout=600,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    assert "mesh dp 1 x cp 2 x tp 1 (FSDP2 over 2, tensor parallel over 1;" in text
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    planned = {r["rank"]: (r["dp"], r["cp"], r["tp"]) for r in plan["components"]["actor"]["ranks"]}
    records = {
        int(p.stem): json.loads(p.read_text()) for p in (tmp_path / "run" / "ranks").glob("*.json")
    }
    assert {r: (x["dp"], x["cp"], x["tp"]) for r, x in records.items()} == planned
    assert planned == {0: (0, 0, 0), 1: (0, 1, 0)}
    offsets = sorted(x["weight"]["offset"][0] for x in records.values())
    assert offsets == [0, 64] and all(
        x["weight"]["local_shape"] == [64, 128] for x in records.values()
    )
