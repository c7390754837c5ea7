"""Every run has a folder of its own, always: launches started in the same second (the default
folder name has one-second resolution) never read each other's plan or truncate each other's
logs. Real launches, real torchrun, started at once from one directory."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from launcher.node.runs import claim_run_dir, free_run_dir, make_run_dir
from tests.areal_launch import EXE, ROOT

CHECK = """\
import json, os
plan = json.load(open(os.environ["AREAL_LAUNCH_PLAN"]))
mine = os.environ["MARK"]
listed = {p["env"].get("MARK") for p in plan["processes"]}
out = os.path.join(os.environ["AREAL_RUN_DIR"], f"seen-{os.environ['RANK']}.json")
json.dump({"mine": mine, "plan": sorted(listed)}, open(out, "w"))
print("run", mine, "rank", os.environ["RANK"], flush=True)
"""


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_launches_started_at_once_each_get_a_folder_and_read_their_own_plan(tmp_path):
    entry = tmp_path / "check.py"
    entry.write_text(CHECK)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    launches = [
        subprocess.Popen(
            [
                EXE,
                "rollout=none",
                "actor.backend=fsdp:d2",
                f"trainer.entry={entry}",
                f"+launcher.env.MARK={i}",
                f"hydra.run.dir={tmp_path}/runs/same-second",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for i in range(4)
    ]
    outputs = [p.communicate(timeout=240)[0] for p in launches]
    assert [p.returncode for p in launches] == [0] * 4, outputs
    folders = sorted((tmp_path / "runs").iterdir())
    assert [f.name for f in folders] == [
        "same-second",
        "same-second-1",
        "same-second-2",
        "same-second-3",
    ]
    marks = set()
    for folder in folders:
        seen = [json.loads((folder / f"seen-{rank}.json").read_text()) for rank in (0, 1)]
        assert all(s["plan"] == [s["mine"]] for s in seen)  # this run's plan, not another's
        marks.add(seen[0]["mine"])
        log = (folder / "logs" / "actor-node0.log").read_text()
        assert f"run {seen[0]['mine']} rank 0" in log and f"run {seen[0]['mine']} rank 1" in log
    assert marks == {"0", "1", "2", "3"}


def test_a_taken_folder_is_never_claimed_twice(tmp_path):
    wanted = tmp_path / "run"
    first = make_run_dir(wanted)
    assert first == wanted and free_run_dir(wanted) == tmp_path / "run-1"
    assert claim_run_dir(first) is False  # another launch made it: mkdir says so, atomically
    assert make_run_dir(wanted) == tmp_path / "run-1"
