"""Hydra multirun sweeps (`areal-launch -m ...`) through Hydra's sweeper and our Hydra
launcher plugin (hydra/launcher=areal): every point is planned and rehearsed before any starts;
locally the points run one after another, on Slurm each is one submitted job; each point has its
own run folder <hydra.sweep.dir>/<hydra.sweep.subdir>; a summary table goes to stderr at the end.

The trainer is a tiny script run by real torchrun on gloo: each rank records when it ran.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from launcher.spec import tracking
from tests.areal_launch import EXE, ROOT
from tests.trackers import mlflow_runs, mlflow_steps, wandb_offline

TRAINER = """\
import json, os, time
rank, world = os.environ["RANK"], os.environ["WORLD_SIZE"]
run_dir = os.environ["AREAL_RUN_DIR"]
print(f"RANK={rank} WORLD_SIZE={world}", flush=True)
started = time.time()
open(os.path.join(run_dir, f"started-{rank}"), "w").close()
time.sleep(SLEEP_S)
with open(os.path.join(run_dir, f"rank-{rank}.json"), "w") as f:
    json.dump({"rank": int(rank), "world": int(world), "start": started, "end": time.time()}, f)
"""


def trainer(tmp_path: Path, sleep_s: float = 0.5) -> Path:
    path = tmp_path / "tiny_trainer.py"
    path.write_text(TRAINER.replace("SLEEP_S", repr(sleep_s)))
    return path


def sweep_args(tmp_path: Path, *overrides: str, sleep_s: float = 0.5) -> list[str]:
    return [
        EXE,
        "-m",
        "rollout=none",
        f"trainer.entry={trainer(tmp_path, sleep_s)}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        *overrides,
    ]


def run(args: list[str], tmp_path: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


def summary(stderr: str) -> tuple[str, list[list[str]]]:
    """The summary's title line and its rows (point, overrides, result, run folder)."""
    lines = stderr.splitlines()
    first = max(i for i, ln in enumerate(lines) if ln.startswith("sweep: "))
    assert lines[first + 1].split()[:2] == ["point", "overrides"], stderr
    rows = [re.split(r"\s{2,}", ln.strip()) for ln in lines[first + 2 :] if ln.strip()]
    return lines[first], rows


def ranks(run_dir: Path) -> list[dict]:
    return sorted(
        (json.loads(p.read_text()) for p in run_dir.glob("rank-*.json")), key=lambda r: r["rank"]
    )


def dry_requests(stdout: str) -> list[dict]:
    """The request JSON of each point of a Slurm dry run (after each point's script)."""
    return [
        json.loads("{" + part.split("\n{", 1)[1].split("\n}\n", 1)[0] + "\n}")
        for part in stdout.split("#!/bin/bash")[1:]
    ]


def point_dirs(sweep: Path) -> list[str]:
    """The sweep folder's point folders (Hydra's sweeper also writes multirun.yaml there)."""
    return sorted(p.name for p in sweep.iterdir() if p.is_dir()) if sweep.exists() else []


# ----------------------------------------------------------------------------- points
@pytest.mark.torch  # the preflight wants torch where the trainers run
def test_points_are_hydras_cartesian_product_in_hydras_order(tmp_path):
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    swept = ["recipe.steps=1,2", "rollout=none", "recipe.seed=3,4"]
    out = run(sweep_args(tmp_path, "launcher.dry_run=true", *swept), tmp_path)
    assert out.returncode == 0, out.stderr
    _, rows = summary(out.stderr)
    hydras = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(swept), None)[0]
    assert [r[1] for r in rows] == [f"{p[0]} {p[2]}" for p in hydras]
    assert [r[1] for r in rows] == [
        "recipe.steps=1 recipe.seed=3",
        "recipe.steps=1 recipe.seed=4",
        "recipe.steps=2 recipe.seed=3",
        "recipe.steps=2 recipe.seed=4",
    ]
    assert [r[2] for r in rows] == ["dry run"] * 4 and point_dirs(tmp_path / "sweep") == []


def test_quoted_comma_lists_are_one_value_and_values_keep_the_users_spelling(tmp_path):
    """Hydra's sweeper writes `fsdp\\:d8`; the summary (and errors) show what the user typed."""
    out = run(
        sweep_args(
            tmp_path,
            "launcher=slurm",
            "launcher.dry_run=true",
            "cluster=gpu8",
            "cluster.component_placement.actor='0-2,5,7'",
            "actor.backend=fsdp:d5,fsdp:d5t1",
        ),
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    _, rows = summary(out.stderr)
    assert [r[1] for r in rows] == ["actor.backend=fsdp:d5", "actor.backend=fsdp:d5t1"]
    assert [[p["gpus"] for p in r["processes"]] for r in dry_requests(out.stdout)] == [
        [[0, 1, 2, 5, 7]],
        [[0, 1, 2, 5, 7]],
    ]


def test_an_interval_with_the_basic_sweeper_is_a_one_line_error(tmp_path):
    out = run(sweep_args(tmp_path, "recipe.steps=interval(1,5)"), tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    line = out.stderr.strip()
    assert line.startswith("error: recipe.steps=interval(1,5): ") and "hydra/sweeper=optuna" in line


# ----------------------------------------------------------------------------- local
@pytest.mark.torch  # the preflight wants torch where the trainers run
def test_local_sweep_runs_points_one_after_another_each_in_its_own_run_folder(tmp_path):
    out = run(sweep_args(tmp_path, "actor.backend=fsdp:d1,fsdp:d2"), tmp_path)
    assert out.returncode == 0, out.stderr
    sweep = tmp_path / "sweep"
    point0, point1 = ranks(sweep / "0"), ranks(sweep / "1")
    assert [(r["rank"], r["world"]) for r in point0] == [(0, 1)]
    assert [(r["rank"], r["world"]) for r in point1] == [(0, 2), (1, 2)]
    assert max(r["end"] for r in point0) <= min(r["start"] for r in point1)  # in turn
    for i, world in ((0, 1), (1, 2)):
        assert (
            json.loads((sweep / str(i) / "plan.json").read_text())["components"]["actor"]["spec"]
            == f"fsdp:d{world}"
        )
        log = (sweep / str(i) / "logs" / "actor-node0.log").read_text()
        assert f"RANK=0 WORLD_SIZE={world}" in log
    assert point_dirs(sweep) == ["0", "1"] and (sweep / "multirun.yaml").is_file()  # Hydra's
    assert (sweep / "1" / ".hydra" / "overrides.yaml").is_file()  # Hydra's record of the point
    title, rows = summary(out.stderr)
    assert title == f"sweep: 2 points in {sweep}"
    assert rows == [
        ["0", "actor.backend=fsdp:d1", "exit 0", str(sweep / "0")],
        ["1", "actor.backend=fsdp:d2", "exit 0", str(sweep / "1")],
    ]


@pytest.mark.torch  # the preflight wants torch where the trainers run
def test_a_failing_point_does_not_stop_its_batch_and_sets_the_exit_code(tmp_path):
    failing = tmp_path / "fails_alone.py"
    failing.write_text("import os, sys\nsys.exit(3 if os.environ['WORLD_SIZE'] == '1' else 0)\n")
    out = run(
        sweep_args(tmp_path, f"trainer.entry={failing}", "actor.backend=fsdp:d1,fsdp:d2"), tmp_path
    )
    assert out.returncode == 1, out.stderr
    _, rows = summary(out.stderr)
    assert [r[:3] for r in rows] == [
        ["0", "actor.backend=fsdp:d1", "exit 1"],
        ["1", "actor.backend=fsdp:d2", "exit 0"],
    ]


@pytest.mark.torch  # the preflight wants torch where the trainers run
def test_hydra_mode_multirun_sweeps_without_dash_m(tmp_path):
    args = sweep_args(tmp_path, "launcher.dry_run=true", "actor.backend=fsdp:d1,fsdp:d2")
    args.remove("-m")
    out = run(args + ["hydra.mode=MULTIRUN"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert [r[1] for r in summary(out.stderr)[1]] == [
        "actor.backend=fsdp:d1",
        "actor.backend=fsdp:d2",
    ]


@pytest.mark.torch  # the preflight wants torch where the trainers run
@pytest.mark.parametrize(
    "bad, named",
    [
        (["actor.backend=fsdp:d1,fsdp:d0"], "sweep point 1 (actor.backend=fsdp:d0)"),
        # caught only when the point's processes are built (engine flags), not when it is planned
        (
            [
                "actor.backend=fsdp:d1,megatron:d1",
                "actor.extra_args=['--tensor-model-parallel-size=2']",
            ],
            "sweep point 1 (actor.backend=megatron:d1)",
        ),
    ],
)
@pytest.mark.parametrize("launcher", ["local", "slurm"])
def test_a_bad_point_stops_the_sweep_before_anything_starts(tmp_path, launcher, bad, named):
    """Runs without Slurm: nothing is submitted, so sbatch is never reached (the Slurm cluster
    test below checks that against a real one)."""
    out = run(sweep_args(tmp_path, f"launcher={launcher}", "cluster.device=cpu", *bad), tmp_path)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {named}: "), out.stderr
    assert lines[0].endswith("nothing was started")
    assert point_dirs(tmp_path / "sweep") == []  # point 0, which is fine, did not run either
    assert not (tmp_path / "cache").exists()  # no job recorded


@pytest.mark.torch  # the preflight wants torch where the trainers run
def test_interrupting_a_local_sweep_stops_it_and_the_rest_is_not_started(tmp_path):
    args = sweep_args(
        tmp_path, "actor.backend=fsdp:d1,fsdp:d2", "launcher.grace_period_s=2", sleep_s=120
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    launcher = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "sweep" / "0" / "started-0").exists():
            assert launcher.poll() is None and time.monotonic() < deadline, "point 0 never started"
            time.sleep(0.1)
        launcher.send_signal(signal.SIGINT)
        stderr = launcher.communicate(timeout=60)[1]
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 130, stderr
    assert not (tmp_path / "sweep" / "1").exists()
    _, rows = summary(stderr)
    assert [r[:3] for r in rows] == [
        ["0", "actor.backend=fsdp:d1", "exit 130"],
        ["1", "actor.backend=fsdp:d2", "not started"],
    ]


# ----------------------------------------------------------------------------- slurm
def test_slurm_points_get_ports_of_their_own(tmp_path):
    """Jobs of one sweep may run at once on one host: their torchrun rendezvous ports differ."""
    out = run(
        sweep_args(
            tmp_path,
            "launcher=slurm",
            "launcher.dry_run=true",
            "cluster.device=cpu",
            "actor.backend=fsdp:d1,fsdp:d2,fsdp:d4",
            "launcher.base_port=31000",
        ),
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    ports = [
        [p["argv"][p["argv"].index("--master-port") + 1] for p in r["processes"]]
        for r in dry_requests(out.stdout)
    ]
    assert ports == [["31000"], ["31001"], ["31002"]]


SLURM_FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def slurm_jobs_from(folder: Path) -> list[str]:
    """Every job Slurm knows (any state) whose script lies under `folder`."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i|%o"], capture_output=True, text=True, check=True
    )
    return [ln for ln in out.stdout.splitlines() if str(folder) in ln]


def point_logs(sweep: Path) -> str:
    """The last lines of every log under the sweep folder: why a point failed."""
    return "\n".join(
        f"== {f}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-15:])
        for f in sorted(sweep.rglob("*"))
        if f.suffix in (".log", ".out")
    )


def status_of(job: str, tmp_path: Path) -> str:
    """`areal-launch status JOB`'s first line, as the user would ask."""
    out = run([EXE, "status", job], tmp_path, timeout=60)
    return out.stdout.splitlines()[0] if out.stdout else out.stderr


@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_slurm_sweep_submits_one_job_per_point_and_all_complete(tmp_path, slurm_cluster):
    out = run(
        sweep_args(
            tmp_path,
            "launcher=slurm",
            "cluster.device=cpu",
            "cluster.num_nodes=2",
            "cluster.gpus_per_node=2",
            "actor.backend=fsdp:d1,fsdp:d2,fsdp:d4",
        ),
        tmp_path,
        timeout=120,
    )
    jobs = out.stdout.split()
    try:
        assert out.returncode == 0, out.stderr
        assert len(jobs) == 3 and all(j.isdigit() for j in jobs), out.stdout  # stdout: ids only
        sweep = tmp_path / "sweep"
        _, rows = summary(out.stderr)
        assert rows == [
            [str(i), f"actor.backend=fsdp:d{w}", f"job {j}", str(sweep / str(i))]
            for i, (w, j) in enumerate(zip((1, 2, 4), jobs))
        ]
        index = tmp_path / "cache" / "areal-launch" / "jobs"
        assert {p.name: p.read_text().strip() for p in index.iterdir()} == {
            j: str(sweep / str(i)) for i, j in enumerate(jobs)
        }
        deadline = time.monotonic() + 480
        states = {}
        while time.monotonic() < deadline:
            states = {j: status_of(j, tmp_path) for j in jobs}
            if all(s.split(": ")[-1] in SLURM_FINISHED for s in states.values()):
                break
            time.sleep(1)
        assert list(states.values()) == [f"job {j}: COMPLETED" for j in jobs], (
            states,
            point_logs(tmp_path / "sweep"),
        )
        for i, world in enumerate((1, 2, 4)):
            assert [(r["rank"], r["world"]) for r in ranks(sweep / str(i))] == [
                (k, world) for k in range(world)
            ]
            assert (sweep / str(i) / "plan.json").exists()
            assert (
                "areal-launch: job finished: ok"
                in (sweep / str(i) / f"slurm-{jobs[i]}.out").read_text()
            )
    finally:
        subprocess.run(["scancel", *[j for j in jobs if j.isdigit()]], capture_output=True)


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_slurm_sweep_with_a_bad_point_submits_nothing(tmp_path, slurm_cluster):
    out = run(
        sweep_args(
            tmp_path,
            "launcher=slurm",
            "cluster.device=cpu",
            "cluster.num_nodes=2",
            "cluster.gpus_per_node=2",
            "actor.backend=fsdp:d1,fsdp:d2,fsdp:d0",
        ),
        tmp_path,
        timeout=120,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("error: sweep point 2 (actor.backend=fsdp:d0): "), out.stderr
    assert slurm_jobs_from(tmp_path) == []
    assert not (tmp_path / "cache" / "areal-launch" / "jobs").exists()
    assert point_dirs(tmp_path / "sweep") == []


# ----------------------------------------------------------------------------- hydra/launcher
def test_areal_slurm_runs_every_point_on_the_slurm_runner(tmp_path):
    """hydra/launcher=areal_slurm: the points run with launcher=slurm without writing it."""
    out = run(
        sweep_args(
            tmp_path,
            "hydra/launcher=areal_slurm",
            "launcher.dry_run=true",
            "cluster.device=cpu",
            "actor.backend=fsdp:d1,fsdp:d2",
        ),
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("#!/bin/bash") == 2 and len(dry_requests(out.stdout)) == 2
    line = one_line(
        run(
            sweep_args(
                tmp_path,
                "hydra/launcher=areal_slurm",
                "launcher=local",
                "actor.backend=fsdp:d1,fsdp:d2",
            ),
            tmp_path,
        )
    )
    assert "hydra/launcher=areal_slurm runs points with launcher=slurm" in line
    assert point_dirs(tmp_path / "sweep") == []


@pytest.mark.torch  # the preflight wants torch where the trainers run
def test_hydras_own_launcher_runs_the_points_too(tmp_path):
    """hydra/launcher=basic calls our task function in the folder Hydra made for each point
    (no rehearsal of the batch first); the run folders and the table are the same."""
    out = run(
        sweep_args(tmp_path, "hydra/launcher=basic", "actor.backend=fsdp:d1,fsdp:d2"), tmp_path
    )
    assert out.returncode == 0, out.stderr
    sweep = tmp_path / "sweep"
    assert [(r["rank"], r["world"]) for r in ranks(sweep / "1")] == [(0, 2), (1, 2)]
    assert point_dirs(sweep) == ["0", "1"]  # Hydra's folders are the run folders, not -1
    _, rows = summary(out.stderr)
    assert [r[:3] for r in rows] == [
        ["0", "actor.backend=fsdp:d1", "exit 0"],
        ["1", "actor.backend=fsdp:d2", "exit 0"],
    ]


def one_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), out.stderr
    return lines[0]


# ----------------------------------------------------------------------------- optuna
@pytest.mark.torch
@pytest.mark.timeout(900)
def test_optuna_sweep_runs_real_trials_and_ends_with_the_best_one(tmp_path, tiny_model):
    """hydra/sweeper=optuna samples recipe.lr; each trial is a real run of the default recipe
    (2 FSDP2 ranks, 2 GRPO steps; rollout=none, rank 0 samples from the trainer's own weights,
    to spare three vLLM start-ups) whose objective, its last step's mean reward, goes back to
    Optuna; the table names the best trial and its run folder, as Optuna's own result does.
    Every tracker on: the sweep is one W&B group and one MLflow parent of its three trials,
    and one picture of all of them."""
    sweep = tmp_path / "sweep"
    out = run(
        [
            EXE,
            "-m",
            "hydra/sweeper=optuna",
            "hydra.sweeper.n_trials=3",
            "hydra.sweeper.direction=maximize",
            "hydra.sweeper.sampler.seed=1",
            "recipe.lr=interval(0.005,0.05)",
            "recipe.steps=2",
            "rollout=none",
            f"model_path={tiny_model}",
            "launcher.tracking=[tensorboard,wandb,mlflow]",
            "+launcher.env.WANDB_MODE=offline",
            f"hydra.sweep.dir={sweep}",
        ],
        tmp_path,
        timeout=1100,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    # the sweep is one W&B group and one MLflow parent run with a child per trial
    group = tracking.sweep_id(str(sweep))
    starts = [s for i in range(3) for s in wandb_offline(sweep / str(i))]
    assert [(s.group, s.steps) for s in starts] == [(group, [1, 2])] * 3
    assert len({s.run_id for s in starts}) == 3
    runs = mlflow_runs(sweep / "0")  # the store beside the points: <sweep folder>/mlflow.db
    [parent] = [r for r in runs if r.data.tags.get("areal_launch.sweep") == group]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == 4 and len(children) == 3
    assert {r.info.status for r in (parent, *children)} == {"FINISHED"}  # the sweep ended
    assert all(mlflow_steps(sweep / "0", c.info.run_id) == [1, 2] for c in children)
    assert f"sweep picture: {sweep / 'sweep.png'}" in out.stderr
    assert (sweep / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert point_dirs(sweep) == ["0", "1", "2"]
    objectives = []
    for i in range(3):
        metrics = json.loads((sweep / str(i) / "metrics.json").read_text())
        assert len(metrics["reward"]) == 2 and metrics["objective"] == metrics["reward"][-1]
        assert "grpo done: steps 2" in (sweep / str(i) / "logs" / "actor-node0.log").read_text()
        objectives.append(metrics["objective"])
    _, rows = summary(out.stderr.rsplit("\nbest: ", 1)[0])
    assert [r[0] for r in rows] == ["0", "1", "2"] and all(r[2] == "exit 0" for r in rows)
    assert all(0.005 <= float(r[1].partition("recipe.lr=")[2]) <= 0.05 for r in rows), rows
    best_value = max(objectives)
    best = objectives.index(best_value)
    assert out.stderr.rstrip().splitlines()[-1] == (
        f"best: point {best} ({rows[best][1]}) objective {best_value:.6g}, run folder "
        f"{sweep / str(best)}"
    )
    optuna_says = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert optuna_says["best_value"] == pytest.approx(best_value)
