"""launcher.tracking at the plan level (milliseconds): what every trainer process is told, the
user's own tracker settings kept, a bad tracker name and a tracker the trainers' interpreter
lacks refused before anything starts, a sweep's points one group; and rank 0's writer on the
real libraries where a whole run would not show it (TensorBoard's reader after a start that
died between the trackers and the record), the sparkline and the restart marks.

The trackers over whole runs: tests/test_restarts.py (a trainer killed after step 3, every
tracker), tests/test_slurm_requeue.py (requeues), tests/test_sweep.py (a 3-point Optuna sweep:
one W&B group, one MLflow parent), tests/test_demo_e2e.py (the default run, its picture).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from launcher.cli.launch import counted_request, prepare
from launcher.node.preflight import problems
from launcher.spec import tracking
from launcher.spec.process import ENV_RUN_MARKER, ProcessSpec
from launcher.spec.request import materialize
from launcher.trainer import plot
from launcher.trainer.tracking import Trackers, read_metrics
from tests.areal_launch import EXE, ROOT, one_error_line, run
from tests.trackers import tensorboard_steps

CORE = ROOT / ".venv-core"


def processes(*overrides: str):
    prep = prepare(["cluster.device=cpu", "launcher.check_memory=off", *overrides], to_run=False)
    plan, request = counted_request(prep)
    return prep, request, {p.name: p for p in request.processes}


def test_every_trainer_process_is_told_one_identity_for_its_run_and_servers_none():
    prep, request, procs = processes("launcher.tracking=[tensorboard,wandb,mlflow]")
    env = procs["actor-node0"].env
    run_dir = request.run_dir
    assert env[tracking.ENV_TRACKING] == "tensorboard,wandb,mlflow"
    assert env[tracking.ENV_TENSORBOARD_DIR] == f"{run_dir}/tensorboard"
    assert (env["WANDB_RUN_ID"], env["WANDB_RESUME"]) == (request.run_id, "allow")
    assert (env["WANDB_PROJECT"], env["MLFLOW_EXPERIMENT_NAME"]) == ("areal", "areal")
    assert (
        env["WANDB_NAME"] == f"areal-run-{os.path.basename(run_dir)}" == env[tracking.ENV_RUN_NAME]
    )
    assert env["MLFLOW_TRACKING_URI"] == f"sqlite:///{os.path.dirname(run_dir)}/mlflow.db"
    assert "WANDB_RUN_GROUP" not in env and tracking.ENV_SWEEP not in env  # no sweep
    assert not [k for k in procs["rollout-0"].env if k.startswith(("WANDB", "MLFLOW", "AREAL_TR"))]


def test_the_default_is_tensorboard_alone_and_an_empty_list_is_none():
    _, _, procs = processes()
    env = procs["actor-node0"].env
    assert env[tracking.ENV_TRACKING] == "tensorboard"
    assert not [k for k in env if k.startswith(("WANDB", "MLFLOW"))]
    _, _, procs = processes("launcher.tracking=[]")
    assert procs["actor-node0"].env[tracking.ENV_TRACKING] == ""
    assert tracking.ENV_TENSORBOARD_DIR not in procs["actor-node0"].env


def test_the_users_own_wandb_mode_project_and_mlflow_store_are_kept(monkeypatch):
    monkeypatch.setenv("WANDB_PROJECT", "mine")
    _, _, procs = processes(
        "launcher.tracking=[wandb,mlflow]",
        "+launcher.env.WANDB_MODE=offline",
        "+launcher.env.MLFLOW_TRACKING_URI=http://mlflow.example:5000",
    )
    env = procs["actor-node0"].env
    assert (env["WANDB_MODE"], env["WANDB_PROJECT"]) == ("offline", "mine")
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow.example:5000"


def test_an_unknown_tracker_is_one_error_line_naming_it_and_the_choices():
    line = one_error_line(run("plan", "launcher.tracking=[tensorbord]"))
    assert line == (
        "error: launcher.tracking: 'tensorbord' is no tracker; choose from "
        "tensorboard, wandb, mlflow (a list: launcher.tracking=[wandb,mlflow], or [] "
        "for none)"
    )


def test_a_tracker_the_trainers_interpreter_lacks_is_named_with_its_extra():
    bare = str(CORE / "bin" / "python") if CORE.exists() else "/usr/bin/python3"
    spec = ProcessSpec(
        "actor-node0",
        "actor",
        "trainer",
        0,
        (bare, "-c", "pass"),
        env={tracking.ENV_TRACKING: "wandb,mlflow"},
    )
    said = problems([materialize(spec, ["127.0.0.1"], None, "cpu", "r")], [])
    assert said[0] == (
        f"actor-node0 needs 'wandb', which {bare} cannot import: "
        "pip install 'areal-launch[wandb]' (or set trainer.python to an "
        "interpreter that has it)"
    )
    assert said[1].startswith("actor-node0 needs 'mlflow'") and "areal-launch[mlflow]" in said[1]


@pytest.mark.torch  # the preflight wants torch where the trainers run
def test_a_sweeps_points_are_one_group_each_its_own_run(tmp_path):
    out = subprocess.run(
        [
            EXE,
            "-m",
            "rollout=none",
            "launcher.dry_run=true",
            "launcher.tracking=[wandb,mlflow]",
            "recipe.lr=0.01,0.02,0.03",
            f"hydra.sweep.dir={tmp_path}/sweep",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert out.returncode == 0, out.stderr
    found = [
        dict(kv.split("=", 1) for kv in line.split() if "=" in kv and kv[0].isupper())
        for line in out.stdout.splitlines()
        if "WANDB_RUN_ID=" in line
    ]
    assert len(found) == 3, out.stdout
    assert len({f["WANDB_RUN_GROUP"] for f in found}) == 1
    assert (
        found[0]["WANDB_RUN_GROUP"]
        == found[0][tracking.ENV_SWEEP]
        == tracking.sweep_id(str(tmp_path / "sweep"))
    )
    assert len({f["WANDB_RUN_ID"] for f in found}) == 3
    assert {f["MLFLOW_TRACKING_URI"] for f in found} == {f"sqlite:///{tmp_path}/sweep/mlflow.db"}
    assert [f["WANDB_NAME"] for f in found] == ["areal-run-0", "areal-run-1", "areal-run-2"]


def test_a_step_a_dead_start_wrote_past_the_record_is_written_once(tmp_path):
    """A start died after TensorBoard got step 3 and before metrics.jsonl did: the next start
    logs step 3 again, and TensorBoard's reader shows it once, with the new value."""
    env = tracking.Identity(("tensorboard",), "r1", str(tmp_path), "run", "areal").env({})
    first = Trackers(env, str(tmp_path), restart=0)
    for step in (1, 2):
        assert first.log({"reward": step / 10, "note": "text is left out"}, step)
    first.writers["tensorboard"].log({"reward": -1.0}, 3)  # and then it died
    first.close()
    again = Trackers(env, str(tmp_path), restart=1)
    assert not again.log({"reward": 9.0}, 2)  # re-done: in the record already
    assert again.log({"reward": 0.3}, 3) and again.log({"reward": 0.4}, 4)
    again.close()
    assert tensorboard_steps(tmp_path / "tensorboard") == [1, 2, 3, 4]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [round(e.value, 3) for e in acc.Scalars("reward")] == [0.1, 0.2, 0.3, 0.4]
    records = read_metrics(tmp_path)
    assert [(r["step"], r["restart"]) for r in records] == [(1, 0), (2, 0), (3, 1), (4, 1)]
    assert "note" not in records[0]
    assert json.loads((tmp_path / "tracking.json").read_text()) == {
        "tensorboard": {"logdir": str(tmp_path / "tensorboard")}
    }
    assert plot.starts(records) == [(3, 1)]  # where the picture marks restart 1


def test_the_sparkline_runs_from_the_lowest_to_the_highest_bar():
    assert plot.sparkline([0.0, 0.5, 1.0]) == "▁▅█"
    assert plot.sparkline([2.0, 2.0]) == "▁▁" and plot.sparkline([]) == ""
    assert len(plot.sparkline(list(range(100)), width=40)) == 40


def test_a_sweeps_mlflow_parent_runs_while_a_point_does_and_ends_with_the_last(tmp_path):
    """Two points of one sweep on MLflow's real SQLite store: the parent is RUNNING while
    either point is open and FINISHED once both closed; a point that starts again (a restart)
    sets it running again."""
    from tests.trackers import mlflow_runs

    def point(i: int) -> Trackers:
        folder = tmp_path / "sweep" / str(i)
        folder.mkdir(parents=True)
        env = tracking.Identity(
            ("mlflow",), f"r{i}", str(folder), f"run-{i}", "areal", sweep="s1"
        ).env({})
        return Trackers({**env, ENV_RUN_MARKER: f"r{i}"}, str(folder))

    def status() -> dict[str, str]:
        return {
            r.data.tags.get("mlflow.runName", "?"): r.info.status
            for r in mlflow_runs(tmp_path / "sweep" / "0")
        }

    first, second = point(0), point(1)
    assert first.log({"reward": 0.1}, 1) and second.log({"reward": 0.2}, 1)
    first.close()
    assert status() == {"s1": "RUNNING", "run-0": "FINISHED", "run-1": "RUNNING"}
    second.close()
    assert status() == {"s1": "FINISHED", "run-0": "FINISHED", "run-1": "FINISHED"}
    again = Trackers(first.env, str(tmp_path / "sweep" / "0"), restart=1)
    assert again.log({"reward": 0.3}, 2)
    assert status()["s1"] == "RUNNING" and status()["run-0"] == "RUNNING"
    again.close()
    assert status()["s1"] == "FINISHED"
