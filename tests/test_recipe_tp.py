"""The plan's layout, trained for real: `areal-launch` with a real vLLM CPU server and FSDP2 +
tensor-parallel ranks on gloo. fsdp:d1t2 and fsdp:d2t2 finish with every reload confirmed
(greedy tokens and log-probs), each rank trains at the plan's coordinates, and the tp ranks
hold different shards of the same weight: the shards the plan says, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from tests.areal_launch import run

pytestmark = [pytest.mark.vllm, pytest.mark.torch]

LAYOUTS = {
    "d1t2": ("actor.backend=fsdp:d1t2", "recipe.steps=3"),
    "d2t2": ("actor.backend=fsdp:d2t2", "cluster.device=cpu"),
}
STEPS = {"d1t2": 3, "d2t2": 5}


@pytest.fixture(scope="module")
def runs(tiny_model, tmp_path_factory):
    """Each layout run once, lazily: {layout: (output text, run folder)}."""
    done: dict[str, tuple[str, Path]] = {}

    def get(layout: str) -> tuple[str, Path]:
        if layout not in done:
            run_dir = tmp_path_factory.mktemp(layout) / "run"
            out = run(*LAYOUTS[layout], f"hydra.run.dir={run_dir}", timeout=1200)
            text = out.stdout + out.stderr
            assert out.returncode == 0, text[-4000:]
            done[layout] = (text, run_dir)
        return done[layout]

    return get


def planned_coords(*overrides: str) -> dict[int, tuple[int, int, int, int]]:
    """Each actor rank's (dp, tp, pp, cp) as `areal-launch plan ... --json` gives them."""
    out = run("plan", *overrides, "--json")
    assert out.returncode == 0, out.stderr
    ranks = json.loads(out.stdout)["components"]["actor"]["ranks"]
    return {r["rank"]: (r["dp"], r["tp"], r["pp"], r["cp"]) for r in ranks}


def trained(run_dir: Path) -> dict[int, dict]:
    return {int(p.stem): json.loads(p.read_text()) for p in (run_dir / "ranks").glob("*.json")}


@pytest.mark.parametrize("layout", ["d1t2", "d2t2"])
def test_layout_finishes_with_every_reload_confirmed(runs, layout):
    text, run_dir = runs(layout)
    n = STEPS[layout]
    steps = re.findall(
        rf"step (\d)/{n} reward \S+ loss \S+ kl off logp_gap \S+ weight_version "
        rf"v\d reload confirmed 1/1",
        text,
    )
    assert steps == [str(i) for i in range(1, n + 1)], text[-4000:]
    assert f"reloads confirmed {n}/{n}" in text
    tp = 2
    dp = 2 if layout == "d2t2" else 1
    assert (
        f"mesh dp {dp} x cp 1 x tp {tp} (FSDP2 over {dp}, tensor parallel over {tp}; "
        "computes in float32, reshard_after_forward true)" in text
    )


@pytest.mark.parametrize("layout", ["d1t2", "d2t2"])
def test_each_rank_trains_at_the_plans_coordinates(runs, layout):
    _, run_dir = runs(layout)
    seen = {rank: (r["dp"], r["tp"], r["pp"], r["cp"]) for rank, r in trained(run_dir).items()}
    assert seen == planned_coords(*LAYOUTS[layout])
    # FSDP's defaults, as the live model showed them: fp32 compute, resharded after forward
    assert {json.dumps(r["fsdp"], sort_keys=True) for r in trained(run_dir).values()} == {
        json.dumps({"dtype": "float32", "resharded_after_forward": True}, sort_keys=True)
    }


@pytest.mark.parametrize("layout", ["d1t2", "d2t2"])
def test_tp_ranks_hold_different_shards_of_the_same_weight(runs, layout, tiny_model):
    from safetensors.torch import load_file

    _, run_dir = runs(layout)
    records = trained(run_dir)
    weight = {r["weight"]["name"] for r in records.values()}
    assert weight == {"model.layers.0.self_attn.q_proj.weight"}
    full = load_file(str(Path(tiny_model) / "model.safetensors"))[weight.pop()]
    rows: list[int] = []
    for rank, r in records.items():
        w = r["weight"]
        assert w["full_shape"] == list(full.shape)
        start, count = w["offset"][0], w["local_shape"][0]
        # the shard is that slice of the checkpoint the trainers started from, byte for byte
        piece = full[start : start + count].to(dtype=full.dtype).contiguous().numpy().tobytes()
        assert hashlib.sha256(piece).hexdigest() == w["sha256"], rank
        rows += range(start, start + count)
    assert sorted(rows) == list(range(full.shape[0]))  # the shards tile the weight, no overlap
    for dp in {r["dp"] for r in records.values()}:
        group = [r["weight"] for r in records.values() if r["dp"] == dp]
        assert len(group) == 2 and group[0]["sha256"] != group[1]["sha256"]
        assert group[0]["local_shape"][0] * 2 * (2 if layout == "d2t2" else 1) == full.shape[0]


def test_pushed_weights_are_full_tensors_in_the_checkpoints_layout(runs, tiny_model):
    from safetensors.torch import load_file

    _, run_dir = runs("d1t2")
    pushed = load_file(str(run_dir / "weights" / "v3" / "model.safetensors"))
    start = load_file(str(Path(tiny_model) / "model.safetensors"))
    assert {k: tuple(v.shape) for k, v in pushed.items()} == {
        k: tuple(v.shape) for k, v in start.items()
    }
    assert any(not (pushed[k] == start[k]).all() for k in start)  # and trained
