"""The default run, for real, through `areal-launch` as `make demo` runs it (fewer steps), in a
real terminal: tmux gives it a pty, and the test reads the screen as a person would.

A vLLM CPU server and two FSDP2 ranks on gloo: the trainers sample, score, step, push their
weights into the server and confirm it serves them. On the screen: one live line per process
with its state while the server comes up, the trainers' lines, no server start-up noise, the
summary table at the end, all on one screen; the log files keep everything; TensorBoard's
reader sees every step and the run's picture is in its folder. Nothing of the run
may be left afterwards.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import time
import uuid

import pytest

from tests.areal_launch import EXE, ROOT
from tests.processes import survivors, wait_until
from tests.trackers import tensorboard_steps

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.torch,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30).stdout


@pytest.mark.timeout(900)
def test_default_run_in_a_terminal_trains_pushes_weights_shows_states_and_leaves_nothing(
    tiny_model, tmp_path
):
    tag, session = uuid.uuid4().hex, f"areal-{uuid.uuid4().hex[:8]}"
    run_dir = tmp_path / "run"
    command = (
        f"cd {shlex.quote(str(ROOT))} && env -u COLUMNS -u LINES CUDA_VISIBLE_DEVICES= "
        f"TEST_RUN_TAG={tag} "
        f"{shlex.quote(EXE)} recipe.steps=2 hydra.run.dir={shlex.quote(str(run_dir))}; "
        "echo EXIT=$?; sleep 600"
    )
    tmux("new-session", "-d", "-s", session, "-x", "220", "-y", "60", command)
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + 840
        while True:
            screen = tmux("capture-pane", "-p", "-t", session)
            seen.update(ln.strip() for ln in screen.splitlines())
            if "EXIT=" in screen:
                break
            assert time.monotonic() < deadline, screen
            time.sleep(0.5)
        whole = tmux("capture-pane", "-p", "-J", "-S", "-", "-t", session)
    finally:
        tmux("kill-session", "-t", session)
    lines = [ln.rstrip() for ln in whole.splitlines() if ln.strip()]
    text = "\n".join(lines)
    assert "EXIT=0" in text, text
    # while the server came up: one live line per process with its state
    assert any(
        re.fullmatch(r"rollout-0\s+starting: waiting for health \(\d+ s of 600 s\)", ln)
        for ln in seen
    ), sorted(seen)
    assert any(re.fullmatch(r"actor-node0\s+running", ln) for ln in seen), sorted(seen)
    # the trainers reached the server, trained and had every reload confirmed by the server
    steps = re.findall(
        r"actor-node0 \| step (\d)/2 reward [\d.]+ loss -?[\d.]+.*"
        r"reload confirmed 1/1",
        text,
    )
    assert steps == ["1", "2"], text
    assert "reloads confirmed 2/2" in text
    # the default tracker (TensorBoard) has every step, as TensorBoard's own reader sees it, and
    # the run ends with its picture in the run folder
    assert tensorboard_steps(run_dir / "tensorboard") == [1, 2]
    assert f"grpo: the run as a picture: {run_dir / 'metrics.png'}" in text
    assert (run_dir / "metrics.png").read_bytes()[:4] == b"\x89PNG"
    # no server start-up noise; the summary; one screen
    assert "rollout-0 |" not in text and "INFO" not in text, text
    assert re.search(r"^process\s+exit\s+duration\s+log$", text, re.M), text
    assert re.search(
        rf"^rollout-0\s+stopped\s+[\d.]+ s\s+{run_dir}/logs/rollout-0.log$", text, re.M
    ), text
    assert re.search(
        rf"^actor-node0\s+0\s+[\d.]+ s\s+{run_dir}/logs/actor-node0.log$", text, re.M
    ), text
    assert len(lines) < 40, text
    # the run folder holds the plan every process got and one whole log per process
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["cluster"]["device"] == "cpu"
    assert {p["name"] for p in plan["processes"]} == {"rollout-0", "actor-node0"}
    assert (
        "Uvicorn running" in (run_dir / "logs" / "rollout-0.log").read_text()
        or "Starting vLLM" in (run_dir / "logs" / "rollout-0.log").read_text()
    )
    assert "grpo done" in (run_dir / "logs" / "actor-node0.log").read_text()
    assert wait_until(lambda: not survivors(tag, run_dir), within_s=10), survivors(tag, run_dir)
