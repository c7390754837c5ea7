"""Servers never serve stale weights after a restart (docs/architecture.md §11), against a real
vLLM CPU server.

- Before each rollout, rank 0 asks every server which weights it serves. A server restarted
  alone comes back serving the start model ("default"): it is waited for while down, given the
  trainer's current weights folder again and confirmed (greedy tokens and log-probs), with one
  log line naming it. Driven here through recipes/grpo/serving.refresh on a real restart.
- A trainer job that failed after pushing v3 (its newest checkpoint: step 2) and was restarted
  resumes from step 2 and pushes v2 to the server before its first rollout, so the server never
  samples for step 3 with the failed attempt's v3.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Optional

import pytest

from launcher.trainer import progress
from launcher.trainer.runtime import plan_from_dict, wait_for_servers
from tests.test_recipe_e2e import (
    PYTHON,
    SERVER_START_TIMEOUT_S,
    free_port,
    run_trainers,
    stop,
    trainer_env,
    write_plan,
)

pytestmark = [pytest.mark.vllm, pytest.mark.torch]


class Server:
    """One real vLLM CPU server on the tiny model that the test can restart on its port."""

    def __init__(self, model: str, log_dir: Path) -> None:
        self.model, self.log_dir = model, log_dir
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        env = dict(
            os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_SERVER_DEV_MODE="1"
        )
        argv = [
            PYTHON,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            "float32",
            "--max-model-len",
            "256",
            "--enforce-eager",
            "--served-model-name",
            "policy",
        ]
        self.starts += 1
        with open(self.log_dir / f"server-{self.starts}.log", "w") as out:
            self.proc = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)

    def weight_version(self) -> str:
        with urllib.request.urlopen(f"http://{self.addr}/weight_info", timeout=10) as resp:
            return json.load(resp)["weight_version"]


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    srv = Server(str(tiny_model), tmp_path_factory.mktemp("vllm"))
    srv.start()
    try:
        wait_for_servers([srv.addr], timeout_s=SERVER_START_TIMEOUT_S)
        yield srv
    finally:
        srv.stop()


def trained_folder(tiny_model: str, folder: Path) -> Path:
    """The tiny model with every weight nudged (seeded): weights no server started from."""
    code = (
        "import sys, shutil, torch; from safetensors.torch import load_file, save_file; "
        "src, dst = sys.argv[1:]; shutil.copytree(src, dst); g = torch.Generator()."
        "manual_seed(3); w = load_file(dst + '/model.safetensors'); save_file({k: v + 0.05 "
        "* torch.randn(v.shape, generator=g) for k, v in w.items()}, dst + "
        "'/model.safetensors', metadata={'format': 'pt'})"
    )
    subprocess.run([PYTHON, "-c", code, tiny_model, str(folder)], check=True, timeout=120)
    return folder


def session(
    server: Server, tiny_model: str, policy_dir: Path, version: Optional[str], run_dir: Path
):
    """What rank 0 holds for serving.refresh: the servers, the current version and folder."""
    import torch
    from transformers import AutoTokenizer

    from recipes.grpo.loop import Session
    from recipes.grpo.options import load_options
    from recipes.grpo.rollout_client import RolloutServer

    rt = plan_from_dict(
        {"components": {}, "health_timeout_s": SERVER_START_TIMEOUT_S},
        env={"AREAL_RUN_DIR": str(run_dir), "RANK": "0"},
    )
    opts, _ = load_options(rt, [])
    return Session(
        opts=opts,
        rank=0,
        data_rank=0,
        data_world=1,
        data_group=None,
        device=torch.device("cpu"),
        dtype=torch.float32,
        tokenizer=AutoTokenizer.from_pretrained(tiny_model),
        model_config=None,
        generation_config=None,
        hf_shapes={},
        servers=[RolloutServer(server.addr, "vllm", "policy")],
        my_instances=[],
        weights_root=policy_dir.parent,
        policy_dir=str(policy_dir),
        phases=None,
        max_tokens_per_mb=0,
        rt=rt,
        version=version,
    )


def test_a_server_restarted_alone_is_waited_for_and_given_the_current_weights(
    server, tiny_model, tmp_path
):
    from recipes.grpo import serving

    folder = trained_folder(tiny_model, tmp_path / "weights" / "v7")
    s = session(server, tiny_model, folder, "v7", tmp_path)
    said: list[str] = []
    before = server.weight_version()  # the start model's "default", or an earlier test's
    assert serving.refresh(s, 7, said.append) == [server.addr]
    assert said == [
        f"grpo: rollout server {server.addr} serves weight version {before!r}, "
        f"not v7: pushing {folder} to it again"
    ]
    assert server.weight_version() == "v7"
    said.clear()
    assert serving.refresh(s, 7, said.append) == [] and said == []  # current: left alone

    server.stop()  # restarted alone: down for a while, then up on the start model
    server.start()
    phases: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            record = progress.read_all(tmp_path).get(0)
            if record and (not phases or phases[-1] != record.phase):
                phases.append(record.phase)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        fixed = serving.refresh(s, 8, said.append)  # waits, re-pushes, confirms (else raises)
    finally:
        done.set()
        watcher.join()
    assert fixed == [server.addr]
    assert said[0] == (
        f"grpo: rollout server {server.addr} is down: waiting up to "
        f"{SERVER_START_TIMEOUT_S}s for its /health"
    )
    assert said[1] == (
        f"grpo: rollout server {server.addr} serves weight version 'default', "
        f"not v7: pushing {folder} to it again"
    )
    assert len(said) == 2 and server.weight_version() == "v7"
    assert "wait_server" in phases  # the watchdog sees why rank 0 is not sampling


def test_a_restarted_trainer_pushes_its_checkpoints_weights_before_the_first_rollout(
    server, tiny_model, tmp_path
):
    recipe = {
        "steps": 4,
        "save_every": 2,
        "prompts_per_step": 2,
        "samples_per_prompt": 4,
        "max_new_tokens": 8,
    }
    plan = write_plan(tmp_path / "run", Path(tiny_model), server.addr, recipe)
    env = trainer_env(plan, [server.addr])
    first, _ = run_trainers({**env, "GRPO_TEST_FAIL_AFTER_STEP": "3"})
    assert first.returncode != 0 and "fails on purpose at the end of step 3" in first.stdout
    assert "step 3/4 " in first.stdout and "reload confirmed 1/1" in first.stdout
    assert server.weight_version() == "v3"  # the failed attempt got further than step_2
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step_2"]

    again, _ = run_trainers({**env, "GRPO_TEST_FAIL_AFTER_STEP": "3", "AREAL_RESTART": "1"})
    out = again.stdout
    assert again.returncode == 0, out[-4000:]
    assert "grpo: resumed from step 2 (checkpoints/step_2), restart 1" in out
    assert "grpo: weights v2 pushed before the first rollout: 1 server(s), confirmed 1/1" in out
    assert out.index("pushed before the first rollout") < out.index("step 3/4 ")
    assert "serves weight version" not in out  # no stale server met at the rollout check
    assert "step 3/4 " in out and "step 4/4 " in out and "reloads confirmed 2/2" in out
    assert server.weight_version() == "v4"


def test_before_its_first_update_a_trainer_gives_its_start_model_to_a_server_holding_a_push(
    server, tiny_model, tmp_path
):
    """Its own push of the start model is labelled v0, never "default" (a fresh server's label):
    a server that kept an earlier push under it (another attempt's, or a reload that failed its
    check: other weights) is given this trainer's start model before step 1, then left alone."""
    from recipes.grpo import serving
    from recipes.grpo.rollout_client import RolloutServer

    other = trained_folder(tiny_model, tmp_path / "weights" / "other")
    RolloutServer(server.addr, "vllm", "policy").reload(str(other), serving.START_PUSH)
    s = session(server, tiny_model, Path(tiny_model), None, tmp_path)
    said: list[str] = []
    assert serving.refresh(s, 1, said.append) == [server.addr]  # confirmed, else it raises
    assert said == [
        f"grpo: rollout server {server.addr} serves weight version 'v0', not the start model "
        f"(v0): pushing {tiny_model} to it again"
    ]
    assert s.version == "v0" == server.weight_version()
    said.clear()
    assert serving.refresh(s, 1, said.append) == [] and said == []  # current: left alone
