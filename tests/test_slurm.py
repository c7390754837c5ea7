"""The Slurm runner against a real Slurm cluster (scripts/slurm/start-slurm.sh: node1, node2,
8 fake GPUs each, all on this machine). The processes are plain shell/python commands built by
hand, so these tests check the runner (one task per node, each running that node's supervisor),
not the engines; the end-to-end run is the last test.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Optional

import pytest

from launcher.node.runs import find_run, read_record
from launcher.runners import slurm
from launcher.spec.errors import LaunchError
from launcher.spec.process import ProcessSpec, host_placeholder
from launcher.spec.runfolder import JOB_SCRIPT
from tests.hand_requests import request_for, write_plan
from tests.node_groups import group_overrides, node_reports
from tests.stand_in_areal import assert_ran_under, seen_by

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(180)]
ROOT = Path(__file__).resolve().parent.parent
FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


SUBMITTED: list[str] = []


@pytest.fixture(autouse=True)
def job_index(tmp_path, monkeypatch, slurm_cluster):
    """Keep the job id -> run folder index out of the real ~/.cache; cancel what a failed test
    left running (a leftover job holding GPUs would block the next)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    yield
    if SUBMITTED:
        subprocess.run(["scancel", *SUBMITTED], capture_output=True)
        SUBMITTED.clear()


def step(
    name: str, role: str, node: int, gpus: tuple[int, ...], script: str, env: Optional[dict] = None
) -> ProcessSpec:
    """A process running `script` on node `node` with the plan's node-local GPUs `gpus`."""
    return ProcessSpec(
        name=name,
        component="rollout" if role == "server" else "actor",
        role=role,
        node=node,
        argv=("bash", "-c", script),
        env=dict(env or {}),
        gpus=gpus,
    )


def submit(
    run_dir: Path,
    procs: list[ProcessSpec],
    job_name: str = "areal-test",
    gpus_per_node: int = 8,
    **opts,
) -> str:
    """As the launcher does: request.json and plan.json in the run folder, then sbatch."""
    request = request_for(run_dir, procs, gpus_per_node=gpus_per_node, job_name=job_name)
    runner = slurm.Runner(slurm.Config(grace_period_s=3, **opts))
    runner.check(request)
    write_plan(request)
    runner.run(request)
    job_id = read_record(run_dir).job_id
    assert job_id is not None
    SUBMITTED.append(job_id)
    return job_id


def status(job_id: str, run_dir: Path) -> tuple[str, int]:
    return slurm.job_status(job_id, run_dir)


def logs(run_dir: Path, follow: bool = False, engine: Optional[str] = None) -> list[str]:
    runner = slurm.Runner(slurm.Config())
    return list(runner.logs(read_record(run_dir), follow, engine))


def wait_state(job_id: str, states=FINISHED, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = slurm.job_state(job_id)
        if state in states:
            return state
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} still {slurm.job_state(job_id)} after {timeout} s")


def wait_for(predicate, timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def processes_with(marker: str) -> list[int]:
    """PIDs of the test's own processes: they run as `exec -a MARKER sleep ...`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if (entry / "cmdline").read_bytes().split(b"\0")[0] == marker.encode():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def steps_left(job_id: str) -> str:
    return subprocess.run(
        ["squeue", "-h", "-s", "-j", job_id], capture_output=True, text=True
    ).stdout.strip()


def env_line(path: Path) -> dict:
    """The KEY=VALUE words a process printed on its first line."""
    first = path.read_text().splitlines()[0]
    return dict(word.split("=", 1) for word in first.split())


REPORT = (
    "echo NODE=$SLURMD_NODENAME CVD=$CUDA_VISIBLE_DEVICES TASK_GPUS=$SLURM_STEP_GPUS"
    " SESSION=$(ps -o sid= $$ | tr -d ' ')"
)


# ----------------------------------------------------------------------------- (a)
def test_processes_run_on_their_nodes_on_their_gpus_of_the_task_and_the_job_completes(tmp_path):
    marker = f"areal-srv-{uuid.uuid4().hex[:8]}"
    serve = f"{REPORT}; exec -a {marker} sleep 300"
    addrs = f"{host_placeholder(0)}:30000,{host_placeholder(0)}:30001"
    procs = [
        step("rollout-0", "server", 0, (0, 1), serve),
        step("rollout-1", "server", 0, (2, 3, 4), serve),
        step(
            "actor-0",
            "trainer",
            1,
            (0, 1, 2, 3),
            f"{REPORT} ADDRS=$AREAL_LLM_SERVER_ADDRS; sleep 2",
            env={"AREAL_LLM_SERVER_ADDRS": addrs},
        ),
    ]
    job = submit(tmp_path, procs)
    assert wait_state(job) == "COMPLETED"
    script = (tmp_path / JOB_SCRIPT).read_text()
    assert "#SBATCH --gpus-per-node=5" in script and "--exclusive" not in script
    logs_dir = tmp_path / "logs"
    r0, r1, actor = (env_line(logs_dir / f"{n}.log") for n in ("rollout-0", "rollout-1", "actor-0"))
    assert (r0["NODE"], r1["NODE"], actor["NODE"]) == ("node1", "node1", "node2")
    task = r0["TASK_GPUS"].split(",")
    assert r1["TASK_GPUS"] == r0["TASK_GPUS"] and len(task) == 5
    assert r0["CVD"].split(",") == task[0:2] and r1["CVD"].split(",") == task[2:5]
    assert actor["CVD"].split(",") == actor["TASK_GPUS"].split(",")[0:4]
    assert actor["ADDRS"] == "node1:30000,node1:30001"
    assert processes_with(marker) == []  # the servers were stopped when the trainer finished
    out = (tmp_path / f"slurm-{job}.out").read_text()
    assert "the trainers finished on their nodes" in out and "job finished: ok" in out


def test_processes_sharing_gpus_get_theirs_from_what_slurm_gave_the_node(tmp_path):
    """Collocated/hybrid placement: two processes on overlapping GPUs of one node. Another
    job holds GPUs 0-3 of every node, so this job's GPUs are 4-7 and the plan's GPU position i
    must become the i-th GPU Slurm gave the node, not physical GPU i."""
    blocker = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--nodes=2",
            "--gpus-per-node=4",
            "--output=/dev/null",
            "--wrap",
            "sleep 120",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    SUBMITTED.append(blocker)
    wait_state(blocker, ("RUNNING",))
    marker = f"areal-col-{uuid.uuid4().hex[:8]}"
    procs = [
        step("rollout-0", "server", 0, (0, 1), f"{REPORT}; exec -a {marker} sleep 300"),
        step("actor-0", "trainer", 0, (1, 2, 3), f"{REPORT}; sleep 1"),
    ]
    job = submit(tmp_path, procs, gpus_per_node=8, cpus_per_gpu=1)
    assert wait_state(job, timeout=30) == "COMPLETED"
    server, trainer = (env_line(tmp_path / "logs" / f"{n}.log") for n in ("rollout-0", "actor-0"))
    assert server["TASK_GPUS"] == trainer["TASK_GPUS"] == "4,5,6,7"
    assert (server["CVD"], trainer["CVD"]) == ("4,5", "5,6,7")
    assert server["SESSION"] != trainer["SESSION"]  # each in a session of its own
    assert processes_with(marker) == []


# ----------------------------------------------------------------------------- (b)
@pytest.mark.parametrize("failing", ["trainer", "server"])
def test_a_failing_process_fails_the_job_names_the_root_cause_and_leaves_nothing(tmp_path, failing):
    marker = f"areal-fail-{uuid.uuid4().hex[:8]}"
    forever = f"exec -a {marker} sleep 300"
    fail = "sleep 1; echo about to fail; exit 3"
    procs = [
        step("rollout-0", "server", 0, (0,), fail if failing == "server" else forever),
        step("actor-0", "trainer", 1, (0,), fail if failing == "trainer" else forever),
        step("actor-1", "trainer", 1, (1,), forever),
    ]
    job = submit(tmp_path, procs)
    wait_for(lambda: processes_with(marker), what="the processes to start")
    assert wait_state(job) == "FAILED"  # how soon: benchmarks/bench_scale.py, bench_launch.py
    wait_for(
        lambda: steps_left(job) == "" and processes_with(marker) == [],
        timeout=15,
        what="nothing of the job left",
    )
    name = "rollout-0" if failing == "server" else "actor-0"
    out = (tmp_path / f"slurm-{job}.out").read_text()
    assert f"root cause: {name} exited with code 3" in out
    assert "about to fail" in out  # the tail of the failed process's log, next to the verdict
    text, code = status(job, tmp_path)
    assert code == 0 and text.startswith(f"job {job}: FAILED")
    assert "the job's last word: areal-launch: job failed" in text
    assert slurm.cancel(job) == f"job {job}: already FAILED; nothing to cancel"


# ----------------------------------------------------------------------------- (c)
def test_status_logs_and_cancel_work_on_a_running_job(tmp_path):
    marker = f"areal-run-{uuid.uuid4().hex[:8]}"
    procs = [
        step("rollout-0", "server", 0, (0,), f"echo serving; exec -a {marker} sleep 300"),
        step("actor-0", "trainer", 1, (0, 1), f"echo training; exec -a {marker} sleep 300"),
    ]
    job = submit(tmp_path, procs)
    wait_state(job, ("RUNNING",))
    wait_for(lambda: len(processes_with(marker)) == 2, what="both steps")

    text, code = status(job, tmp_path)
    assert code == 0 and text.startswith(f"job {job}: RUNNING")
    assert "RUNNING on node[1-2]" in text
    assert str(tmp_path) in text

    lines = logs(tmp_path)
    assert "rollout-0 | serving" in lines and "actor-0   | training" in lines
    assert logs(tmp_path, engine="rollout") == ["rollout-0 | serving"]
    with pytest.raises(LaunchError, match="no process serves engine 'critic'"):
        logs(tmp_path, engine="critic")

    assert "cancel requested" in slurm.cancel(job)
    assert wait_state(job) == "CANCELLED"
    wait_for(lambda: not processes_with(marker), what="the processes to be gone")
    assert status(job, tmp_path)[0].startswith(f"job {job}: CANCELLED")


def test_logs_follow_streams_until_the_job_ends(tmp_path):
    procs = [
        step("actor-0", "trainer", 0, (0,), "for i in 1 2 3; do echo line $i; sleep 0.5; done")
    ]
    job = submit(tmp_path, procs)
    lines = logs(tmp_path, follow=True, engine="actor")
    assert lines == ["actor-0 | line 1", "actor-0 | line 2", "actor-0 | line 3"]
    assert slurm.job_state(job) == "COMPLETED"


def test_setup_commands_run_before_each_nodes_supervisor(tmp_path):
    procs = [step("actor-0", "trainer", 0, (0,), "echo SETUP=$AREAL_SETUP_RAN")]
    job = submit(tmp_path, procs, setup=["export AREAL_SETUP_RAN=yes", "cd /"])
    assert wait_state(job) == "COMPLETED"
    assert (tmp_path / "logs" / "actor-0.log").read_text().strip() == "SETUP=yes"


# ----------------------------------------------------------------------------- (d)
def test_injected_values_are_data_not_commands(tmp_path):
    """Quotes, spaces, $(...), backticks, semicolons and newlines in every value that reaches
    the script or the request arrive as text; none of them runs anything."""
    pwned = tmp_path / "pwned"
    cmd = f"touch {pwned}"
    one_line = f"""x'; {cmd}; echo ' "$({cmd})" `{cmd}` $({cmd}) \\$HOME #"""
    payload = one_line + f"\n{cmd}\n"
    run_dir = tmp_path / f"run $({cmd}) `{cmd}` 'q"
    show = (
        "import json, os, sys; "
        "print(json.dumps({'argv': sys.argv[1:], 'env': os.environ['PAYLOAD']}))"
    )
    procs = [
        ProcessSpec(
            name="actor-0",
            component="actor",
            role="trainer",
            node=0,
            argv=(sys.executable, "-c", show, payload, one_line),
            env={"PAYLOAD": payload},
            gpus=(0,),
        )
    ]
    job = submit(
        run_dir,
        procs,
        job_name=one_line,
        sbatch_extra=[f"--comment={one_line}"],
        srun_extra=[f"--comment={one_line}"],
    )
    assert wait_state(job) == "COMPLETED"
    seen = json.loads((run_dir / "logs" / "actor-0.log").read_text())
    assert seen == {"argv": [payload, one_line], "env": payload}
    name_and_comment = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", job, "-o", "%j\n%k"], capture_output=True, text=True
    ).stdout
    assert name_and_comment == f"{one_line}\n{one_line}\n"
    assert not pwned.exists()


def test_a_newline_in_an_sbatch_value_is_refused_before_submitting(tmp_path):
    with pytest.raises(LaunchError, match="line breaks"):
        submit(tmp_path, [step("actor-0", "trainer", 0, (0,), "true")], job_name="a\ntouch /tmp/x")
    assert not (tmp_path / JOB_SCRIPT).exists()


def test_a_plan_the_cluster_cannot_fit_is_refused_before_submitting(tmp_path):
    with pytest.raises(LaunchError, match="uses 9 GPUs on a node but nodes have"):
        submit(tmp_path, [step("actor-0", "trainer", 0, tuple(range(9)), "true")])


def test_a_cpu_only_node_group_is_a_component_of_one_job_that_gets_no_gpu(tmp_path):
    """GPU nodes with their GPUs (real GRES), the CPU-only node3 (partition cpu) with none: one
    heterogeneous job, plan node k the k-th node, the worker on node3 shown no GPU."""
    if not cpu_partition():
        pytest.skip(
            "the running Slurm test cluster has no CPU-only node (partition cpu): "
            "restart it with scripts/slurm/start-slurm.sh"
        )
    from launcher.spec.cluster import NodeGroup

    marker = f"areal-srv-{uuid.uuid4().hex[:8]}"
    procs = [
        step("rollout-0", "server", 0, (0, 1), f"{REPORT}; exec -a {marker} sleep 300"),
        step("actor-0", "trainer", 1, (0, 1, 2), f"{REPORT}; sleep 2"),
        dataclasses.replace(
            step("reward-0", "worker", 2, (), f"{REPORT}; sleep 300"), component="reward"
        ),
    ]
    request = request_for(
        tmp_path,
        procs,
        num_nodes=3,
        node_groups=(NodeGroup("gpu", (0, 1)), NodeGroup("cpu", (2,), gpus=False)),
        cpu_nodes=1,
    )
    runner = slurm.Runner(slurm.Config(grace_period_s=3, group_sbatch={"cpu": ["--partition=cpu"]}))
    assert not any("node group" in w for w in runner.check(request))
    write_plan(request)
    runner.run(request)
    job = read_record(tmp_path).job_id
    assert job is not None
    SUBMITTED.append(job)
    assert wait_state(job) == "COMPLETED", "\n".join(logs(tmp_path))
    r0, actor, reward = (
        env_line(tmp_path / "logs" / f"{n}.log") for n in ("rollout-0", "actor-0", "reward-0")
    )
    assert (r0["NODE"], actor["NODE"], reward["NODE"]) == ("node1", "node2", "node3")
    assert len(actor["TASK_GPUS"].split(",")) == 3 and actor["CVD"] == actor["TASK_GPUS"]
    assert reward["CVD"] == "" and reward.get("TASK_GPUS", "") == ""
    assert processes_with(marker) == []


# ----------------------------------------------------------------------------- device auto
def partition_gres(node: str) -> tuple[int, Optional[str]]:
    """A node's GPUs and their type, as `scontrol show node` says (gpu:h100:8(S:0), gpu:8)."""
    text = subprocess.run(
        ["scontrol", "show", "node", node], capture_output=True, text=True, check=True
    ).stdout
    words = re.search(r"\bGres=gpu:(\S+?)(?:\(|\s)", text + " ").group(1).split(":")
    return int(words[-1]), (words[0] if len(words) == 2 else None)


def test_a_dry_run_from_a_node_without_gpus_asks_for_the_partitions_gpus(tmp_path):
    """The login node (this machine: no GPU visible, no nvidia-smi) plans for the default
    partition's nodes as Slurm describes them: cuda, their GPU count, their gres type for the
    memory table; more nodes than the partition has is one error line."""
    from tests.areal_launch import one_error_line, run

    gpus, kind = partition_gres("node1")
    args = ("launcher=slurm", "cluster.num_nodes=2", f"hydra.run.dir={tmp_path}/run")
    out = run(*args, "launcher.dry_run=true")
    assert out.returncode == 0, out.stderr
    assert (
        f"#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node={gpus}\n"
        in out.stdout
        and "--gres=none" not in out.stdout
    )
    request = json.loads(out.stdout.split("(secrets masked):\n", 1)[1])
    assert (request["device"], request["gpus_per_node"]) == ("cuda", gpus)
    assert (
        f"note: cluster.device=auto: Slurm partition debug has 2 node(s) with {gpus} GPU(s)"
        in out.stderr
    )
    plan = run("plan", "--json", *args)
    assert plan.returncode == 0, plan.stderr
    memory = json.loads(plan.stdout)["memory"]
    assert memory["capacity_source"] == (f"table: {kind}" if kind else "unknown"), memory
    line = one_error_line(run(*args, "cluster.num_nodes=3", "launcher.dry_run=true"))
    assert f"the plan needs 3 node(s) but Slurm partition debug has 2 with {gpus} GPU(s)" in line
    if cpu_partition():
        cpu = run(*args, "launcher.dry_run=true", "launcher.partition=cpu", "cluster.num_nodes=1")
        assert cpu.returncode == 0, cpu.stderr
        assert "--gres=none" in cpu.stdout and "--gpus-per-node" not in cpu.stdout


def test_a_slurm_that_does_not_answer_is_one_line_within_the_sinfo_timeout(tmp_path):
    """A real sinfo against a controller that is not there: it would wait ~9 s, the plan
    stops at SINFO_TIMEOUT_S with one line."""
    from launcher.runners.slurmnodes import SINFO_TIMEOUT_S
    from tests.areal_launch import one_error_line, run

    conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")).read_text()
    bad = tmp_path / "slurm.conf"
    bad.write_text(re.sub(r"(?m)^SlurmctldPort=.*$", "SlurmctldPort=1", conf))
    begun = time.monotonic()
    run("plan", "launcher=slurm", "cluster.device=cpu", env={"SLURM_CONF": str(bad)})  # no sinfo
    start_up = time.monotonic() - begun
    begun = time.monotonic()
    line = one_error_line(run("plan", "launcher=slurm", env={"SLURM_CONF": str(bad)}))
    # the timeout, and 5x the CLI's start-up as this machine takes it now, busy or not
    assert time.monotonic() - begun < SINFO_TIMEOUT_S + 5 * start_up
    assert "sinfo did not answer" in line or "sinfo failed" in line, line
    assert "cluster.device=cuda" in line


# ----------------------------------------------------------------------------- end to end
AREAL_LAUNCH = ROOT / ".venv" / "bin" / "areal-launch"


def cpu_partition() -> bool:
    out = subprocess.run(["sinfo", "-h", "-p", "cpu", "-o", "%N"], capture_output=True, text=True)
    return bool(out.stdout.strip())


@pytest.mark.vllm
@pytest.mark.torch
@pytest.mark.timeout(900)
@pytest.mark.skipif(not AREAL_LAUNCH.exists(), reason=f"{AREAL_LAUNCH} is not installed yet")
def test_areal_launch_runs_vllm_and_fsdp_on_different_nodes_and_rewards_on_a_cpu_node(
    tmp_path, stand_in
):
    """The real thing: `areal-launch launcher=slurm`, a vLLM CPU server on node1 and two
    FSDP2 ranks (torchrun, gloo) on node2, to completion, both under an interpreter of their
    own (trainer.python, rollout.python: the AReaL stand-in's venv, tests/stand_in_areal.py);
    and two reward workers on the CPU-only node3 (its own partition: a component of a
    heterogeneous job asking for no GPU), with their node group's environment and
    interpreter."""
    if not cpu_partition():
        pytest.skip(
            "the running Slurm test cluster has no CPU-only node (partition cpu): "
            "restart it with scripts/slurm/start-slurm.sh"
        )
    groups, python = group_overrides(tmp_path, "+launcher.group_sbatch.cpu=['--partition=cpu']")
    out = subprocess.run(
        [
            str(AREAL_LAUNCH),
            "launcher=slurm",
            "rollout.backend=vllm:d1",
            "actor.backend=fsdp:d2",
            "cluster.device=cpu",
            "cluster.gpus_per_node=2",
            *groups,
            "cluster.component_placement.rollout=0",
            "cluster.component_placement.actor=2-3",
            f"hydra.run.dir={tmp_path}",
            "recipe.steps=2",
            f"trainer.python={stand_in.python}",
            f"rollout.python={stand_in.python}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().splitlines()[-1]
    run_dir = Path(find_run(job).run_dir)  # tmp_path exists already: the run made its own
    state = wait_state(job, timeout=800)
    assert state == "COMPLETED", "\n".join(logs(run_dir))
    wait_for(
        lambda: "COMPLETED (exit 0:0)" in status(job, run_dir)[0], what="sacct to record the step"
    )  # sacct lags ~1 s
    text = status(job, run_dir)[0]
    assert re.search(r"step \S+ \S+: COMPLETED \(exit 0:0\) on node\[1-2\]", text), text
    assert "areal-launch: job finished: ok" in text
    ran = {
        path.stem: [p["name"] for p in json.loads(path.read_text())["processes"]]
        for path in (run_dir / "status").glob("node*.json")
    }
    assert ran == {
        "node0": ["rollout-0"],
        "node1": ["actor-node1"],  # one supervisor a node
        "node2": ["reward-0", "reward-1"],
    }
    # the trainers reached the server on the other node and had every weight push confirmed
    trainer_lines = "\n".join(logs(run_dir, engine="actor"))
    assert "reloads confirmed 2/2" in trainer_lines, trainer_lines[-3000:]
    reports = node_reports(run_dir)
    assert sorted(reports) == ["reward-0", "reward-1"]
    for r in reports.values():
        assert r["slurm_node"] == "node3" and not r["cuda_visible_devices"]
        assert r["group_env"] == {"GROUP_ROLE": "reward"} and r["python"] == str(python)
    assert_ran_under(stand_in, seen_by(run_dir), server_module="vllm.entrypoints.openai.api_server")
    script = (run_dir / JOB_SCRIPT).read_text()
    assert "#SBATCH hetjob" in script and "#SBATCH --partition=cpu" in script
