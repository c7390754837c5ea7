"""Runs that survive (docs/architecture.md §11), with real torchrun workers on gloo through the
real CLI:
a failed trainer job restarts and resumes from its newest checkpoint, restarts are bounded and
a failure that repeats at once backs off, what a failed start left behind is stopped before the
next start, a hung rank is named with its stack, and `status` tells it all. The record files
two node supervisors share are tested on their own too (real files, real processes).
"""

from __future__ import annotations

import json
import multiprocessing
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.node import restarts
from launcher.node.restarts import Failure
from launcher.node.watchdog import main_thread_frames
from tests.areal_launch import run
from tests.trackers import mlflow_runs, mlflow_steps, tensorboard_steps, wandb_offline

CPU_RUN = ("rollout=none", "cluster.device=cpu")


def records(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "restarts").glob("[0-9]*.json"))]


@pytest.fixture(scope="module")
def restarted(tmp_path_factory):
    """The default recipe, 4 steps, a checkpoint every 2: rank 1 fails at the end of step 3,
    the job restarts once, resumes from step 2 and does step 3 again; every tracker on (W&B
    offline, MLflow on its default SQLite store beside the run folder)."""
    run_dir = tmp_path_factory.mktemp("restarted") / "run"
    out = run(
        *CPU_RUN,
        "recipe.steps=4",
        "recipe.save_every=2",
        "launcher.max_restarts=1",
        "+launcher.env.GRPO_TEST_FAIL_AFTER_STEP=3",
        "launcher.tracking=[tensorboard,wandb,mlflow]",
        "+launcher.env.WANDB_MODE=offline",
        f"hydra.run.dir={run_dir}",
        timeout=280,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir, out.stdout + out.stderr


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_a_failed_trainer_restarts_and_resumes_from_its_newest_checkpoint(restarted):
    run_dir, said = restarted
    assert (
        "restart 1 of 1: actor-node0 exited with code 1: rank 1 raised RuntimeError: "
        "GRPO_TEST_FAIL_AFTER_STEP=3" in said
    )
    assert "grpo: resumed from step 2 (checkpoints/step_2), restart 1" in said
    after = said.split("trainers started again (restart 1)")[1]
    assert "step 3/4" in after and "step 4/4" in after and "step 2/4" not in after
    [record] = records(run_dir)
    assert (record["n"], record["kind"], record["name"], record["epoch"]) == (
        1,
        "trainers",
        "actor-node0",
        1,
    )
    status = run("status", str(run_dir))
    assert status.returncode == 0, status.stderr
    assert "actor-node0 (trainer, pid" in status.stdout and "restart 1): exit 0" in status.stdout
    assert "progress: step 4" in status.stdout
    assert f"last checkpoint: step 4 ({run_dir / 'checkpoints' / 'step_4'})" in status.stdout
    assert "restarts: 1\n    restart 1: actor-node0 exited with code 1" in status.stdout


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_a_restarted_run_is_one_run_in_every_tracker_with_each_step_once(restarted):
    """Steps 1-3, the failure, step 3 again and 4: each tracker holds one run with steps 1-4
    once (the re-done step 3 is not written again), and `status` says where to look."""
    run_dir, _ = restarted
    run_id = json.loads((run_dir / "request.json").read_text())["run_id"]
    assert tensorboard_steps(run_dir / "tensorboard") == [1, 2, 3, 4]
    starts = wandb_offline(run_dir)
    assert [(s.run_id, s.project) for s in starts] == [(run_id, "areal")] * 2  # one run, 2 starts
    assert [s.steps for s in starts] == [[1, 2, 3], [4]]
    [mlflow] = mlflow_runs(run_dir)
    assert mlflow.data.tags["areal_launch.run_id"] == run_id and mlflow.info.status == "FINISHED"
    assert mlflow_steps(run_dir, mlflow.info.run_id) == [1, 2, 3, 4]
    assert set(mlflow.data.metrics) >= {
        "reward",
        "loss",
        "step_time_s",
        "rollout_time_s",
        "train_time_s",
        "weight_push_time_s",
        "tokens_per_s",
    }
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["restart"]) for r in records] == [(1, 0), (2, 0), (3, 0), (4, 1)]
    assert (run_dir / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the run's end
    (run_dir / "metrics.png").unlink()
    status = run("status", str(run_dir), "--plot")
    assert status.returncode == 0, status.stderr
    lines = status.stdout
    assert re.search(r"  metrics: steps 1-4, reward [▁-█]{4} ", lines), lines
    assert f"  tensorboard: tensorboard --logdir {run_dir / 'tensorboard'}" in lines
    assert (
        f"  wandb: run areal/{run_id} (offline: wandb sync {run_dir}/wandb/offline-run-*)" in lines
    )
    assert (
        f"  mlflow: run {mlflow.info.run_id} of experiment {mlflow.info.experiment_id} "
        f"(mlflow ui --backend-store-uri sqlite:///{run_dir.parent / 'mlflow.db'})" in lines
    )
    assert f"picture: {run_dir / 'metrics.png'}" in lines
    assert (run_dir / "metrics.png").stat().st_size > 10_000


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_restarts_are_bounded_and_a_failure_that_repeats_at_once_backs_off(tmp_path):
    run_dir = tmp_path / "run"
    out = run(
        *CPU_RUN,
        "trainer.entry=tests/gloo_trainer.py",
        "launcher.max_restarts=2",
        "+launcher.env.FAIL_RANK=1",
        f"hydra.run.dir={run_dir}",
        timeout=280,
    )
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    said = out.stdout + out.stderr
    assert said.count("restart 1 of 2:") == 1 and said.count("restart 2 of 2:") == 1
    assert "waiting 5 s before restarting" in said  # the 2nd identical quick failure
    root = [ln for ln in said.splitlines() if ln.startswith("root cause:")]
    assert len(root) == 1 and "rank 1 raised" in root[0]
    assert (
        "(after 2 restart(s) of launcher.max_restarts=2; earlier: 1: actor-node0 exited with code 1"
        in root[0]
        and "; 2: actor-node0 exited with code 1" in root[0]
    )
    assert [r["epoch"] for r in records(run_dir)] == [1, 2]


@pytest.mark.torch
@pytest.mark.timeout(240)
def test_a_restart_first_stops_what_the_failed_start_left_behind(tmp_path):
    """A grandchild of the failed start that double-forked and called setsid (it left the
    trainer's tree, not its environment) is gone before the trainers start again."""
    run_dir = tmp_path / "run"
    out = run(
        *CPU_RUN,
        "actor.backend=fsdp:d1",
        "trainer.entry=tests/escaping_trainer.py",
        "launcher.max_restarts=1",
        f"hydra.run.dir={run_dir}",
        timeout=220,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert (run_dir / "escapee.state").read_text() == "gone"


@pytest.mark.torch
@pytest.mark.timeout(240)
def test_a_hung_rank_is_named_and_its_stack_is_in_the_log(tmp_path):
    run_dir = tmp_path / "run"
    out = run(
        *CPU_RUN,
        "trainer.entry=tests/hang_trainer.py",
        "launcher.hang_timeout_s=5",
        "+launcher.env.HANG_AT_STEP=3",
        f"hydra.run.dir={run_dir}",
        timeout=220,
    )
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    root = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.startswith("root cause:")]
    assert len(root) == 1, out.stdout[-3000:]
    assert "root cause: hung: no trainer progress for" in root[0]
    assert (
        "last: step 3 train): rank 1 stopped in hang_inside_step (tests/hang_trainer.py:" in root[0]
    )
    assert "rank 0 waits in all_reduce" in root[0]
    log = (run_dir / "logs" / "actor-node0.log").read_text()
    assert "in hang_inside_step" in log and "in all_reduce" in log  # faulthandler's dumps


def _claim(run_dir: str, barrier, out) -> None:
    barrier.wait()
    record, mine = restarts.claim_trainer_restart(
        run_dir, 1, Failure("actor-node0", restarts.TRAINERS, "rank 1 died", 30.0)
    )
    out.put((record.n, mine))


def test_two_supervisors_that_see_one_trainer_failure_agree_on_one_restart(tmp_path):
    """Processes racing to record the same trainers restart: one record, one claimant."""
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(str(tmp_path), barrier, out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    got = sorted(out.get(timeout=5) for _ in procs)
    assert got == [(1, False), (1, False), (1, False), (1, True)]
    assert [r.n for r in restarts.read_all(tmp_path)] == [1]


def test_backoff_grows_for_the_same_quick_failure_and_gives_up(tmp_path):
    quick = Failure("actor", restarts.TRAINERS, "actor exited with code 1: ImportError", 3.0)
    waits = []
    for _ in range(len(restarts.BACKOFF_S) + 2):
        waits.append(restarts.backoff_s(quick, restarts.read_all(tmp_path)))
        restarts.record(tmp_path, quick)
    assert waits == [0.0, *restarts.BACKOFF_S, None]
    slow = Failure("actor", restarts.TRAINERS, quick.reason, restarts.QUICK_S + 1)
    assert restarts.backoff_s(slow, restarts.read_all(tmp_path)) == 0.0
    other = Failure("actor", restarts.TRAINERS, "actor killed by SIGKILL", 3.0)
    assert restarts.backoff_s(other, restarts.read_all(tmp_path)) == 0.0


def faulthandler_dump(code: str) -> str:
    """What faulthandler wrote (to stderr) in a real Python process running `code`."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    ).stderr


def test_the_main_threads_frames_come_from_a_real_faulthandler_dump():
    text = faulthandler_dump(
        "import faulthandler, threading, time\n"
        "def worker():\n    time.sleep(30)\n"
        "threading.Thread(target=worker, daemon=True).start()\n"
        "def stuck_here():\n    faulthandler.dump_traceback(all_threads=True)\n"
        "stuck_here()\n"
    )
    frames = main_thread_frames(text)
    assert [f.func for f in frames] == ["stuck_here", "<module>"], text
    assert frames[0].line == 6


def test_a_fatal_dump_another_thread_took_still_gives_the_main_threads_frames():
    """The thread that takes the signal is "Current thread"; the main one is listed last."""
    text = faulthandler_dump(
        "import faulthandler, threading\n"
        "ready = threading.Event()\n"
        "def main_waits():\n    ready.set()\n    t.join()\n"
        "def other():\n    ready.wait()\n    faulthandler.dump_traceback(all_threads=True)\n"
        "t = threading.Thread(target=other)\nt.start()\nmain_waits()\n"
    )
    assert "Current thread" in text.split("Thread 0x")[0], text  # the other thread took it
    assert [f.func for f in main_thread_frames(text)][-2:] == ["main_waits", "<module>"], text


def test_the_main_threads_frames_come_from_py_spys_format():
    # py-spy dump's layout (py-spy is not installed here; the launcher uses it where it is)
    text = (
        "Process 4242: python train.py\nPython v3.11.7 (/usr/bin/python3.11)\n\n"
        'Thread 4243 (idle): "pt_autograd_0"\n    wait (threading.py:327)\n'
        'Thread 4242 (idle): "MainThread"\n'
        "    all_reduce (torch/distributed/distributed_c10d.py:3252)\n"
        "    step (train.py:88)\n"
    )
    frames = main_thread_frames(text)
    assert [(f.func, f.line) for f in frames] == [("all_reduce", 3252), ("step", 88)]
