"""The estimate of model states equals what torch really allocates in an FSDP2 step on gloo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.memory.model_shape import read_model_shape
from launcher.memory.train import TrainOptions, model_state_bytes
from launcher.spec.alloc import parse_backend
from tests.test_recipe_e2e import free_port, stop

pytestmark = pytest.mark.torch
WORKER = Path(__file__).resolve().parent / "fsdp_state_bytes.py"


def test_fsdp2_model_state_estimate_equals_the_bytes_torch_allocates_per_rank(tiny_model, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
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
        str(WORKER),
        tiny_model,
        str(tmp_path),
    ]
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        stop(proc)  # nothing of ours outlives the test, even on a timeout
    assert proc.returncode == 0, out[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    shape = read_model_shape(tiny_model)
    assert shape is not None
    # the recipe's settings: float32 weights, AdamW, full shard over both ranks
    estimate = model_state_bytes(shape, parse_backend("fsdp:d2"), TrainOptions(dtype="float32"))
    total = shape.params.total
    assert sum(r["params"] for r in ranks) == 4 * total  # every parameter counted once
    for measured in ranks:
        for part, key in (("weights", "params"), ("grads", "grads"), ("optimizer", "optimizer")):
            # dim-0 shards of odd sizes (the 409-row embedding) differ by a row between ranks
            assert measured[key] == pytest.approx(estimate[part], rel=0.01), (part, measured)
        # AdamW also keeps one 4-byte step counter per parameter tensor: not model-sized
        assert measured["step_counters"] < 0.001 * estimate["optimizer"]
