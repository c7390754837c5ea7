"""The default recipe survives a failure: checkpoints every `recipe.save_every` steps into the
run folder, and a restarted trainer job resumes from the newest one, exactly.

Real runs: `areal-launch rollout=none` (two FSDP2 ranks on gloo; rank 0 samples from the
trainer's own weights with HF generate), and the restart run the way the launcher's supervisor
runs one (the plan's own trainer process, AREAL_RESTART=1, same run folder: tests/restarts.py).

Why exact: step k's prompts and sampling seed are functions of (seed, k), rank 0's HF sampling
is seeded per step, the checkpoint holds the sharded model and AdamW state bit for bit (and
each rank's RNG states), and a resumed trainer writes the checkpoint's weights as the folder
the next rollout samples from. Same world size, same gloo reduction order: the resumed run's
losses and final weights equal the uninterrupted run's, bit for bit (tolerance 0). A different
world size on restart would still load (torch.distributed.checkpoint reshards), but sums over
ranks in another order would differ in the last bits.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.trainer import checkpoints
from tests import plans
from tests.areal_launch import ROOT, run
from tests.restarts import restart_trainers
from tests.test_recipe_e2e import free_port, stop

pytestmark = pytest.mark.torch

SMALL = (
    "rollout=none",
    "actor.backend=fsdp:d2",
    "recipe.prompts_per_step=2",
    "recipe.samples_per_prompt=4",
    "recipe.max_new_tokens=8",
    "recipe.save_every=1",
    "recipe.keep_checkpoints=2",
)
FAIL_AFTER_3 = "+launcher.env.GRPO_TEST_FAIL_AFTER_STEP=3"
STEP = re.compile(r"^(?:actor-node0 \| )?step (\d)/6 reward (\S+) loss (\S+) ", re.MULTILINE)


def launch(run_dir: Path, *overrides: str):
    out = run(*SMALL, *overrides, f"hydra.run.dir={run_dir}", timeout=600)
    return out, out.stdout + out.stderr


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_model):
    run_dir = tmp_path_factory.mktemp("whole") / "run"
    out, text = launch(run_dir, "recipe.steps=6")
    assert out.returncode == 0, text[-4000:]
    return run_dir, text


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory, tiny_model):
    """Six steps asked, rank 1 fails at the end of step 3, after its checkpoint (the recipe's
    test hook); then the trainer job restarted in the same run folder."""
    run_dir = tmp_path_factory.mktemp("broken") / "run"
    out, first = launch(run_dir, "recipe.steps=6", FAIL_AFTER_3)
    assert out.returncode != 0, first[-4000:]
    assert "rank 1 fails on purpose at the end of step 3" in first, first[-4000:]
    steps_at_failure = [c.step for c in checkpoints.complete(run_dir / "checkpoints")]
    again = restart_trainers(run_dir, restart=1)
    assert again.returncode == 0, again.stdout[-4000:]
    return run_dir, first, again.stdout, steps_at_failure


def safetensors(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def test_a_checkpoint_lands_every_save_every_steps_and_old_ones_are_pruned(uninterrupted):
    run_dir, text = uninterrupted
    for step in range(1, 7):
        assert f"grpo: checkpoint checkpoints/step_{step} saved (due, " in text
    kept = checkpoints.complete(run_dir / "checkpoints")
    assert [c.step for c in kept] == [5, 6]  # keep_checkpoints=2
    meta = checkpoints.read_meta(kept[-1].path)
    assert (meta["step"], meta["restart"], meta["world_size"], meta["weight_version"]) == (
        6,
        0,
        2,
        "v6",
    )
    files = sorted(p.name for p in kept[-1].path.iterdir())
    assert files == [
        ".metadata",
        "__0_0.distcp",
        "__1_0.distcp",
        "meta.json",
        "rng_0.pt",
        "rng_1.pt",
    ]
    assert not [p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]


def test_a_restarted_trainer_resumes_from_the_newest_checkpoint_and_says_so(interrupted):
    run_dir, first, again, steps_at_failure = interrupted
    assert steps_at_failure == [2, 3]  # the failure came after step 3 was complete
    assert "grpo: resumed from step 3 (checkpoints/step_3), restart 1" in again
    assert "grpo: weights v3 pushed before the first rollout" in again
    assert [m[0] for m in STEP.findall(again)] == ["4", "5", "6"]  # 1-3 are not run again
    assert "grpo done: steps 6 (4-6 after resuming)" in again
    assert checkpoints.read_meta(run_dir / "checkpoints" / "step_6")["restart"] == 1


def test_a_resumed_run_ends_with_the_uninterrupted_runs_weights_exactly(uninterrupted, interrupted):
    whole_dir, whole = uninterrupted
    broken_dir, first, again, _ = interrupted
    # the same samples, rewards and losses, step for step (printed to 4 decimals) ...
    assert STEP.findall(first) + STEP.findall(again) == STEP.findall(whole)
    # ... and the same final weights, tensor for tensor, bit for bit
    a = safetensors(whole_dir / "weights" / "v6" / "model.safetensors")
    b = safetensors(broken_dir / "weights" / "v6" / "model.safetensors")
    assert a.keys() == b.keys()
    different = [k for k in a if not (a[k] == b[k]).all()]
    assert different == []
    start = safetensors(
        Path(json.loads((whole_dir / "plan.json").read_text())["model_path"]) / "model.safetensors"
    )
    assert any(not (a[k] == start[k]).all() for k in start)  # and they did train


def test_the_state_loaded_is_the_state_saved_tensor_for_tensor(tmp_path, tiny_model):
    """Two ranks, FSDP2 on gloo: parameters, AdamW moments and step counters, and every RNG
    of each rank, saved at step 2 and loaded into a fresh trainer, compared on each rank."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    plan = plans.plan_dict(**{"actor.backend": "fsdp:d2", "model_path": tiny_model})
    (run_dir / "plan.json").write_text(json.dumps(plan))
    env = {
        **os.environ,
        "AREAL_LAUNCH_PLAN": str(run_dir / "plan.json"),
        "AREAL_RUN_DIR": str(run_dir),
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
    }
    for mode in ("save", "load"):
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(free_port()),
            "tests/checkpoint_roundtrip.py",
            mode,
            str(tmp_path),
        ]
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=300)
        finally:
            stop(proc)
        assert proc.returncode == 0, out[-4000:]
    for rank in (0, 1):
        saved = json.loads((tmp_path / f"save-{rank}.json").read_text())
        loaded = json.loads((tmp_path / f"load-{rank}.json").read_text())
        assert saved["folder"] == str(run_dir / "checkpoints" / "step_2")
        assert loaded["step"] == 2
        kinds = {name.split()[-1] for name in saved["held"] if name.startswith("optim")}
        assert kinds == {"step", "exp_avg", "exp_avg_sq"}
        assert len(saved["held"]) > 20
        assert loaded["held"] == saved["held"]  # every shard, moment and counter
        assert loaded["before"] != saved["held"]  # (a fresh trainer holds something else)
        assert loaded["draws"] == saved["draws"]  # torch, python and numpy RNGs, per rank
    assert (
        json.loads((tmp_path / "save-0.json").read_text())["draws"]
        != json.loads((tmp_path / "save-1.json").read_text())["draws"]
    )  # per rank, not shared
