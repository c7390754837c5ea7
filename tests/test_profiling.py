"""cluster.profiling (issue 31 item 4): `backend: nsight` runs the named components' processes
under `nsys profile` with RLinf's rendering of options and flags (argv-level: nsys is not on
these machines), `backend: torch` has the default recipe record torch.profiler's chrome trace
of the named steps (the recipe's part on CPU here; a real run in tests/test_recipe_e2e.py),
every mistake is one line, and RLinf's section reads as ours."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from launcher.cli.launch import counted_request, prepare
from launcher.spec.errors import ConfigError
from launcher.spec.profiling import Profiling, unwrapped
from tests.areal_launch import one_error_line, prepared_in, run

CPU = ["cluster.device=cpu"]


def request_of(*overrides: str):
    """(plan, request) as `plan` shows them: nothing starts, nothing is reserved."""
    return counted_request(prepare([*CPU, *overrides], to_run=False))


def argv_of(plan, component: str) -> list[tuple[str, ...]]:
    return [p.argv for p in plan.processes if p.component.split(",")[0] == component]


# ----------------------------------------------------------------------------- nsight
def test_nsight_runs_only_the_named_components_processes_under_nsys_with_rlinfs_rendering():
    plain, _ = request_of()
    plan, request = request_of(
        "cluster.profiling.backend=nsight",
        "cluster.profiling.components=[rollout]",
        "cluster.profiling.options.t='cuda,nvtx'",
        "cluster.profiling.options.sample=none",
        "cluster.profiling.options.cudabacktrace=true",
        "cluster.profiling.flags=[python-backtrace]",
    )
    out = str(request.run_dir) + "/profiles"
    (server,) = argv_of(plan, "rollout")
    head = ["nsys", "profile", "--python-backtrace", "-t", "cuda,nvtx", "--sample=none"]
    head += ["--cudabacktrace=true", f"--output={out}/rollout-0-%p"]
    assert list(server[: len(head)]) == head
    (before,) = argv_of(plain, "rollout")
    assert unwrapped(server) == before  # then the process as it was
    assert argv_of(plan, "actor")[0][0] != "nsys"  # not named: as it was
    assert Profiling.of_plan(plan.meta).components == ("rollout",)
    assert out in request.folders.make  # nsys does not make its folder


def test_nsight_steps_gate_the_trainers_capture_on_the_cuda_profiler_api(tmp_path):
    plan, _ = request_of(
        "cluster.profiling.backend=nsight",
        "cluster.profiling.steps=[2]",
        f"cluster.profiling.output_dir={tmp_path}",
    )
    (trainer,) = argv_of(plan, "actor")  # no component named: every trainer
    assert "--capture-range=cudaProfilerApi" in trainer
    assert "--capture-range-end=stop" in trainer
    assert f"--output={tmp_path}/actor-node0-%p" in trainer
    assert argv_of(plan, "rollout")[0][0] != "nsys"
    several, _ = request_of("cluster.profiling.backend=nsight", "cluster.profiling.steps=[2,4]")
    assert "--capture-range-end=repeat" in argv_of(several, "actor")[0]  # a report per step
    served, _ = request_of(
        "cluster.profiling.backend=nsight",
        "cluster.profiling.steps=[2]",
        "cluster.profiling.components=[actor,rollout]",
    )
    assert "--capture-range=cudaProfilerApi" not in argv_of(served, "rollout")[0]
    assert any("rollout run under nsys from start to end" in w for w in served.warnings)


def test_unwrapped_gives_the_process_its_own_argv_back():
    record = Profiling("nsight", ("actor",), "/p", (3,), {"t": "-o", "delay": "5"}, ("x",))
    argv = ("/venv/bin/python", "-m", "torch.distributed.run", "train.py")
    wrapped = record.nsys_argv("actor-node0", argv, trainer=True)
    assert wrapped[:2] == ("nsys", "profile") and unwrapped(wrapped) == argv
    assert unwrapped(argv) == argv


def test_a_dry_run_shows_the_wrapped_argv_and_a_node_without_nsys_is_one_line(tmp_path):
    over = ["cluster.device=cpu", "cluster.profiling.backend=nsight", "launcher.dry_run=true"]
    missing = run(*over, f"hydra.run.dir={tmp_path / 'a'}")
    line = one_error_line(missing)
    assert "nsys is not on PATH here" in line and "actor-node0" in line, line
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nsys").write_text("#!/bin/sh\nexit 0\n")
    (fake / "nsys").chmod(0o755)
    shown = run(
        *over, f"hydra.run.dir={tmp_path / 'b'}", env={"PATH": f"{fake}:{os.environ['PATH']}"}
    )
    assert shown.returncode == 0, shown.stderr
    trainer = next(ln for ln in shown.stdout.splitlines() if "torch.distributed.run" in ln)
    assert (
        trainer.strip().startswith("nsys profile --output=")
        and "/profiles/actor-node0-%p " in trainer
    )


# ----------------------------------------------------------------------------- checks
@pytest.mark.parametrize(
    "overrides, message",
    [
        (["cluster.profiling.backend=perf"], "cluster.profiling.backend=perf: not a profiler"),
        (["cluster.profiling.components=[acter]"], "'acter' is no component of this run"),
        (
            ["cluster.profiling.components=[rollout]"],
            "rollout is a serve component; backend torch records the default recipe's trainer",
        ),
        (["cluster.profiling.steps=[0]"], "0 is no step number; steps count from 1"),
        (["cluster.profiling.steps=[100000000000]"], "100000000000 is no step number"),
        (["cluster.profiling.steps=[9]", "recipe.steps=5"], "step 9 is past recipe.steps=5"),
        (["cluster.profiling.options.t=cuda"], "nsys's options, for backend nsight"),
        (
            ["cluster.profiling.backend=nsight", "cluster.profiling.options.o=x"],
            "the launcher names each process's report",
        ),
        (
            [
                "cluster.profiling.backend=nsight",
                "cluster.profiling.flags=[t]",
                "+cluster.profiling.options.t=cuda",
            ],
            "t is an option too",
        ),
        (
            ["cluster.profiling.enabled=true", "trainer.entry=tests/gloo_trainer.py"],
            "gloo_trainer.py is not one of this project's recipes: use backend nsight",
        ),
    ],
)
def test_a_profiling_mistake_is_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match="cluster.profiling") as err:
        request_of(*overrides)
    assert message in str(err.value)


def test_a_bad_backend_on_the_command_line_is_one_error_line():
    line = one_error_line(run("plan", "cluster.device=cpu", "cluster.profiling.backend=perf"))
    assert "cluster.profiling.backend=perf" in line


def test_profiling_is_off_unless_asked_and_a_known_component_that_is_off_is_a_warning():
    plan, _ = request_of()
    assert "profiling" not in plan.meta
    off, _ = request_of("cluster.profiling.enabled=false", "cluster.profiling.backend=perf")
    assert "profiling" not in off.meta  # off: nothing of it is read
    plan, _ = request_of("cluster.profiling.components=[actor,critic]")
    record = Profiling.of_plan(plan.meta)
    assert record.backend == "torch" and record.components == ("actor",) and record.steps == ()
    assert any("critic is off in this run" in w for w in plan.warnings)


# ----------------------------------------------------------------------------- RLinf's section
RLINF = {
    "cluster": {"num_nodes": 1, "component_placement": {"actor,env,rollout": "all"}},
    "env": {"group_name": "EnvGroup", "simulator_type": "maniskill"},
    "rollout": {"group_name": "RolloutGroup", "model": {"precision": "bf16"}},
    "actor": {"group_name": "ActorGroup", "training_backend": "fsdp"},
}
EMBODIED = "embodiment/train_embodied_agent.py"


def rlinf_prep(tmp_path: Path, profiling: dict):
    script = tmp_path / EMBODIED
    script.parent.mkdir(parents=True, exist_ok=True)
    script.touch()
    cfg = {**RLINF, "cluster": {**RLINF["cluster"], "profiling": profiling}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    over = [f"trainer.entry={script}", "cluster.device=cuda", "cluster.gpus_per_node=4"]
    prep = prepared_in(tmp_path, "cfg", over)
    return prep, counted_request(prep)[0]


def test_rlinfs_profiling_is_ours_worker_groups_as_components_steps_from_one(tmp_path):
    prep, plan = rlinf_prep(
        tmp_path,
        {
            "backend": "nsight",
            "worker_groups": ["ActorGroup", "RolloutGroup", "Actor"],
            "steps": [3],
            "options": {"t": "cuda", "stop-on-range-end": True},
            "flags": "python-backtrace",
        },
    )
    record = Profiling.of_plan(plan.meta)
    assert record.components == ("actor", "rollout") and record.steps == (4,)
    assert record.options == {"t": "cuda", "capture-range-end": "stop"}
    assert record.flags == ("python-backtrace",)
    notes = " | ".join(prep.planned.notes)
    assert "no worker group Actor in this config" in notes and "steps [4] here" in notes
    wrapped = [p.name for p in plan.processes if p.argv[0] == "nsys"]
    assert wrapped and all(n.startswith(("actor", "rollout")) for n in wrapped), wrapped
    assert not any(p.argv[0] == "nsys" for p in plan.processes if p.component == "env")


def test_rlinfs_profiling_without_worker_groups_profiles_nothing_and_all_is_every_group(tmp_path):
    prep, plan = rlinf_prep(tmp_path / "none", {"backend": "nsight"})
    assert "profiling" not in plan.meta
    assert any("RLinf profiles no worker group" in n for n in prep.planned.notes)
    prep, plan = rlinf_prep(tmp_path / "unset", {})  # no section: nothing said of it
    assert "profiling" not in plan.meta
    assert not any("profil" in n for n in prep.planned.notes), prep.planned.notes
    _, plan = rlinf_prep(tmp_path / "all", {"backend": "nsight", "worker_groups": "all"})
    assert Profiling.of_plan(plan.meta).components == ("actor", "env", "rollout")
    with pytest.raises(ConfigError, match="backend=rocprof_sys: RLinf's AMD profiler"):
        rlinf_prep(tmp_path / "amd", {"backend": "rocprof_sys", "worker_groups": "all"})


# ----------------------------------------------------------------------------- the recipe's part
@pytest.mark.torch
def test_the_recipes_step_profiler_writes_a_chrome_trace_of_the_named_step_only(tmp_path):
    import torch
    from torch.profiler._trace_validator import validate_trace

    from launcher.trainer.runtime import plan_from_dict
    from recipes.grpo.profiling import StepProfiler

    record = Profiling("torch", ("actor",), str(tmp_path / "profiles"), (2,))
    rt = plan_from_dict({**record.as_meta()}, env={"AREAL_COMPONENT": "actor,ref"})
    profiler = StepProfiler.from_plan(rt, "actor", 1, torch.device("cpu"), print)
    for step in (1, 2):
        recording = profiler.start(step)
        torch.ones(64, 64) @ torch.ones(64, 64)
        profiler.stop(step, recording)
    traces = sorted(p.name for p in (tmp_path / "profiles").iterdir())
    assert traces == ["actor-rank1-step2.json"]
    trace = tmp_path / "profiles" / traces[0]
    assert json.loads(trace.read_text())["traceEvents"]
    ok, violations = validate_trace(str(trace))
    assert ok, violations
    other = plan_from_dict(record.as_meta(), env={"AREAL_COMPONENT": "critic"})
    assert StepProfiler.from_plan(other, "critic", 0, torch.device("cpu"), print).start(2) is None
