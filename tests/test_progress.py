"""launcher/trainer/progress.py and the runtime's side of it: every trainer rank keeps a progress
record in the run folder (step, phase, pid, restart, and the signal that dumps its stacks), and
the launcher reads them all. Stdlib only, like the launcher side that reads them."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from launcher.spec.errors import LaunchError
from launcher.trainer import checkpoints, progress
from launcher.trainer.runtime import plan_from_dict


def runtime(tmp_path, **env):
    return plan_from_dict({"components": {}}, env={"AREAL_RUN_DIR": str(tmp_path), **env})


def test_a_heartbeat_is_read_back_as_the_ranks_progress(tmp_path):
    rt = runtime(tmp_path, RANK="1", AREAL_RESTART="2")
    assert rt.heartbeat(4, "train") is True
    seen = progress.read_all(tmp_path)
    assert list(seen) == [1]
    record = seen[1]
    assert (record.rank, record.pid, record.step, record.phase, record.restart) == (
        1,
        os.getpid(),
        4,
        "train",
        2,
    )
    assert record.stacks == "SIGUSR2" and record.stack_signal == signal.SIGUSR2
    assert 0 <= record.age_s() < 60
    raw = json.loads((tmp_path / "progress" / "1.json").read_text())
    assert set(raw) >= {"rank", "pid", "step", "phase", "time", "restart", "stacks"}
    assert os.listdir(tmp_path / "progress") == ["1.json"]  # no temporary file left behind


def test_a_phase_change_is_always_written_the_same_phase_at_most_once_a_second(tmp_path):
    rt = runtime(tmp_path)
    assert rt.heartbeat(1, "rollout") is True
    assert rt.heartbeat(1, "rollout") is False  # the same again, at once: not rewritten
    assert rt.heartbeat(1, "train") is True
    assert rt.heartbeat(2, "train") is True
    assert progress.read_all(tmp_path)[0].step == 2
    assert rt.heartbeat(2, "train", min_interval_s=0.0) is True  # a refresh, when allowed


def test_ranks_that_never_reported_and_unreadable_records_are_absent(tmp_path):
    assert progress.read_all(tmp_path) == {}
    runtime(tmp_path, RANK="0").heartbeat(1, "rollout")
    (tmp_path / "progress" / "3.json").write_text("{not json")
    assert list(progress.read_all(tmp_path)) == [0]


def test_no_run_folder_no_heartbeat(tmp_path):
    rt = plan_from_dict({"components": {}}, env={})
    assert rt.heartbeat(1, "train") is False and rt.checkpoint_dir() is None
    assert rt.latest_checkpoint() is None and rt.checkpoint_request() is None


def test_restart_count_comes_from_the_launcher_and_is_0_at_first(tmp_path):
    assert runtime(tmp_path).restart() == 0
    assert runtime(tmp_path, AREAL_RESTART="3").restart() == 3
    with pytest.raises(LaunchError, match="AREAL_RESTART='x'"):
        runtime(tmp_path, AREAL_RESTART="x").restart()


def test_the_runtime_finds_the_newest_checkpoint_and_the_launchers_request(tmp_path):
    rt = runtime(tmp_path)
    assert rt.checkpoint_dir() == str(tmp_path / "checkpoints") and rt.latest_checkpoint() is None
    for step in (1, 2):
        checkpoints.commit(checkpoints.staging(tmp_path / "checkpoints", step), step)
    assert rt.latest_checkpoint() == (2, tmp_path / "checkpoints" / "step_2")
    request = checkpoints.request_checkpoint(tmp_path)
    assert rt.checkpoint_request() == request
    rt.checkpoint_request_done(request)
    assert checkpoints.checkpoint_done(tmp_path, request) and rt.checkpoint_request() is None


STACKS = """\
import sys, time, threading
from launcher.trainer.runtime import plan_from_dict
rt = plan_from_dict({"components": {}}, env={"AREAL_RUN_DIR": sys.argv[1]})
def worker_thread_waits():
    time.sleep(60)
threading.Thread(target=worker_thread_waits, daemon=True).start()
rt.heartbeat(1, "train")
print("ready", flush=True)
for _ in range(100):
    time.sleep(0.05)
print("still alive", flush=True)
"""


def test_sigusr2_dumps_every_threads_stack_and_the_process_goes_on(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", STACKS, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    record = progress.read_all(tmp_path)[0]
    assert record.pid == proc.pid and record.stack_signal == progress.STACK_SIGNAL
    os.kill(proc.pid, record.stack_signal)
    time.sleep(0.2)
    os.kill(proc.pid, record.stack_signal)  # and again: it stays registered
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.strip() == "still alive", err
    assert err.count("Current thread") == 2, err
    assert "worker_thread_waits" in err and "<module>" in err


def test_each_trainer_job_has_its_own_ranks_and_one_jobs_beats_never_hide_anothers_hang(tmp_path):
    """A run of several trainer jobs (actor, actor2, inference) has a rank 0 in each: their
    records are apart, `status` shows a line per job, and the watchdog finds the job that
    stopped while another still beats."""
    from launcher.node.report import progress_lines
    from launcher.node.watchdog import Watchdog

    for job in ("actor", "actor2"):
        runtime(tmp_path, RANK="0", AREAL_COMPONENT=job).heartbeat(3, "train")
    assert sorted(os.listdir(tmp_path / "progress")) == ["actor.0.json", "actor2.0.json"]
    jobs = progress.read_jobs(tmp_path)
    assert list(jobs) == ["actor", "actor2"] and jobs["actor2"][0].job == "actor2"
    assert progress.read_all(tmp_path, "actor2")[0].step == 3
    lines = progress_lines(tmp_path)
    assert [ln.split(":")[0] for ln in lines[:2]] == ["  progress of actor", "  progress of actor2"]
    stale = dataclasses.replace(jobs["actor"][0], time=time.time() - 60)
    progress.write(tmp_path, stale)  # actor stopped a minute ago; actor2 beat just now
    dog = Watchdog(tmp_path, 30.0, lambda: {os.getpid()})
    hung = dog.check()
    assert hung is not None and [(r.job, r.rank) for r in hung] == [("actor", 0)]
