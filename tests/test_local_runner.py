"""The local runner with real processes: torchrun on gloo, a vLLM CPU server, real signals.

Each run goes through the whole tree a launch builds (launcher -> keeper -> supervisor ->
processes), driven by tests/launch_driver.py in a process of its own. "Nothing left behind" is
checked from outside, independently of the runner's own bookkeeping: a process of a test's run
is one whose environment holds TEST_RUN_TAG=<uuid> (set in spec.env, inherited by
descendants) or that holds a file open under the test's folder (every process of a run
inherits its log file as stdout). The second catches processes that clear their environ, as
vLLM's engine core does (setproctitle).
"""

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from launcher.node import keeper
from launcher.node.ports import PortReserver
from launcher.node.runs import write_private
from launcher.runners.local import dry_run_text
from launcher.spec.process import ENV_RUN_MARKER, ProcessSpec
from launcher.spec.request import materialize
from tests.processes import survivors, wait_until

TESTS = Path(__file__).resolve().parent
PY = sys.executable
TRAINER = str(TESTS / "gloo_trainer.py")
DRIVER = str(TESTS / "launch_driver.py")
FAKE_SERVER = str(TESTS / "fake_server.py")


# ----------------------------------------------------------------------------- helpers
def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def tag(tmp_path):
    t = uuid.uuid4().hex
    yield t
    kill_all(survivors(t, tmp_path))  # never leave a process behind, even when a test fails


def http_server(tag: str, port: str = "{port0}", name: str = "rollout-0") -> ProcessSpec:
    """A real HTTP server (stdlib), for tests about supervision rather than about vLLM."""
    return ProcessSpec(
        name,
        "rollout",
        "server",
        0,
        (PY, "-m", "http.server", port, "--bind", "127.0.0.1"),
        env={"TEST_RUN_TAG": tag},
        health_url=f"http://127.0.0.1:{port}/",
    )


def python_trainer(
    code: str, tag: str, name: str = "actor", node: int = 0, gpus: tuple[int, ...] = (), **env: str
) -> ProcessSpec:
    return ProcessSpec(
        name,
        "actor",
        "trainer",
        node,
        (PY, "-c", code),
        env={"TEST_RUN_TAG": tag, **env},
        gpus=gpus,
    )


def torchrun(
    tag: str, run_dir: Path, master_port: str = "{port1}", name: str = "actor", **env: str
) -> ProcessSpec:
    return ProcessSpec(
        name,
        "actor",
        "trainer",
        0,
        (
            PY,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            master_port,
            "--log-dir",
            str(run_dir / "torchrun" / name),
            TRAINER,
        ),
        env={"TEST_RUN_TAG": tag, "OMP_NUM_THREADS": "1", "AREAL_COMPONENT": "actor", **env},
        gpus=(0, 1),
    )


def start(specs, run_dir: Path, *args: str) -> subprocess.Popen:
    spec_file = run_dir.parent / f"{run_dir.name}-specs.json"
    spec_file.write_text(json.dumps([s.to_dict() for s in specs]))
    return subprocess.Popen(
        [PY, DRIVER, str(spec_file), str(run_dir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def run(specs, run_dir: Path, *args: str, timeout: float = 120) -> tuple[int, dict, str]:
    """Run to the end: exit code, the supervisor's status/all.json, the console output."""
    launcher = start(specs, run_dir, *args)
    output = launcher.communicate(timeout=timeout)[0]
    return launcher.returncode, ended(run_dir), output


def ended(run_dir: Path) -> dict:
    path = run_dir / "status" / "all.json"
    return json.loads(path.read_text()) if path.exists() else {}


# ----------------------------------------------------------------------------- vLLM
def vllm_server(model: str, tag: str) -> ProcessSpec:
    return ProcessSpec(
        "rollout-0",
        "rollout",
        "server",
        0,
        (
            PY,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            "{port0}",
            "--dtype",
            "float32",
            "--max-model-len",
            "256",
            "--enforce-eager",
            "--served-model-name",
            "tiny",
        ),
        env={"TEST_RUN_TAG": tag, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"},
        ports=(),
        health_url="http://127.0.0.1:{port0}/health",
    )


@pytest.mark.vllm
@pytest.mark.torch
@pytest.mark.timeout(600)
def test_real_vllm_server_killed_mid_run_stops_everything_and_is_named(tmp_path, tag, tiny_model):
    """torchrun ranks reach a real vLLM server, hold; the server is SIGKILLed: the run fails,
    names it, and nothing is left. (The run to exit 0 is tests/test_demo_e2e.py.)"""
    run_dir = tmp_path / "run"
    launcher = start(
        [
            vllm_server(tiny_model, tag),
            torchrun(tag, run_dir, HOLD_S="600", AREAL_LLM_SERVER_ADDRS="127.0.0.1:{port0}"),
        ],
        run_dir,
        "--ports",
        "2",
        "--health-timeout",
        "500",
    )
    log = run_dir / "logs" / "actor.log"
    held = wait_until(lambda: log.exists() and log.read_text().count("holding") == 2, 500)
    api = [
        p
        for p in survivors(tag, tmp_path)
        if "api_server" in Path(f"/proc/{p}/cmdline").read_text()
    ]
    before = len(survivors(tag, tmp_path))
    if held and api:
        os.kill(min(api), signal.SIGKILL)
    else:  # end the run now, so the asserts below say what went wrong
        kill_all(survivors(tag, tmp_path))
    output = launcher.communicate(timeout=60)[0]
    status = ended(run_dir)
    # api server + its engine core, torchrun + 2 workers were all up when the server died
    assert before >= 5, output
    port = output.splitlines()[0].split()[1]
    for rank in (0, 1):
        assert f"rank {rank} reached http://127.0.0.1:{port}: models ['tiny']" in log.read_text()
    assert "GET /v1/models" in (run_dir / "logs" / "rollout-0.log").read_text()
    assert launcher.returncode == 1
    assert status["root_cause"] == "rollout-0"
    assert status["reason"] == "rollout-0 killed by SIGKILL before the trainers finished"
    assert status["tail"]
    assert survivors(tag, tmp_path) == []


# ----------------------------------------------------------------------------- faults
@pytest.mark.torch
@pytest.mark.timeout(300)
def test_a_rank_raising_is_named_with_its_own_exception_and_stops_the_servers(tmp_path, tag):
    run_dir = tmp_path / "run"
    code, status, output = run(
        [http_server(tag), torchrun(tag, run_dir, FAIL_RANK="1")],
        run_dir,
        "--ports",
        "2",
        timeout=200,
    )
    assert code == 1
    assert status["root_cause"] == "actor"
    assert status["reason"] == (
        "actor exited with code 1: rank 1 raised RuntimeError: rank 1 fails on purpose"
    )
    assert any("raise RuntimeError" in line for line in status["tail"])  # the rank's traceback
    assert "root cause: actor exited with code 1: rank 1 raised RuntimeError" in output
    assert survivors(tag, tmp_path) == []


def test_server_that_never_becomes_healthy_fails_the_run_at_its_deadline(tmp_path, tag):
    fake = ProcessSpec(
        "rollout-0",
        "rollout",
        "server",
        0,
        (PY, FAKE_SERVER, "{port0}"),
        env={"TEST_RUN_TAG": tag},
        health_url="http://127.0.0.1:{port0}/health",
    )
    begun = time.monotonic()
    code, status, _ = run(
        [fake, python_trainer("import time; time.sleep(600)", tag)],
        tmp_path / "run",
        "--ports",
        "1",
        "--grace",
        "5",
        "--health-timeout",
        "3",
    )
    assert code == 1
    assert status["root_cause"] == "rollout-0"
    assert status["reason"] == "rollout-0 not healthy after 3 s"
    assert any("FAKE server" in line for line in status["tail"])
    assert time.monotonic() - begun >= 3
    assert survivors(tag, tmp_path) == []


def test_server_exiting_before_trainers_finish_fails_the_run(tmp_path, tag):
    server = ProcessSpec(
        "rollout-0",
        "rollout",
        "server",
        0,
        (PY, "-c", "import sys; print('out of memory'); sys.exit(3)"),
        env={"TEST_RUN_TAG": tag},
        health_url="http://127.0.0.1:9/health",
    )
    code, status, _ = run(
        [server, python_trainer("import time; time.sleep(600)", tag)],
        tmp_path / "run",
        "--grace",
        "5",
    )
    assert code == 1
    assert (status["root_cause"], status["reason"], status["tail"]) == (
        "rollout-0",
        "rollout-0 exited with code 3 before the trainers finished",
        ["out of memory"],
    )
    assert survivors(tag, tmp_path) == []


def test_trainer_killed_by_a_signal_is_reported_by_signal_name(tmp_path, tag):
    code, status, _ = run(
        [python_trainer("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", tag)],
        tmp_path / "run",
    )
    assert (code, status["root_cause"], status["reason"]) == (1, "actor", "actor killed by SIGSEGV")


def test_process_that_cannot_start_fails_the_run_and_stops_the_others(tmp_path, tag):
    missing = ProcessSpec(
        "actor", "actor", "trainer", 0, ("/nonexistent/torchrun",), env={"TEST_RUN_TAG": tag}
    )
    code, status, _ = run(
        [http_server(tag), missing], tmp_path / "run", "--ports", "1", "--grace", "5"
    )
    assert (code, status["root_cause"]) == (1, "actor")
    assert status["reason"].startswith("actor could not start: [Errno 2]")
    assert survivors(tag, tmp_path) == []


# ----------------------------------------------------------------------------- normal runs
def test_every_trainer_exiting_0_stops_the_servers_and_exits_0(tmp_path, tag):
    fetch = (
        "import os, time, urllib.request as u\n"
        "for _ in range(100):\n"
        "    try:\n"
        "        print('got', u.urlopen('http://127.0.0.1:{port0}/').status); break\n"
        "    except OSError: time.sleep(0.1)\n"
        f"print('secret is', os.environ['HF_TOKEN'], 'run', os.environ['{ENV_RUN_MARKER}']"
        " != '')\n"
    )
    run_dir = tmp_path / "run"
    code, status, output = run(
        [http_server(tag), python_trainer(fetch, tag, HF_TOKEN="s3")],
        run_dir,
        "--ports",
        "1",
        "--grace",
        "5",
    )
    assert (code, status["reason"]) == (0, "every trainer exited 0")
    assert (run_dir / "logs" / "actor.log").read_text() == "got 200\nsecret is s3 run True\n"
    assert '"GET / HTTP/1.1" 200' in (run_dir / "logs" / "rollout-0.log").read_text()
    # launcher.console=auto: the trainer's lines; the server's stay in its log; a summary
    assert "actor     | got 200" in output and "rollout-0 | " not in output
    summary = [ln.rstrip() for ln in output[output.index("process  ") :].splitlines()]
    assert re.match(r"process\s+exit\s+duration\s+log$", summary[0]), output
    assert re.match(
        rf"rollout-0\s+stopped\s+[\d.]+ s\s+{run_dir}/logs/rollout-0.log$", summary[1]
    ), output
    assert re.match(rf"actor\s+0\s+[\d.]+ s\s+{run_dir}/logs/actor.log$", summary[2]), output
    assert "\x1b[" not in output  # not a terminal: no control codes
    assert survivors(tag, tmp_path) == []


def test_console_all_shows_every_processs_lines_prefixed(tmp_path, tag):
    code, _, output = run(
        [
            http_server(tag),
            python_trainer(
                "import time, urllib.request as u\n"
                "for _ in range(100):\n"
                "    try:\n"
                "        print('got', u.urlopen('http://127.0.0.1:{port0}/').status); break\n"
                "    except OSError: time.sleep(0.1)\n",
                tag,
            ),
        ],
        tmp_path / "run",
        "--ports",
        "1",
        "--grace",
        "5",
        "--console",
        "all",
    )
    assert code == 0, output
    assert "actor     | got 200" in output and "rollout-0 | " in output


def test_a_nodes_supervisor_starts_only_that_nodes_processes(tmp_path, tag):
    from tests.hand_requests import request_for

    here = python_trainer("print('node 0')", tag, name="actor-node0")
    there = python_trainer("print('node 1')", tag, name="actor-node1", node=1)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    request = request_for(run_dir, [here, there], num_nodes=2, device="cpu")
    write_private(run_dir / "request.json", request.to_json())
    out = subprocess.run(
        [
            PY,
            "-m",
            "launcher.node.agent",
            str(run_dir / "request.json"),
            "--node",
            "0",
            "--hosts",
            "127.0.0.1,127.0.0.1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(p.name for p in (run_dir / "logs").iterdir()) == ["actor-node0.log"]


def test_gpu_positions_become_the_gpus_the_users_mask_shows(tmp_path, tag):
    """CUDA_VISIBLE_DEVICES=4,5,6,7 (indices, UUIDs or MIG ids alike): plan GPU k is the k-th
    visible one, so no child ever sees a GPU the user excluded."""
    show = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"
    specs = [
        python_trainer(show, tag, name="actor-a", gpus=(0,)),
        python_trainer(show, tag, name="actor-b", gpus=(1, 3)),
    ]
    spec_file = tmp_path / "specs.json"
    spec_file.write_text(json.dumps([s.to_dict() for s in specs]))
    for mask, a, b in (
        ("4,5,6,7", "4", "5,7"),
        ("GPU-aa,GPU-bb,MIG-cc,GPU-dd", "GPU-aa", "GPU-bb,GPU-dd"),
    ):
        run_dir = tmp_path / f"run-{a}"
        out = subprocess.run(
            [PY, DRIVER, str(spec_file), str(run_dir), "--device", "cuda"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": mask},
        )
        assert out.returncode == 0, out.stdout
        logs = run_dir / "logs"
        assert (logs / "actor-a.log").read_text() == f"{a}\n"
        assert (logs / "actor-b.log").read_text() == f"{b}\n"


def test_a_gpu_the_mask_does_not_show_is_refused_before_anything_starts(tmp_path):
    spec = ProcessSpec("actor", "actor", "trainer", 0, ("true",), gpus=(0, 1, 2))
    with pytest.raises(
        Exception,
        match=r"needs GPU 2 of node 0, but CUDA_VISIBLE_DEVICES "
        r"there shows 2 GPU\(s\) \(4,5\)",
    ):
        materialize(spec, ["127.0.0.1"], ["4", "5"], "cuda", "run")


# ----------------------------------------------------------------------------- nothing left
DAEMON = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        os.execve(sys.executable, [sys.executable, '-c', 'import signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'], {})\n"
    "    os._exit(0)\n"
    "print('daemonised', flush=True); time.sleep(600)\n"
)


def daemons(marker_dir: Path) -> list[int]:
    """The double-forked grandchildren: an empty environ, no file open in the test folder,
    found only by their command line."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if (
            b"SIG_IGN); time.sleep(600)" in cmd
            and state != "Z"
            and Path(f"/proc/{pid}/environ").read_bytes() == b""
        ):
            found.append(int(pid))
    return found


@pytest.mark.parametrize("cgroup", ["1", "0"])
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_grandchild_that_double_forks_setsids_and_clears_its_environ_dies_with_the_launcher(
    tmp_path, tag, cgroup, how, monkeypatch
):
    """Caught by the keeper as child subreaper (cgroup=0), and by the run's cgroup where the
    machine has a writable one (cgroup=1)."""
    monkeypatch.setenv(keeper.ENV_CGROUP, cgroup)
    before = set(daemons(tmp_path))
    run_dir = tmp_path / "run"
    launcher = start([python_trainer(DAEMON, tag)], run_dir, "--grace", "2")
    log = run_dir / "logs" / "actor.log"
    assert wait_until(lambda: log.exists() and "daemonised" in log.read_text(), 30)
    assert wait_until(lambda: set(daemons(tmp_path)) - before, 10)
    launcher.send_signal(how)
    launcher.wait(timeout=30)
    # the daemon ignores TERM: the KILL after the 2 s grace ends it (2.3 s here, load 5)
    assert wait_until(lambda: not set(daemons(tmp_path)) - before, 30), daemons(tmp_path)
    assert survivors(tag, tmp_path) == []


def test_the_run_gets_a_cgroup_of_its_own_where_the_machine_allows_one():
    group = keeper.RunCgroup.create(f"areal-test-{uuid.uuid4().hex}")
    if group is None:
        pytest.skip("no writable cgroup v2 hierarchy here: the subreaper alone keeps runs")
    child = subprocess.Popen([PY, "-c", "import time; time.sleep(600)"])
    try:
        (group.path / "cgroup.procs").write_text(str(child.pid))
        assert group.pids() == [child.pid]
        group.kill()
        assert child.wait(timeout=5) == -signal.SIGKILL
        assert not group.path.exists()
    finally:
        child.kill()
        child.wait()


# ----------------------------------------------------------------------------- the launcher
def test_sigterm_to_the_launcher_stops_everything_with_exit_143(tmp_path, tag):
    run_dir = tmp_path / "run"
    launcher = start(
        [http_server(tag), python_trainer("import time; time.sleep(600)", tag)],
        run_dir,
        "--ports",
        "1",
        "--grace",
        "5",
    )
    assert wait_until(lambda: len(survivors(tag, tmp_path)) == 2, 30)
    launcher.send_signal(signal.SIGTERM)
    output = launcher.communicate(timeout=30)[0]
    assert launcher.returncode == 143
    # each ended by the TERM passed on, not by the KILL after the 5 s grace
    assert [p["exit"] for p in ended(run_dir)["processes"]] == [-signal.SIGTERM] * 2, output
    assert "got SIGTERM; run stopped" in output
    assert survivors(tag, tmp_path) == []


def test_ctrl_c_stops_a_server_only_run_with_exit_130(tmp_path, tag):
    launcher = start([http_server(tag)], tmp_path / "run", "--ports", "1", "--grace", "5")
    assert wait_until(lambda: survivors(tag, tmp_path), 30)
    time.sleep(1.5)  # a server-only run keeps running: it is still up a while later
    assert launcher.poll() is None
    launcher.send_signal(signal.SIGINT)
    output = launcher.communicate(timeout=30)[0]
    assert launcher.returncode == 130
    assert "got SIGINT" in output
    assert survivors(tag, tmp_path) == []


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_sigkill_of_the_launcher_takes_every_process_with_it(tmp_path, tag):
    run_dir = tmp_path / "run"
    launcher = start(
        [http_server(tag), torchrun(tag, run_dir, HOLD_S="600")],
        run_dir,
        "--ports",
        "2",
        "--grace",
        "10",
    )
    log = run_dir / "logs" / "actor.log"
    assert wait_until(lambda: log.exists() and log.read_text().count("holding") == 2, 200)
    before = survivors(tag, tmp_path)
    assert len(before) >= 4  # http.server, torchrun, 2 workers (in sessions of their own)
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=10)
    # torch's processes take a while to end: 1 s here at load 5, over 5 s at load 20
    assert wait_until(lambda: not survivors(tag, tmp_path), 30), survivors(tag, tmp_path)


def test_sigkill_of_the_launcher_takes_descendants_that_cleared_their_environ(tmp_path, tag):
    spawn = (
        "import subprocess, sys, time\n"
        "for new in (False, True):\n"
        "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
        " env={}, start_new_session=new)\n"
        "print('spawned', flush=True); time.sleep(600)\n"
    )
    run_dir = tmp_path / "run"
    launcher = start(
        [http_server(tag), python_trainer(spawn, tag)], run_dir, "--ports", "1", "--grace", "10"
    )
    log = run_dir / "logs" / "actor.log"
    assert wait_until(lambda: log.exists() and "spawned" in log.read_text(), 30)
    assert len(survivors(tag, tmp_path)) == 4  # server, trainer, its two children
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=10)
    assert wait_until(lambda: not survivors(tag, tmp_path), 5), survivors(tag, tmp_path)


def test_a_closed_stdout_does_not_stop_the_run(tmp_path, tag):
    """`areal-launch | head -1`: one line on stderr says so, the run goes on to its end."""
    chatty = "import time\nfor i in range(30): print('line', i, flush=True); time.sleep(0.05)"
    spec_file = tmp_path / "specs.json"
    spec_file.write_text(json.dumps([python_trainer(chatty, tag).to_dict()]))
    run_dir = tmp_path / "run"
    launcher = subprocess.Popen(
        [PY, DRIVER, str(spec_file), str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert launcher.stdout.readline().startswith("ports:")
    launcher.stdout.close()  # the reader goes away
    stderr = launcher.stderr.read()
    assert launcher.wait(timeout=60) == 0, stderr
    assert "stdout was closed; the run goes on" in stderr
    assert ended(run_dir)["reason"] == "every trainer exited 0"
    assert (run_dir / "logs" / "actor.log").read_text().count("line") == 30


def test_two_launches_at_once_get_disjoint_ports_and_both_finish(tmp_path, tag):
    with PortReserver() as r:
        base = r.take()
    fetch = (
        "import sys, time, urllib.request as u\n"
        "for _ in range(200):\n"
        "    try: u.urlopen('http://127.0.0.1:{port0}/'); sys.exit(0)\n"
        "    except OSError: time.sleep(0.05)\n"
        "sys.exit(1)\n"
    )
    specs = [http_server(tag), python_trainer(fetch, tag)]
    launchers = [
        start(specs, tmp_path / f"run{i}", "--ports", "3", "--base-port", str(base))
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=60)[0] for p in launchers]
    assert [p.returncode for p in launchers] == [0, 0], outputs
    taken = [set(out.splitlines()[0].split()[1:]) for out in outputs]
    assert len(taken[0]) == len(taken[1]) == 3
    assert not taken[0] & taken[1]
    assert survivors(tag, tmp_path) == []


# ----------------------------------------------------------------------------- plan files
def test_dry_run_text_shows_each_process_as_a_shell_line_with_secrets_masked():
    spec = ProcessSpec(
        "rollout-0",
        "rollout",
        "server",
        0,
        ("python", "-m", "vllm", "--chat-template", "a b"),
        env={"HF_TOKEN": "hf_secret"},
        gpus=(0, 1),
        health_url="http://@@AREAL_NODE_0@@:8000/health",
    )
    shown = materialize(spec, ["127.0.0.1"], ["3", "4"], "cuda", "r1")
    assert dry_run_text([shown]) == (
        "# rollout-0: server on node 0, gpus 0,1, health http://127.0.0.1:8000/health\n"
        "HF_TOKEN='***' CUDA_VISIBLE_DEVICES=3,4 AREAL_HOSTS=127.0.0.1 AREAL_LAUNCH_RUN=r1 \\\n"
        "  python -m vllm --chat-template 'a b'"
    )


def test_the_dry_run_says_first_which_folders_are_cleared_and_made_and_a_run_does_it(tmp_path):
    """A request's folders: the earlier records cleared, then every folder made, before any
    process starts (`{user}`: the user the run is, here this one)."""
    import dataclasses
    import getpass

    from launcher.runners import local
    from launcher.spec.request import USER, EngineAsk, Folders
    from tests.hand_requests import request_for

    old = tmp_path / "names" / getpass.getuser() / "exp" / "trial"
    old.mkdir(parents=True)
    folders = Folders((str(tmp_path / "files"),), (str(tmp_path / "names" / USER / "exp/trial"),))
    proc = ProcessSpec("t-0", "actor", "trainer", 0, (sys.executable, "-c", "pass"))
    request = dataclasses.replace(
        request_for(tmp_path / "run", [proc], num_nodes=1, device="cpu"),
        folders=folders,
        asks={"actor": EngineAsk(cpu=2, mem_gib=4, image="img", key="actor.resources")},
    )
    runner = local.Runner(local.Config(grace_period_s=3))
    shown = runner.dryrun(request)
    assert shown.startswith(
        f"# first: cleared {tmp_path}/names/{{user}}/exp/trial; made {tmp_path}/files\n"
    )
    assert runner.notes(request) == [
        "actor.resources: memory, image not honoured by the local runner (nothing is reserved on "
        "this machine, and nothing runs in a container)"
    ]  # its cpu is the processes' thread counts (set with the config)
    assert runner.run(request) == 0
    assert not old.exists() and (tmp_path / "files").is_dir()
    assert json.loads((tmp_path / "run" / "request.json").read_text())["folders"] == {
        "make": [str(tmp_path / "files")],
        "clear": [f"{tmp_path}/names/{{user}}/exp/trial"],
    }


def test_written_files_keep_secrets_and_are_readable_by_their_owner_only(tmp_path):
    path = write_private(tmp_path / "plan.json", json.dumps({"WANDB_API_KEY": "k-123"}))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["WANDB_API_KEY"] == "k-123"
