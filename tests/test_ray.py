"""The Ray runner on a real Ray cluster (scripts/ray/start-ray-cluster.sh: 2 nodes x 8 fake GPUs
on 127.0.0.2 and 127.0.0.3 and a CPU-only node on 127.0.0.4, all on this machine).

Most runs are hand-built requests (shell and python processes; real torchrun on gloo where a
trainer matters) driven by tests/launch_driver.py --runner ray in a process of its own, so
signals reach a real driver; the default run and a sweep go through areal-launch. "Nothing left"
is counted from outside, on every node (they are all this machine): the run's processes
(TEST_RUN_TAG in their environment, or a file open in the test's folder), its node supervisors
and keepers (their command line names the run folder), and its placement group.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Optional

import pytest

from launcher.spec.process import ProcessSpec, bind_placeholder, host_placeholder
from tests.node_groups import group_overrides, node_reports
from tests.processes import survivors, wait_until
from tests.stand_in_areal import assert_ran_under, seen_by

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
EXE = str(Path(PY).parent / "areal-launch")
DRIVER = str(ROOT / "tests" / "launch_driver.py")
CPU_NODE_IP = "127.0.0.4"  # the test cluster's CPU-only node (custom resource cpu_node)
TRAINER = str(ROOT / "tests" / "gloo_trainer.py")


# ----------------------------------------------------------------------------- helpers
@pytest.fixture
def env(ray_cluster, tmp_path) -> dict:
    """A driver's environment: the test cluster, and a job index of the test's own."""
    return {**os.environ, **ray_cluster, "XDG_CACHE_HOME": str(tmp_path / "cache")}


@pytest.fixture
def tag(tmp_path):
    t = uuid.uuid4().hex
    yield t
    for pid in left(t, tmp_path):  # never leave a process behind, even when a test fails
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def node_supervisors(folder: Path) -> list[int]:
    """Node supervisors (holder, keeper, supervisor: one command line) of runs under `folder`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"launcher.node.agent" in argv and any(str(folder).encode() in a for a in argv):
            found.append(int(pid))
    return found


def left(tag: str, folder: Path) -> list[int]:
    return sorted(set(survivors(tag, folder)) | set(node_supervisors(folder)))


def ask_ray(env: dict, code: str) -> object:
    """What `code` prints as JSON, run in a process of its own, as a user's script runs."""
    out = subprocess.run(
        [PY, "-c", code], capture_output=True, text=True, env=env, timeout=60, cwd="/"
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def placement_groups(env: dict, name: str, detail: bool = False) -> list:
    """Placement groups named `name` as Ray's state API has them (as `ray list` shows them)."""
    return ask_ray(
        env,
        f"""
import json, os
from ray.util.state import list_placement_groups
print(json.dumps([{{"state": pg.state, "bundles": pg.bundles}} for pg in list_placement_groups(
    address=os.environ["RAY_ADDRESS"], filters=[("name", "=", {name!r})], detail={detail})]))""",
    )


def nothing_left(tag: str, folder: Path, env: dict, run_id: str, within_s: float = 30) -> None:
    """A wait, not a speed check: a failure to nothing left took 3.9 s (at most 4.6 s) here
    (docs/benchmarks.md, bench_ray.py); 30 s is over 5x that."""
    assert wait_until(lambda: not left(tag, folder), within_s), [
        Path(f"/proc/{p}/cmdline").read_bytes()[:200] for p in left(tag, folder)
    ]
    assert {pg["state"] for pg in placement_groups(env, f"areal-{run_id}")} <= {"REMOVED"}


def ray_node_of(pid: int) -> str:
    """The node address of the raylet `pid` runs under (its ancestor: Ray's worker's parent)."""
    while pid > 1:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        for arg in argv:
            if arg.startswith(b"--node_ip_address="):
                return arg.split(b"=", 1)[1].decode()
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise AssertionError("not under a raylet")


def shell(
    name: str, role: str, node: int, script: str, tag: str, gpus: tuple[int, ...] = (), **env: str
) -> ProcessSpec:
    return ProcessSpec(
        name,
        "rollout" if role == "server" else "actor",
        role,
        node,
        ("bash", "-c", script),
        env={"TEST_RUN_TAG": tag, **env},
        gpus=gpus,
    )


def start(specs: list[ProcessSpec], run_dir: Path, env: dict, *args: str) -> subprocess.Popen:
    """The driver, attached, on its own process: `launch_driver.py --runner ray`."""
    spec_file = run_dir.parent / f"{run_dir.name}-specs.json"
    spec_file.write_text(json.dumps([s.to_dict() for s in specs]))
    return subprocess.Popen(
        [
            PY,
            DRIVER,
            str(spec_file),
            str(run_dir),
            "--runner",
            "ray",
            "--num-nodes",
            "2",
            "--grace",
            "3",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def finish(driver: subprocess.Popen, timeout: float = 180) -> tuple[int, str]:
    out = driver.communicate(timeout=timeout)[0]
    return driver.returncode, out


def driver_output(driver: subprocess.Popen) -> str:
    """What a driver said, if it has ended (for assertion messages)."""
    return driver.communicate(timeout=5)[0] if driver.poll() is not None else "still running"


def run_id_of(run_dir: Path) -> str:
    return json.loads((run_dir / "launch.json").read_text())["run_id"]


def cli(*args: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [EXE, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout
    )


def env_words(log: Path) -> dict:
    """The KEY=VALUE words a process printed on its first line."""
    return dict(w.split("=", 1) for w in log.read_text().splitlines()[0].split())


REPORT = (
    "echo CVD=$CUDA_VISIBLE_DEVICES NOSET=${RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES-unset}"
    " OMP=${OMP_NUM_THREADS-unset} PID=$$ CWD=$PWD"
)

BLOCKER = """
import sys, time, ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
ray.init(logging_level="ERROR")
gpus = int(sys.argv[1])
pg = placement_group([{"GPU": gpus, "CPU": 0.01}] * 2, strategy="STRICT_SPREAD")
ray.get(pg.ready(), timeout=60)
@ray.remote
def held():
    return ray.util.get_node_ip_address(), ray.get_gpu_ids()
print(json.dumps(ray.get([held.options(num_gpus=gpus, num_cpus=0.01, scheduling_strategy=
      PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=k)).remote()
      for k in range(2)]) if gpus else []), flush=True)
sys.stdin.read()
""".replace("import sys,", "import json, sys,")


@pytest.fixture
def blocker(env):
    """Another Ray driver holding GPUs on both nodes: start(gpus) -> {node ip: its GPU ids}."""
    procs = []

    def hold(gpus: int) -> dict[str, list[int]]:
        p = subprocess.Popen(
            [PY, "-c", BLOCKER, str(gpus)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        procs.append(p)
        assert p.stdout is not None
        return {ip: ids for ip, ids in json.loads(p.stdout.readline())}

    yield hold
    for p in procs:
        p.kill()
        p.wait()


# ----------------------------------------------------------------------------- placement
def node_processes(folder: Path, node: int) -> list[int]:
    return [
        p
        for p in node_supervisors(folder)
        if f"--node\0{node}\0".encode() in Path(f"/proc/{p}/cmdline").read_bytes()
    ]


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def node_actor(folder: Path, node: int) -> int:
    """The Ray worker process of plan node `node`'s actor: its supervisor's holder's parent."""
    (actor,) = {
        parent(p)
        for p in node_processes(folder, node)
        if b"ray::" in Path(f"/proc/{parent(p)}/cmdline").read_bytes()
    }
    return actor


def node_gpus(folder: Path, node: int) -> list[str]:
    """The GPUs node `node`'s supervisor was given (CUDA_VISIBLE_DEVICES in its environment)."""
    for pid in node_processes(folder, node):
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if item.startswith(b"CUDA_VISIBLE_DEVICES="):
                return item.split(b"=", 1)[1].decode().split(",")
    raise AssertionError(f"no supervisor of node {node}")


@pytest.mark.parametrize("detach", [False, True], ids=["attached", "detached"])
def test_each_plan_node_runs_on_its_own_ray_node_on_the_gpus_ray_gave_its_actor(
    tmp_path, env, tag, blocker, detach
):
    """Another driver holds 4 GPUs of each node, so the plan's positions must map through the
    other 4 (the ones Ray gave the node's actor), not be taken as physical GPU ids. Attached,
    the run is of an entry that is not ours: AReaL's name_resolve records of an earlier run are
    cleared before any node starts, never what this run's nodes register there."""
    held = blocker(4)
    run_dir = tmp_path / "run"
    records = tmp_path / "areal" / "names" / getpass.getuser() / "exp" / "trial"
    records.mkdir(parents=True)
    (records / "old-server").write_text("an earlier run's address\n")
    hold = (
        f"mkdir -p {records}; touch {records}/$AREAL_LAUNCH_PROCESS; {REPORT}; "
        f"while [ ! -e {run_dir}/go ]; do sleep 0.2; done"
    )
    addrs = f"{host_placeholder(0)}:1,{bind_placeholder(1)}:2"
    specs = [
        shell("rollout-0", "server", 0, f"{REPORT}; exec sleep 300", tag, (0, 1)),
        shell("actor-0", "trainer", 0, hold, tag, (1, 2, 3)),
        shell(
            "actor-1",
            "trainer",
            1,
            hold.replace("; while", " ADDRS=$AREAL_LLM_SERVER_ADDRS; while", 1),
            tag,
            (0, 1, 2, 3),
            AREAL_LLM_SERVER_ADDRS=addrs,
        ),
    ]
    names = [s.name for s in specs]
    driver = start(
        specs,
        run_dir,
        env,
        "--device",
        "cuda",
        *(("--detach",) if detach else ("--areal-root", str(tmp_path / "areal"))),
    )
    logs = run_dir / "logs"
    assert wait_until(
        lambda: all(
            (logs / f"{n}.log").exists() and (logs / f"{n}.log").read_text() for n in names
        ),
        90,
    ), driver_output(driver)
    seen = {n: env_words(logs / f"{n}.log") for n in names}
    where = {n: ray_node_of(int(w["PID"])) for n, w in seen.items()}
    assert where["rollout-0"] == where["actor-0"] != where["actor-1"]  # one Ray node per plan node
    for node, ip in ((0, where["actor-0"]), (1, where["actor-1"])):
        visible = node_gpus(run_dir, node)
        assert len(visible) == 4 and not set(map(int, visible)) & set(held[ip])
        for spec in (s for s in specs if s.node == node):
            assert seen[spec.name]["CVD"] == ",".join(visible[g] for g in spec.gpus)
    assert seen["actor-1"]["ADDRS"] == f"{where['rollout-0']}:1,{where['actor-1']}:2"
    assert all(w["NOSET"] == "unset" and w["OMP"] == "unset" for w in seen.values())
    assert {w["CWD"] for w in seen.values()} == {os.getcwd()}  # where the launch was made
    if not detach:  # both trainers registered; the earlier run's record is gone
        assert wait_until(lambda: sorted(os.listdir(records)) == ["actor-0", "actor-1"], 10), (
            os.listdir(records)
        )
    (run_dir / "go").touch()
    code, out = finish(driver)
    assert code == 0, out
    run_id = json.loads((run_dir / "request.json").read_text())["run_id"]
    if detach:
        assert job_id(out) == f"areal-{run_id}"
        job = job_id(out)
        assert wait_until(lambda: "SUCCEEDED" in cli("status", job, env=env).stdout, 120)
        out = cli("logs", job, env=env).stdout
    assert "run finished: every node with trainers exited 0" in out
    assert re.search(r"\(node1 pid=\d+(, ip=127\.0\.0\.\d)?\) actor-1 \| CVD=", out), out
    nothing_left(tag, tmp_path, env, run_id)  # the server was stopped when the trainers ended


def refused(out: subprocess.CompletedProcess) -> str:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and out.stdout == "" and len(lines) == 1, out.stdout + out.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_a_plan_too_big_for_the_cluster_is_refused_before_anything_starts(tmp_path, env):
    cpu = [
        "launcher=ray",
        "cluster.device=cpu",
        "rollout=none",
        "cluster.gpus_per_node=1",
        f"hydra.run.dir={tmp_path}/r",
    ]
    # the test cluster has 3 nodes (2 with GPUs, 1 CPU-only)
    assert "needs 4 Ray nodes" in refused(
        cli(*cpu, "cluster.num_nodes=4", "actor.backend=fsdp:d4", env=env)
    )
    assert "needs 4 Ray nodes" in refused(
        cli(*cpu, "cluster.num_nodes=4", "launcher.dry_run=true", "actor.backend=fsdp:d4", env=env)
    )
    fits = cli(
        *cpu, "cluster.num_nodes=2", "actor.backend=fsdp:d2", "launcher.dry_run=true", env=env
    )
    assert fits.returncode == 0 and "did not check" not in fits.stderr, fits.stderr
    gpu = [
        "launcher=ray",
        "cluster.device=cuda",
        "cluster.num_nodes=1",
        "rollout=none",
        "cluster.gpus_per_node=16",
        "actor.backend=fsdp:d16",
        f"hydra.run.dir={tmp_path}/r",
    ]
    line = refused(cli(*gpu, env=env))
    assert "plan node 0 needs 16 GPU" in line and "cluster.gpus_per_node" in line
    assert not (tmp_path / "r").exists()  # no run folder: nothing started
    # cluster.device=auto plans for the Ray cluster's nodes (8 fake GPUs each), not this machine
    auto = cli(
        "plan",
        "--json",
        "launcher=ray",
        "cluster.device=auto",
        "rollout=none",
        "cluster.num_nodes=2",
        "actor.backend=fsdp:d16",
        env=env,
    )
    assert auto.returncode == 0, auto.stderr
    assert json.loads(auto.stdout)["cluster"] == {
        "num_nodes": 2,
        "gpus_per_node": 8,
        "device": "cuda",
    }
    assert "the Ray cluster at" in auto.stderr and "with 8 GPU(s)" in auto.stderr, auto.stderr


def test_a_placement_that_cannot_happen_now_times_out_naming_what_is_pending(
    tmp_path, env, blocker, tag
):
    blocker(8)  # every GPU of both nodes is taken: the plan fits the cluster, not this moment
    driver = start(
        [
            shell("actor-0", "trainer", 0, "true", tag, (0,)),
            shell("actor-1", "trainer", 1, "true", tag, (0,)),
        ],
        tmp_path / "run",
        env,
        "--device",
        "cuda",
        "--placement-timeout",
        "3",
    )
    code, out = finish(driver)
    # the message is the timeout's, with the value given (the default would wait 60 s)
    assert code != 0 and "did not place the run within 3 s" in out, out
    assert 'plan node 1: {"CPU": 1.0, "GPU": 1.0}' in out and "launcher.placement_timeout_s" in out
    run_id = json.loads((tmp_path / "run" / "request.json").read_text())["run_id"]
    assert not (tmp_path / "run" / "logs").exists()
    nothing_left(tag, tmp_path, env, run_id)


# ----------------------------------------------------------------------------- faults
def http_server(tag: str, port: int) -> ProcessSpec:
    return ProcessSpec(
        "rollout-0",
        "rollout",
        "server",
        0,
        (PY, "-m", "http.server", str(port), "--bind", bind_placeholder(0)),
        env={"TEST_RUN_TAG": tag},
        health_url=f"http://{host_placeholder(0)}:{port}/",
    )


def torchrun_on_node1(tag: str, run_dir: Path, port: int, **env: str) -> ProcessSpec:
    return ProcessSpec(
        "actor",
        "actor",
        "trainer",
        1,
        (
            PY,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-addr",
            host_placeholder(1),
            "--master-port",
            str(port),
            "--log-dir",
            str(run_dir / "torchrun" / "actor"),
            TRAINER,
        ),
        env={"TEST_RUN_TAG": tag, "OMP_NUM_THREADS": "1", "AREAL_COMPONENT": "actor", **env},
        gpus=(0, 1),
    )


def free_ports(n: int) -> list[int]:
    from launcher.node.ports import PortReserver

    with PortReserver() as r:
        return [r.take() for _ in range(n)]


@pytest.mark.torch
def test_a_rank_raising_on_one_node_stops_every_node_and_is_named(tmp_path, env, tag):
    run_dir = tmp_path / "run"
    web, master = free_ports(2)
    driver = start(
        [http_server(tag, web), torchrun_on_node1(tag, run_dir, master, FAIL_RANK="1")],
        run_dir,
        env,
    )
    code, out = finish(driver)
    assert code == 1, out
    assert re.search(
        r"run failed: plan node 1 \(127\.0\.0\.\d\): actor exited with code 1: "
        r"rank 1 raised RuntimeError: rank 1 fails on purpose",
        out,
    ), out
    assert "raise RuntimeError" in out  # the rank's own traceback, in the verdict
    nothing_left(tag, tmp_path, env, run_id_of(run_dir))


def test_a_server_dying_stops_the_trainers_node_and_is_named(tmp_path, env, tag):
    specs = [
        shell("rollout-0", "server", 0, "sleep 2; echo out of memory; exit 3", tag),
        shell("actor-1", "trainer", 1, "exec sleep 300", tag),
    ]
    driver = start(specs, tmp_path / "run", env)
    assert wait_until(lambda: len(survivors(tag, tmp_path)) >= 2, 60)
    code, out = finish(driver)
    assert code == 1, out
    assert re.search(
        r"run failed: plan node 0 \(127\.0\.0\.\d\): rollout-0 exited with code 3", out
    ), out
    assert "out of memory" in out
    nothing_left(tag, tmp_path, env, run_id_of(tmp_path / "run"))


def running(tmp_path: Path, env: dict, tag: str, *args: str) -> subprocess.Popen:
    """A run on both nodes that goes on until stopped (a server and a trainer that sleep)."""
    specs = [
        shell("rollout-0", "server", 0, "echo serving; exec sleep 300", tag),
        shell("actor-1", "trainer", 1, "echo training; exec sleep 300", tag),
    ]
    driver = start(specs, tmp_path / "run", env, *args)
    assert wait_until(lambda: len(survivors(tag, tmp_path)) >= 2, 60), driver_output(driver)
    return driver


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_of_the_driver_stops_every_node(tmp_path, env, tag, sig, code):
    driver = running(tmp_path, env, tag)
    driver.send_signal(sig)
    got, out = finish(driver, 60)
    assert got == code, out
    assert f"run stopped: got {signal.Signals(sig).name}" in out
    nothing_left(tag, tmp_path, env, run_id_of(tmp_path / "run"))


def test_a_sigkilled_driver_leaves_nothing_on_any_node(tmp_path, env, tag):
    driver = running(tmp_path, env, tag)
    assert len(node_supervisors(tmp_path)) >= 6  # holder, keeper, supervisor on each node
    driver.kill()
    driver.wait()
    nothing_left(tag, tmp_path, env, run_id_of(tmp_path / "run"))


def test_a_lost_node_actor_stops_the_other_nodes(tmp_path, env, tag):
    """Node 1's actor process is SIGKILLed (as when its node goes): Ray reports the actor
    dead, the driver stops node 0, and node 1's keeper sweeps node 1."""
    driver = running(tmp_path, env, tag)
    os.kill(node_actor(tmp_path / "run", 1), signal.SIGKILL)
    code, out = finish(driver, 60)
    assert code == 1 and re.search(
        r"run failed: plan node 1 \(127\.0\.0\.\d\) was lost "
        r"\(\w+Error\)",
        out,
    ), out
    nothing_left(tag, tmp_path, env, run_id_of(tmp_path / "run"))


def test_status_logs_and_cancel_of_an_attached_run(tmp_path, env, tag):
    driver = running(tmp_path, env, tag)
    run_id = run_id_of(tmp_path / "run")
    status = cli("status", run_id, env=env)
    assert status.returncode == 0 and status.stdout.startswith(f"run {run_id}: RUNNING (ray, pid")
    assert "actor-1 (trainer" in status.stdout and "rollout-0 (server" in status.stdout
    assert wait_until(lambda: "actor-1   | training" in cli("logs", run_id, env=env).stdout, 30)
    assert cli("logs", run_id, "-e", "rollout", env=env).stdout == "rollout-0 | serving\n"
    assert cli("cancel", run_id, env=env).stdout.strip() == f"run {run_id}: stopped"
    assert driver.wait(timeout=30) == 143
    nothing_left(tag, tmp_path, env, run_id)
    assert cli("status", run_id, env=env).stdout.startswith(f"run {run_id}: ENDED")


def detached_job(tmp_path: Path, env: dict, tag: str) -> str:
    driver = running(tmp_path, env, tag, "--detach")
    code, out = finish(driver, 60)
    assert code == 0, out
    return job_id(out)


def job_id(out: str) -> str:
    """The id a detached launch printed on its own line (stdout)."""
    found = re.search(r"^(areal-[0-9a-f]{32})$", out, re.M)
    assert found, out
    return found.group(1)


def test_status_logs_and_cancel_of_a_detached_run_ask_rays_job_api(tmp_path, env, tag):
    job = detached_job(tmp_path, env, tag)
    status = cli("status", job, env=env)
    assert status.returncode == 0 and status.stdout.startswith(
        f"job {job}: RUNNING (Ray job at http"
    )
    assert f"run folder: {tmp_path / 'run'}" in status.stdout
    assert wait_until(lambda: "training" in cli("logs", job, env=env).stdout, 30)
    engine = cli("logs", job, "--engine", "rollout", env=env).stdout.splitlines()
    assert engine and all(re.match(r"\(node0 pid=\d+.*\) rollout-0 \| ", ln) for ln in engine)
    assert "serving" in engine[0]
    stopped = cli("cancel", job, env=env)
    assert stopped.stdout.strip() == f"job {job}: STOPPED (was RUNNING)", (
        stopped.stdout + stopped.stderr
    )
    nothing_left(tag, tmp_path, env, job.removeprefix("areal-"))
    assert (
        cli("cancel", job, env=env).stdout.strip()
        == f"job {job}: already STOPPED; nothing to cancel"
    )
    follow = cli("logs", job, "--follow", env=env)  # returns: the job has ended
    assert follow.returncode == 0 and "serving" in follow.stdout


def test_logs_follow_streams_a_detached_run_until_it_ends(tmp_path, env, tag):
    count = "for i in 1 2 3; do echo line $i; sleep 0.5; done"
    driver = start(
        [shell("actor-0", "trainer", 0, count, tag), shell("actor-1", "trainer", 1, "true", tag)],
        tmp_path / "run",
        env,
        "--detach",
    )
    code, out = finish(driver, 60)
    assert code == 0, out
    job = job_id(out)
    follow = cli("logs", job, "--follow", "--engine", "actor", env=env)
    lines = [
        re.sub(r"^\(node0 pid=\d+[^)]*\) ", "", ln)
        for ln in follow.stdout.splitlines()
        if "line" in ln
    ]
    assert lines == ["actor-0 | line 1", "actor-0 | line 2", "actor-0 | line 3"], follow.stdout
    assert "SUCCEEDED" in cli("status", job, env=env).stdout  # --follow returned at the end


def test_a_job_ray_does_not_know_is_said_so(tmp_path, env):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    subprocess.run(
        [
            PY,
            "-c",
            "import sys; from launcher.node.runs import RunRecord, write_record; "
            "write_record(RunRecord('ray', 'r', sys.argv[1], job_id='areal-gone', "
            "address=sys.argv[2]))",
            str(run_dir),
            env["RAY_API_SERVER_ADDRESS"],
        ],
        env=env,
        check=True,
    )
    out = cli("status", "areal-gone", env=env)
    assert out.returncode == 1 and out.stdout.startswith(
        "job areal-gone: not known to the Ray cluster at http"
    ), out.stdout + out.stderr
    assert "not known" in refused(cli("cancel", "areal-gone", env=env))


def test_a_detached_driver_that_dies_leaves_nothing_on_any_node(tmp_path, env, tag):
    job = detached_job(tmp_path, env, tag)
    pid = ask_ray(
        env,
        "import os; from ray.job_submission import JobSubmissionClient; "
        f"print(JobSubmissionClient().get_job_info({job!r}).driver_info.pid)",
    )
    os.kill(int(pid), signal.SIGKILL)
    nothing_left(tag, tmp_path, env, job.removeprefix("areal-"), within_s=60)
    assert wait_until(lambda: "FAILED" in cli("status", job, env=env).stdout.splitlines()[0], 30)


# ----------------------------------------------------------------------------- the launcher
def normalized(text: str, run_id: str, hosts: Optional[list[str]] = None) -> str:
    text = text.replace(run_id, "RUN_ID")
    for k, host in enumerate(hosts or []):
        text = re.sub(rf"(?<=[ ,]){re.escape(host)}(?=[ ,\n]|$)", f"HOST{k}", text)
    return text


def test_the_dry_run_prints_what_the_ray_runner_executes(tmp_path, env, tag):
    """The request, the bundles and every node's command line, as printed by
    launcher.dry_run=true, against what ran: the request each node read, the placement group
    Ray reports, the command lines of the node supervisors in /proc."""
    trainer = tmp_path / "hold.py"
    trainer.write_text("import time; time.sleep(300)\n")
    overrides = [
        "launcher=ray",
        "cluster.device=cpu",
        "cluster.num_nodes=2",
        "cluster.gpus_per_node=1",
        "rollout=none",
        "actor.backend=fsdp:d2",
        f"trainer.entry={trainer}",
        f"hydra.run.dir={tmp_path / 'run'}",
        f"launcher.base_port={free_ports(1)[0]}",
        f"+launcher.env.TEST_RUN_TAG={tag}",
    ]
    dry = cli(*overrides, "launcher.dry_run=true", env=env)
    assert dry.returncode == 0, dry.stderr
    launched = subprocess.Popen(
        [EXE, *overrides],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        run_dir = tmp_path / "run"
        assert wait_until(lambda: len(node_supervisors(run_dir)) >= 6, 60)
        request = json.loads((run_dir / "request.json").read_text())
        shown = json.loads(dry.stdout.split("(secrets masked):\n", 1)[1])
        dry_id, run_id = shown.pop("run_id"), request.pop("run_id")
        assert shown == request
        (pg,) = placement_groups(env, f"areal-{run_id}", detail=True)
        ran_bundles = [
            f"bundle {k}: {json.dumps(b['unit_resources'], sort_keys=True)}"
            for k, b in enumerate(pg["bundles"])
        ]
        assert ran_bundles == [ln for ln in dry.stdout.splitlines() if ln.startswith("bundle ")]
        argv = {}
        for pid in node_supervisors(run_dir):
            words = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
            argv[words[words.index("--node") + 1]] = words
        hosts = argv["0"][-1].split(",")
        ran = [f"node {k}: " + " ".join(argv[str(k)]) for k in range(2)]
        printed = [ln for ln in dry.stdout.splitlines() if ln.startswith("node ")]
        assert [normalized(ln, run_id, hosts) for ln in ran] == [
            normalized(ln, dry_id) for ln in printed
        ]
    finally:
        launched.send_signal(signal.SIGINT)
        out = launched.communicate(timeout=60)[0]
    assert launched.returncode == 130, out
    nothing_left(tag, tmp_path, env, run_id)


def test_the_launcher_process_of_a_ray_run_imports_no_engine(tmp_path, env):
    """areal-launch launcher=ray, as one process: it imports ray, never torch, vllm, sglang
    (its processes do, on the nodes)."""
    trainer = tmp_path / "hello.py"
    trainer.write_text("print('hello from the trainer')\n")
    code = f"""
import sys
from launcher.cli.launch import prepare, start
code = start(prepare(["launcher=ray", "cluster.device=cpu", "rollout=none", "actor.backend=fsdp:d1",
                      "cluster.num_nodes=1", "cluster.gpus_per_node=1", "trainer.entry={trainer}",
                      "hydra.run.dir={tmp_path / "run"}"]))
print("exit", code, "ray" in sys.modules, sorted(m for m in ("torch", "vllm", "sglang")
                                               if m in sys.modules), file=sys.stderr)
"""
    out = subprocess.run(
        [PY, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=200
    )
    assert "exit 0 True []" in out.stderr, out.stdout[-2000:] + out.stderr[-2000:]
    assert "actor-node0 | hello from the trainer" in out.stdout


def test_a_sweep_on_ray_runs_its_points_in_turn(tmp_path, env):
    trainer = tmp_path / "rank.py"
    trainer.write_text(
        "import json, os, time\nstart = time.time(); time.sleep(1)\n"
        "json.dump([start, time.time()], open(os.path.join(os.environ["
        "'AREAL_RUN_DIR'], 'rank-' + os.environ['RANK'] + '.json'), 'w'))\n"
    )
    out = cli(
        "-m",
        "launcher=ray",
        "cluster.device=cpu",
        "cluster.num_nodes=2",
        "cluster.gpus_per_node=1",
        "rollout=none",
        "actor.backend=fsdp:d1,fsdp:d2",
        f"trainer.entry={trainer}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"launcher.base_port={free_ports(1)[0]}",
        env=env,
        timeout=280,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [ln.split() for ln in out.stderr.splitlines() if re.match(r"^[01]\s+actor", ln)]
    assert [r[:4] for r in rows] == [
        ["0", "actor.backend=fsdp:d1", "exit", "0"],
        ["1", "actor.backend=fsdp:d2", "exit", "0"],
    ], out.stderr[-2000:]
    spans = {
        i: [json.loads(p.read_text()) for p in (tmp_path / "sweep" / str(i)).glob("rank-*")]
        for i in (0, 1)
    }
    assert len(spans[0]) == 1 and len(spans[1]) == 2  # point 1 spanned both Ray nodes
    assert max(end for _, end in spans[0]) < min(start for start, _ in spans[1])  # in turn


@pytest.mark.vllm
@pytest.mark.torch
@pytest.mark.timeout(900)
def test_the_default_run_spans_two_ray_nodes_and_rewards_run_on_the_cpu_only_one(
    tmp_path, env, tag, tiny_model, stand_in
):
    """The real thing: `areal-launch launcher=ray`, a vLLM CPU server on one Ray node and two
    FSDP2 ranks (torchrun, gloo) on the other, to exit 0 with every weight push confirmed, the
    ranks under an interpreter of their own (trainer.python: the AReaL stand-in's venv,
    tests/stand_in_areal.py), the server under the Ray nodes' one; and
    two reward workers of a CPU-only node group on the CPU-only Ray node (its custom resource
    cpu_node), with the group's environment and interpreter. The actor's AReaL scheduling_spec
    asks 1 GiB per GPU: its node's bundle and actor reserve Ray memory for both ranks."""
    groups, python = group_overrides(tmp_path, "+launcher.group_resources.cpu={cpu_node: 1}")
    out = cli(
        "launcher=ray",
        "rollout.backend=vllm:d1",
        "actor.backend=fsdp:d2",
        "cluster.device=cpu",
        "cluster.gpus_per_node=2",
        *groups,
        "cluster.component_placement.rollout=0",
        "cluster.component_placement.actor=2-3",
        f"hydra.run.dir={tmp_path / 'run'}",
        "recipe.steps=2",
        f"model_path={tiny_model}",
        f"launcher.base_port={free_ports(1)[0]}",
        f"+launcher.env.TEST_RUN_TAG={tag}",
        f"trainer.python={stand_in.python}",
        "actor.scheduling_spec=[{mem: 1}]",
        env=env,
        timeout=800,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert re.search(
        r"\(node1 pid=\d+, ip=127\.0\.0\.\d\) actor-node1 \| grpo done: steps 2 "
        r".* reloads confirmed 2/2",
        out.stdout,
    ) or re.search(
        r"\(node1 pid=\d+\) actor-node1 \| grpo done: .* reloads confirmed 2/2", out.stdout
    ), out.stdout[-4000:]
    assert (
        out.stdout.strip()
        .splitlines()[-1]
        .startswith("areal-launch: run finished: every node with trainers exited 0")
    )
    placed = re.search(
        r"placed: plan node 0 on (\S+), plan node 1 on (\S+), plan node 2 on "
        r"(\S+)",
        out.stdout,
    )
    assert placed and placed.group(3) == CPU_NODE_IP, out.stdout[-4000:]
    assert CPU_NODE_IP not in placed.group(1, 2)
    run_dir = tmp_path / "run"
    ran = {
        p.stem: [q["name"] for q in json.loads(p.read_text())["processes"]]
        for p in (run_dir / "status").glob("node*.json")
    }
    assert ran == {
        "node0": ["rollout-0"],
        "node1": ["actor-node1"],
        "node2": ["reward-0", "reward-1"],
    }
    assert "reloads confirmed 2/2" in (run_dir / "logs" / "actor-node1.log").read_text()
    reports = node_reports(run_dir)
    assert sorted(reports) == ["reward-0", "reward-1"]
    for r in reports.values():
        assert r["ray_node_ip"] == CPU_NODE_IP and not r["cuda_visible_devices"]
        assert r["group_env"] == {"GROUP_ROLE": "reward"} and r["python"] == str(python)
    assert_ran_under(stand_in, seen_by(run_dir))  # the trainers only
    bundles = json.loads((run_dir / "ray-job.json").read_text())["bundles"]
    assert bundles[1]["memory"] == 2 * 2**30 and "memory" not in bundles[0], bundles
    nothing_left(tag, tmp_path, env, run_id_of(run_dir))
