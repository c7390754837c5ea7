"""The worker components the project ships (recipes/workers: RLinf's `env` and `reward` as HTTP
services) and the recipe's side of them (recipes/grpo/workers_client.py, world.py), as real
processes on loopback: no torch, a second or two in all. The real runs are in
tests/test_rlinf_runs.py."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from launcher.trainer.runtime import wait_for_servers
from recipes.grpo.reward import make_prompts, number_reward
from recipes.grpo.rollout_client import RolloutError, Sample, post_json
from recipes.grpo.workers_client import EnvClient, RewardClient, WorkerOffload
from recipes.grpo.world import STAGE_SEED, World

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    """env-0, reward-0, reward-1: started as the launcher starts them (python -m, its env)."""
    run_dir = tmp_path_factory.mktemp("workers")
    procs, addrs = [], {}
    for name, index, module in (
        ("env", 0, "text_env"),
        ("reward", 0, "reward_server"),
        ("reward", 1, "reward_server"),
    ):
        port = free_port()
        env = dict(
            os.environ,
            AREAL_COMPONENT=name,
            AREAL_WORKER_INDEX=str(index),
            AREAL_WORKER_PORT=str(port),
            AREAL_WORKER_HOST="127.0.0.1",
            AREAL_RUN_DIR=str(run_dir),
            PYTHONPATH=str(ROOT),
        )
        log = open(run_dir / f"{name}-{index}.log", "w")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", f"recipes.workers.{module}"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        )
        addrs.setdefault(name, []).append(f"127.0.0.1:{port}")
    try:
        wait_for_servers([a for v in addrs.values() for a in v], timeout_s=30, interval_s=0.1)
        yield addrs, run_dir
    finally:
        for p in procs:
            p.terminate()
        codes = [p.wait(timeout=10) for p in procs]
        assert codes == [0, 0, 0]  # SIGTERM: a clean stop


def test_the_reward_service_scores_as_the_recipe_does_spread_over_its_processes(services):
    addrs, run_dir = services
    texts = ["one two three", "hello", "", "four five x", "ten"]
    assert RewardClient(tuple(addrs["reward"])).score(texts) == [number_reward(t) for t in texts]
    time.sleep(0.2)
    logs = [(run_dir / f"reward-{i}.log").read_text() for i in (0, 1)]
    assert "scored 3 completion(s)" in logs[0] and "scored 2 completion(s)" in logs[1]


def test_the_text_env_hands_out_prompts_and_scores_each_episode_once(services):
    env = EnvClient(tuple(services[0]["env"]))
    episodes = env.reset(step=3, stage=0, count=2, seed=1)
    assert [e.prompt for e in episodes] == make_prompts(2, 1, 3)
    other = env.reset(3, 1, 2, 1)  # stage 1: its own draw, as world.STAGE_SEED says
    assert [e.prompt for e in other] == make_prompts(2, 1 + STAGE_SEED, 3)
    rewards = env.step([episodes[0], episodes[0], episodes[1]], ["one two", "x", "three"])
    assert rewards == [1.0, 0.0, 1.0]
    with pytest.raises(RolloutError, match="were not reset here"):
        env.step([episodes[0]], ["one"])


def test_bad_bodies_are_400_with_the_reason(services):
    addr = services[0]["env"][0]
    with pytest.raises(RolloutError, match=r"HTTP 400.*count=0"):
        post_json(addr, "/reset", {"step": 1, "stage": 0, "count": 0, "seed": 1})
    with pytest.raises(RolloutError, match=r"HTTP 400.*texts"):
        post_json(services[0]["reward"][0], "/score", {"texts": "one"})


def test_offload_drops_the_state_and_a_reload_is_confirmed_by_its_digest(services):
    addrs, _ = services
    env = EnvClient(tuple(addrs["env"]))
    opened = env.reset(step=9, stage=0, count=1, seed=2)
    lines: list[str] = []
    workers = WorkerOffload({"env": tuple(addrs["env"])}, lines.append)
    workers.offload()
    with urllib.request.urlopen(f"http://{addrs['env'][0]}/health") as resp:
        assert b'"offloaded"' in resp.read()
    with pytest.raises(RolloutError, match="HTTP 409"):
        env.reset(step=9, stage=1, count=1, seed=2)
    assert workers.reload() == 1 and workers.confirmed == 1
    assert "workers reloaded 1/1, state confirmed" in lines[-1]
    assert env.step(opened, ["five"]) == [1.0]  # the open episode came back


def test_a_pipelined_rollout_prepares_the_next_stage_while_the_current_one_generates(services):
    addrs, run_dir = services
    lines: list[str] = []
    world = World(
        EnvClient(tuple(addrs["env"])),
        RewardClient(tuple(addrs["reward"])),
        2,
        WorkerOffload({}, lines.append),
        lines.append,
    )

    def sample(prompts: list[str], seed: int) -> list[Sample]:
        time.sleep(0.3)  # a generation that takes a while
        return [
            Sample(i, p, f"{p} one", None, None, None, "x")
            for i, p in enumerate(prompts)
            for _ in range(2)
        ]

    samples, rewards = world.rollout(step=5, prompts=3, n=2, seed=1, sample_seed=0, sample=sample)
    assert [x.prompt_index for x in samples] == [0, 0, 1, 1, 2, 2]
    assert rewards == [number_reward(x.text) for x in samples]
    stages = [ln for ln in lines if "rollout of" in ln]
    assert len(stages) == 2 and "rollout of 2 prompt(s)" in stages[0]
    time.sleep(0.2)
    env_log = (run_dir / "env-0.log").read_text()
    rollout0 = [float(v) for v in re.search(r"\[(\S+), (\S+)\]", stages[0]).groups()]
    reset1 = next(ln for ln in env_log.splitlines() if "reset step 5 stage 1" in ln)
    begin, end = (float(v) for v in reset1.rsplit("[", 1)[1].rstrip("]").split(", "))
    assert rollout0[0] < end and begin < rollout0[1]  # env's stage 1 inside rollout's stage 0
