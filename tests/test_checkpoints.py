"""launcher/trainer/checkpoints.py: the run folder's checkpoints (newest complete one wins) and the
launcher's request for one. Stdlib only, like the launcher side that reads them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from launcher.trainer import checkpoints as ck


def save(root, step, restart=0, files=("shard",)):
    staged = ck.staging(root, step)
    for name in files:
        (staged / name).write_text(f"step {step}")
    return ck.commit(staged, step, restart=restart, extra={"reason": "test"})


def test_newest_complete_checkpoint_wins(tmp_path):
    root = tmp_path / "checkpoints"
    assert ck.latest(root) is None  # no folder yet
    save(root, 2)
    save(root, 10)
    save(root, 9)
    step, path = ck.latest(root)
    assert (step, path) == (10, root / "step_10")  # by step number, not by name or age
    meta = ck.read_meta(path)
    assert meta["step"] == 10 and meta["restart"] == 0 and meta["reason"] == "test"
    assert meta["time"] > 0


def test_a_checkpoint_being_written_is_never_resumed_from(tmp_path):
    root = tmp_path / "checkpoints"
    save(root, 3)
    staged = ck.staging(root, 4)
    (staged / "shard").write_text("half")  # a writer that died here, or is still writing
    (root / "step_5").mkdir()  # a folder without meta.json: not a checkpoint either
    assert ck.latest(root) == (3, root / "step_3")
    assert staged.name == f".tmp-step_4-{os.getpid()}" and staged.parent == root


def test_saving_a_step_again_replaces_it_whole(tmp_path):
    root = tmp_path / "checkpoints"
    save(root, 4, restart=0, files=("a", "b"))
    save(root, 4, restart=1, files=("a",))
    assert sorted(p.name for p in (root / "step_4").iterdir()) == ["a", "meta.json"]
    assert ck.read_meta(root / "step_4")["restart"] == 1
    assert sorted(p.name for p in root.iterdir()) == ["step_4"]  # nothing left aside


def test_prune_keeps_the_newest_and_clears_dead_writers_leftovers(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3, 4):
        save(root, step)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    leftover = ck.staging(root, 5, pid=int(dead))
    mine = ck.staging(root, 6)  # this process is writing it: kept
    removed = ck.prune(root, keep=2)
    assert sorted(p.name for p in removed) == [leftover.name, "step_1", "step_2"]
    assert [c.step for c in ck.complete(root)] == [3, 4] and mine.is_dir()
    assert ck.prune(root, keep=0) == [] and len(ck.complete(root)) == 2  # 0 keeps all


def test_a_checkpoint_request_is_pending_until_a_trainer_marks_it_done(tmp_path):
    assert ck.pending_request(tmp_path) is None
    first = ck.request_checkpoint(tmp_path)
    assert ck.pending_request(tmp_path) == first and not ck.checkpoint_done(tmp_path, first)
    assert (tmp_path / "control" / "checkpoint").read_text().strip() == first
    ck.mark_done(tmp_path, first)
    assert ck.checkpoint_done(tmp_path, first) and ck.pending_request(tmp_path) is None
    second = ck.request_checkpoint(tmp_path)  # a new request after one was honoured
    assert second != first and ck.pending_request(tmp_path) == second
    assert not ck.checkpoint_done(tmp_path, second)
    ck.mark_done(tmp_path, second, final=True)  # at the last step: the batch shell reads the word
    assert ck.checkpoint_done(tmp_path, second) and ck.pending_request(tmp_path) is None
    assert (tmp_path / "control" / "checkpoint.done").read_text().split() == [second, "final"]
    assert sorted(p.name for p in (tmp_path / "control").iterdir()) == [
        "checkpoint",
        "checkpoint.done",
    ]  # no temporary files left behind


def test_a_request_says_within_how_long_the_launcher_stops_the_job_after_it(tmp_path):
    plain = ck.request_checkpoint(tmp_path)
    assert ck.stop_within_s(tmp_path, plain) is None  # the job goes on after it
    stopping = ck.request_checkpoint(tmp_path, stop_within_s=100)
    assert ck.pending_request(tmp_path) == stopping  # the id alone, as before
    assert ck.stop_within_s(tmp_path, stopping) == 100 and ck.stop_within_s(tmp_path, plain) is None
    # the batch shell's own line (launcher/runners/sbatch.py): "<id> <seconds>"
    (tmp_path / "control" / "checkpoint").write_text("slurm-7-0 100\n")
    assert ck.pending_request(tmp_path) == "slurm-7-0"
    assert ck.stop_within_s(tmp_path, "slurm-7-0") == 100


def test_the_module_is_stdlib_only():
    code = (
        "import sys, launcher.trainer.checkpoints, launcher.trainer.progress, "
        "launcher.trainer.runtime; "
        "print(sorted(m for m in ('torch', 'numpy', 'vllm', 'yaml') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ}
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.replace("'", '"')) == []
