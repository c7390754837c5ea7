"""Components are data: a component the user declares by configuration alone (`components.<name>`,
a `worker` of plain processes) is planned, drawn, started, supervised, restarted and stopped
like the built-in ones (docs/architecture.md §12). Its combinations are checked at the plan
level; one real run on the local runner covers the rest."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.backends.context import LaunchContext
from launcher.backends.plan_processes import build_processes
from launcher.planning.build import build_plan
from launcher.spec.errors import ConfigError, PlacementError
from launcher.spec.plan import Plan
from tests.areal_launch import ROOT, one_error_line, run
from tests.plans import config

SIM = {"entry": "sim.py", "args": ["--level", "2"], "env": {"SIM_SEED": "7"}}


def planned(**dotted):
    return build_plan(config(**dotted), local_gpus=0)


def test_a_cpu_worker_is_a_component_of_kind_worker_with_one_instance_per_process():
    plan = planned(components={"sim": {**SIM, "processes": 3}}).plan.to_dict()
    sim = plan["components"]["sim"]
    assert (sim["kind"], sim["backend"], sim["world_size"], sim["gpus"]) == (
        "worker",
        "process",
        3,
        [],
    )
    assert sim["runs"] == [{"first": 0, "count": 3, "gpus": [], "node": 0}]  # one run
    assert [i.index for i in Plan.from_dict(plan).components["sim"].instances] == [0, 1, 2]
    assert plan["components"]["actor"]["kind"] == "train"
    assert plan["components"]["rollout"]["kind"] == "serve"


def test_a_worker_on_gpus_runs_processes_per_gpu_on_each_and_shares_them():
    plan = planned(
        components={"sim": {**SIM, "processes_per_gpu": 2}},
        **{"cluster.component_placement": {"sim": "0-1"}},
    ).plan
    sim = plan.components["sim"]
    assert [(i.index, i.gpus) for i in sim.instances] == [
        (0, (0,)),
        (1, (0,)),
        (2, (1,)),
        (3, (1,)),
    ]
    assert plan.mode == "disaggregated"  # the engines' mode: workers sit beside them


def test_worker_processes_get_entry_args_env_gpus_and_the_run_contract(tmp_path):
    p = planned(
        components={"sim": {**SIM, "processes_per_gpu": 2, "health_path": "/ok"}},
        **{"cluster.component_placement": {"sim": "1"}},
    )
    ports = iter(range(31000, 31100))
    ctx = LaunchContext(
        run_dir=str(tmp_path),
        plan_path=str(tmp_path / "plan.json"),
        python="PY",
        next_port=lambda: next(ports),
    )
    procs = [
        q
        for q in build_processes(p, "recipes/grpo/train.py", [], ctx).processes
        if q.component == "sim"
    ]
    assert [q.name for q in procs] == ["sim-0", "sim-1"]
    first = procs[0]
    assert (first.role, first.argv, first.gpus) == (
        "worker",
        ("PY", "sim.py", "--level", "2"),
        (1,),
    )
    assert first.env["SIM_SEED"] == "7" and first.env["AREAL_COMPONENT"] == "sim"
    assert first.env["AREAL_WORKER_INDEX"] == "0" and first.env["AREAL_WORKER_COUNT"] == "2"
    assert first.env["AREAL_LLM_SERVER_ADDRS"]  # the rollout servers, as trainers get them
    port = first.env["AREAL_WORKER_PORT"]
    assert first.health_url.endswith(f":{port}/ok") and first.ports == (int(port),)
    assert not any(
        q.component == "sim"
        for q in build_processes(p, "x.py", [], ctx).processes
        if q.role == "trainer"
    )


@pytest.mark.parametrize(
    "components, placement, needle",
    [
        ({"sim": {}}, {}, "components.sim.entry is not set"),
        (
            {"sim": {**SIM, "kind": "nope"}},
            {},
            "kind='nope': choose worker (plain processes), serve (inference servers) or train",
        ),
        ({"sim": {**SIM, "kind": "serve"}}, {}, "unknown config key 'components.sim.entry'"),
        ({"actor": SIM}, {}, "actor is a built-in engine"),
        ({"Sim": SIM}, {}, "lowercase letters"),
        ({"sim": {**SIM, "procesess": 2}}, {}, "did you mean 'components.sim.processes'"),
        ({"sim": {**SIM, "processes": 0}}, {}, "components.sim.processes=0: choose 1 to"),
        ({"sim": {**SIM, "processes": 10**12}}, {}, "choose 1 to 1048576"),
        ({"sim": {**SIM, "processes": "two"}}, {}, "could not be converted to Integer"),
        ({"sim": {**SIM, "backend": "vllm"}}, {}, "choose a worker backend (process)"),
        ({"sim": SIM}, {"sim": "0-99"}, "cluster.component_placement.sim"),
        ({"sim": SIM}, {"sim": "0", "rollout,sim": "1"}, "sim is placed twice"),
        ({"sim": {**SIM, "processes": 3}}, {"sim": "0"}, "processes=3 is for a worker without a"),
        (
            {"sim": {**SIM, "processes_per_gpu": 2}},
            {},
            "processes_per_gpu=2 is for a worker placed",
        ),
    ],
)
def test_wrong_components_are_one_clear_error(components, placement, needle):
    with pytest.raises((ConfigError, PlacementError)) as err:
        planned(
            components=components,
            **{"cluster.component_placement": placement},
            **{"cluster.gpus_per_node": 4},
        )
    assert needle in str(err.value)


def test_the_command_line_declares_a_component_and_the_map_draws_it_with_its_own_letter():
    out = run(
        "plan",
        "+components.sim.entry=sim.py",
        "+components.sim.processes_per_gpu=2",
        "+cluster.component_placement.sim=0-1",
    )
    assert out.returncode == 0, out.stderr
    lanes = [ln.split() for ln in out.stdout.splitlines() if ln.strip().startswith("sim")]
    assert lanes == [["sim", "S0-1", "S2-3", "·"]]
    assert "S sim process:d4 (4 processes on 2 GPUs)" in out.stdout
    line = one_error_line(run("plan", "+components.sim.entyr=sim.py"))
    assert "components.sim.entyr" in line and "did you mean 'components.sim.entry'" in line


# ----------------------------------------------------------------------------- a real run
WORKER = """\
import os, signal, sys, time
from pathlib import Path
out, index = Path(os.environ["SIM_OUT"]), os.environ["AREAL_WORKER_INDEX"]
with (out / f"starts-{index}").open("a") as f:
    f.write(f"{os.getpid()} {os.environ['AREAL_RESTART']} {os.environ['AREAL_COMPONENT']}\\n")
starts = len((out / f"starts-{index}").read_text().splitlines())
print(f"sim {index} start {starts}", flush=True)
if index == "0" and starts == 1:
    sys.exit(3)  # the first start of process 0 fails: launcher.max_restarts restarts it alone
def stop(*_):
    (out / f"stopped-{index}").write_text(str(os.getpid()))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    time.sleep(0.1)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.mark.torch
def test_a_declared_worker_is_started_supervised_restarted_alone_and_stopped_with_the_run(tmp_path):
    (tmp_path / "sim.py").write_text(WORKER)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    env = {"SIM_OUT": str(out_dir), "HOLD_S": "6"}
    args = [
        "rollout=none",
        f"trainer.entry={ROOT / 'tests' / 'gloo_trainer.py'}",
        "actor.backend=fsdp:d1",
        "+components.sim.entry=sim.py",
        "+components.sim.processes=2",
        "launcher.max_restarts=1",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    done = run(*args, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "restart 1 of 1: sim-0 exited with code 3 before the trainers finished"
        in done.stdout + done.stderr
    )
    first, second = [ln.split() for ln in (out_dir / "starts-0").read_text().splitlines()]
    assert (first[1:], second[1:]) == (["0", "sim"], ["1", "sim"])  # AREAL_RESTART counts
    (only,) = [ln.split() for ln in (out_dir / "starts-1").read_text().splitlines()]
    assert only[1:] == ["0", "sim"]  # the other process went on: restarted alone
    # stopped with the run: each live worker got SIGTERM and nothing is left
    assert (out_dir / "stopped-0").read_text() == second[0]
    assert (out_dir / "stopped-1").read_text() == only[0]
    assert not any(alive(int(p)) for p in (first[0], second[0], only[0]))
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert [p["name"] for p in plan["processes"] if p["role"] == "worker"] == ["sim-0", "sim-1"]
    assert plan["components"]["sim"]["kind"] == "worker"
