"""The local runner with real processes: torchrun on gloo, a vLLM CPU server, real signals.

"Nothing left behind" is checked from outside, independently of the runner's own bookkeeping:
a process of a test's run is one whose environment holds TEST_RUN_TAG=<uuid> (set in spec.env,
inherited by descendants) or that holds a file open under the test's folder (every process of a
run inherits its log file as stdout). The second catches processes that clear their environ, as
vLLM's engine core does (setproctitle).
"""
import io
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from rich.console import Console

from launcher.cluster import ClusterSpec
from launcher.plan import Plan, ProcessSpec
from launcher.runners.keeper import MARKER_VAR
from launcher.runners.local import RunResult, dry_run_text, supervise, write_plan
from launcher.runners.ports import PortReserver
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


@pytest.fixture
def ports():
    with PortReserver() as r:
        yield r


def http_server(port: int, tag: str, name: str = "rollout-0") -> ProcessSpec:
    """A real HTTP server (stdlib), for tests about supervision rather than about vLLM."""
    return ProcessSpec(name, "rollout", "server", 0,
                       (PY, "-m", "http.server", str(port), "--bind", "127.0.0.1"),
                       env={"TEST_RUN_TAG": tag}, health_url=f"http://127.0.0.1:{port}/")


def python_trainer(code: str, tag: str, name: str = "actor", **env: str) -> ProcessSpec:
    return ProcessSpec(name, "actor", "trainer", 0, (PY, "-c", code),
                       env={"TEST_RUN_TAG": tag, **env})


def torchrun(tag: str, master_port, name: str = "actor", **env: str) -> ProcessSpec:
    return ProcessSpec(name, "actor", "trainer", 0,
                       (PY, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--master-addr", "127.0.0.1", "--master-port", str(master_port),
                        TRAINER),
                       env={"TEST_RUN_TAG": tag, "OMP_NUM_THREADS": "1",
                            "AREAL_COMPONENT": "actor", **env})


def driver_server(tag: str) -> ProcessSpec:
    """http.server on the driver's first reserved port ("{port0}", filled in by the driver)."""
    return ProcessSpec("rollout-0", "rollout", "server", 0,
                       (PY, "-m", "http.server", "{port0}", "--bind", "127.0.0.1"),
                       env={"TEST_RUN_TAG": tag}, health_url="http://127.0.0.1:{port0}/")


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200, force_terminal=False)


def printed(console: Console) -> str:
    return console.file.getvalue()


def run_driver(specs, run_dir: Path, *args: str) -> subprocess.Popen:
    spec_file = run_dir.parent / f"{run_dir.name}-specs.json"
    spec_file.write_text(json.dumps([s.to_dict() for s in specs]))
    return subprocess.Popen([PY, DRIVER, str(spec_file), str(run_dir), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


# ----------------------------------------------------------------------------- vLLM
def vllm_server(model: str, port: int, tag: str) -> ProcessSpec:
    return ProcessSpec(
        "rollout-0", "rollout", "server", 0,
        (PY, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
         "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
         "--max-model-len", "256", "--enforce-eager", "--served-model-name", "tiny"),
        env={"TEST_RUN_TAG": tag, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"},
        ports=(port,), health_url=f"http://127.0.0.1:{port}/health")


@pytest.mark.vllm
@pytest.mark.torch
@pytest.mark.timeout(600)
def test_torchrun_trainer_reaches_real_vllm_server_and_run_exits_0(tmp_path, tag, ports,
                                                                   tiny_model):
    server_port, master_port = ports.take(), ports.take()
    console = quiet()
    result = supervise([vllm_server(tiny_model, server_port, tag),
                        torchrun(tag, master_port,
                                 AREAL_LLM_SERVER_ADDRS=f"127.0.0.1:{server_port}")],
                       tmp_path, grace_period_s=10, health_timeout_s=500, console=console)
    assert result == RunResult(0, None, "every trainer exited 0", [])
    trainer_log = (tmp_path / "logs" / "actor.log").read_text()
    for rank in (0, 1):
        assert f"rank {rank} reached http://127.0.0.1:{server_port}: models ['tiny']" \
            in trainer_log
    assert "GET /v1/models" in (tmp_path / "logs" / "rollout-0.log").read_text()
    assert "actor     | rank 0" in printed(console)
    assert survivors(tag, tmp_path) == []


@pytest.mark.vllm
@pytest.mark.torch
@pytest.mark.timeout(600)
def test_real_vllm_server_killed_mid_run_stops_everything_and_is_named(tmp_path, tag, ports,
                                                                       tiny_model):
    server_port, master_port = ports.take(), ports.take()
    log = tmp_path / "logs" / "actor.log"
    killed = {}

    def kill_server_when_trainers_hold():
        held = wait_until(lambda: log.exists() and log.read_text().count("holding") == 2, 500)
        api = [p for p in survivors(tag, tmp_path)
               if os.stat(f"/proc/{p}").st_uid == os.getuid()
               and "api_server" in Path(f"/proc/{p}/cmdline").read_text()
               and int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
               == os.getpid()]
        killed["count_before"] = len(survivors(tag, tmp_path))
        if held and api:
            os.kill(api[0], signal.SIGKILL)
        else:  # end the run now, so the asserts below say what went wrong
            kill_all(survivors(tag, tmp_path))

    threading.Thread(target=kill_server_when_trainers_hold, daemon=True).start()
    result = supervise([vllm_server(tiny_model, server_port, tag),
                        torchrun(tag, master_port, HOLD_S="600",
                                 AREAL_LLM_SERVER_ADDRS=f"127.0.0.1:{server_port}")],
                       tmp_path, grace_period_s=10, health_timeout_s=500, console=quiet())
    # api server + its engine core, torchrun + 2 workers were all up when the server died
    assert killed["count_before"] >= 5
    assert result.root_cause == "rollout-0"
    assert result.exit_code == 1
    assert result.root_cause == "rollout-0"
    assert result.reason == "rollout-0 killed by SIGKILL before the trainers finished"
    assert result.tail
    assert survivors(tag, tmp_path) == []


# ----------------------------------------------------------------------------- faults
@pytest.mark.torch
@pytest.mark.timeout(300)
def test_trainer_rank_raising_stops_the_servers_and_names_the_trainer(tmp_path, tag, ports):
    console = quiet()
    result = supervise([http_server(ports.take(), tag), torchrun(tag, ports.take(),
                                                                 FAIL_RANK="1")],
                       tmp_path, grace_period_s=10, console=console)
    assert result.exit_code == 1
    assert result.root_cause == "actor"
    assert result.reason == "actor exited with code 1"
    assert "RuntimeError: rank 1 fails on purpose" in (tmp_path / "logs" / "actor.log").read_text()
    assert any("Root Cause" in line for line in result.tail)  # torchrun's summary ends the log
    assert "root cause: actor exited with code 1" in printed(console)
    assert survivors(tag, tmp_path) == []


def test_server_that_never_becomes_healthy_fails_the_run_at_its_deadline(tmp_path, tag,
                                                                         ports):
    port = ports.take()
    fake = ProcessSpec("rollout-0", "rollout", "server", 0, (PY, FAKE_SERVER, str(port)),
                       env={"TEST_RUN_TAG": tag}, health_url=f"http://127.0.0.1:{port}/health")
    begun = time.monotonic()
    result = supervise([fake, python_trainer("import time; time.sleep(600)", tag)], tmp_path,
                       grace_period_s=5, health_timeout_s=3, console=quiet())
    assert result.exit_code == 1
    assert result.root_cause == "rollout-0"
    assert result.reason == "rollout-0 not healthy after 3 s"
    assert any("FAKE server" in line for line in result.tail)
    assert time.monotonic() - begun >= 3
    assert survivors(tag, tmp_path) == []


def test_server_exiting_before_trainers_finish_fails_the_run(tmp_path, tag):
    server = ProcessSpec("rollout-0", "rollout", "server", 0,
                         (PY, "-c", "import sys; print('out of memory'); sys.exit(3)"),
                         env={"TEST_RUN_TAG": tag}, health_url="http://127.0.0.1:9/health")
    result = supervise([server, python_trainer("import time; time.sleep(600)", tag)],
                       tmp_path, grace_period_s=5, console=quiet())
    assert result == RunResult(1, "rollout-0",
                               "rollout-0 exited with code 3 before the trainers finished",
                               ["out of memory"])
    assert survivors(tag, tmp_path) == []


def test_trainer_killed_by_a_signal_is_reported_by_signal_name(tmp_path, tag):
    result = supervise([python_trainer("import os, signal; os.kill(os.getpid(), "
                                       "signal.SIGSEGV)", tag)],
                       tmp_path, grace_period_s=5, console=quiet())
    assert (result.exit_code, result.root_cause, result.reason) == \
        (1, "actor", "actor killed by SIGSEGV")


def test_process_that_cannot_start_fails_the_run_and_stops_the_others(tmp_path, tag, ports):
    missing = ProcessSpec("actor", "actor", "trainer", 0, ("/nonexistent/torchrun",),
                          env={"TEST_RUN_TAG": tag})
    result = supervise([http_server(ports.take(), tag), missing], tmp_path,
                       grace_period_s=5, console=quiet())
    assert (result.exit_code, result.root_cause) == (1, "actor")
    assert result.reason.startswith("actor could not start: [Errno 2]")
    assert survivors(tag, tmp_path) == []


# ----------------------------------------------------------------------------- normal runs
def test_every_trainer_exiting_0_stops_the_servers_and_exits_0(tmp_path, tag, ports):
    port = ports.take()
    fetch = ("import os, time, urllib.request as u\n"
             "for _ in range(100):\n"
             "    try:\n"
             f"        print('got', u.urlopen('http://127.0.0.1:{port}/').status); break\n"
             "    except OSError: time.sleep(0.1)\n"
             "print('secret is', os.environ['HF_TOKEN'], 'run', os.environ['" + MARKER_VAR
             + "'] != '')\n")
    console = quiet()
    result = supervise([http_server(port, tag), python_trainer(fetch, tag, HF_TOKEN="s3")],
                       tmp_path, grace_period_s=5, console=console)
    assert result == RunResult(0, None, "every trainer exited 0", [])
    assert (tmp_path / "logs" / "actor.log").read_text() == "got 200\nsecret is s3 run True\n"
    assert '"GET / HTTP/1.1" 200' in (tmp_path / "logs" / "rollout-0.log").read_text()
    out = printed(console)
    assert "actor     | got 200" in out
    assert "rollout-0 | " in out
    assert survivors(tag, tmp_path) == []


def test_only_processes_of_the_given_node_start(tmp_path, tag):
    here = python_trainer("print('node 0')", tag, name="actor-node0")
    there = ProcessSpec("actor-node1", "actor", "trainer", 1, (PY, "-c", "print('node 1')"),
                        env={"TEST_RUN_TAG": tag})
    result = supervise([here, there], tmp_path, console=quiet(), node=0)
    assert result.exit_code == 0
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["actor-node0.log"]


def test_keeper_kills_only_processes_with_the_run_marker(tmp_path):
    """The keeper alone: close its pipe as a dying launcher would; unmarked processes live."""
    from launcher.runners import keeper

    run_id = uuid.uuid4().hex
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
               "print('ready', flush=True); time.sleep(600)"
    marked = subprocess.Popen([PY, "-c", stubborn], start_new_session=True,
                              stdout=subprocess.PIPE, env={**os.environ, MARKER_VAR: run_id})
    bystander = subprocess.Popen([PY, "-c", stubborn], stdout=subprocess.PIPE,
                                 env={**os.environ, MARKER_VAR: "another-run"})
    try:
        assert marked.stdout.readline() == bystander.stdout.readline() == b"ready\n"
        assert keeper.run_pids(run_id, {}) == [marked.pid]
        read_end, write_end = os.pipe()
        guard = subprocess.Popen([PY, "-I", "-S", keeper.__file__, run_id, "0.5"],
                                 stdin=read_end, start_new_session=True)
        os.close(read_end)
        os.close(write_end)
        assert guard.wait(timeout=10) == 0
        assert marked.wait(timeout=5) == -signal.SIGKILL  # ignored TERM, so KILL after grace
        assert bystander.poll() is None
    finally:
        bystander.kill()
        marked.kill()
        bystander.wait()
        marked.wait()


def test_keeper_kills_a_started_session_even_where_environ_was_cleared():
    """vLLM's engine core clears its environ (setproctitle): the session still names it.
    A session whose leader has another start time (a recycled pid) is left alone."""
    from launcher.runners import keeper

    spawn = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
             "'import time; time.sleep(600)'], env={}); print('ready', flush=True); "
             "time.sleep(600)")
    ours = subprocess.Popen([PY, "-c", spawn], start_new_session=True, env={},
                            stdout=subprocess.PIPE)
    other = subprocess.Popen([PY, "-c", spawn], start_new_session=True, env={},
                             stdout=subprocess.PIPE)
    try:
        assert ours.stdout.readline() == other.stdout.readline() == b"ready\n"
        sessions = {ours.pid: keeper.start_time(ours.pid),
                    other.pid: keeper.start_time(other.pid) + 1}  # "a recycled pid"
        members = keeper.run_pids("no-marker-anywhere", sessions)
        assert len(members) == 2 and ours.pid in members and other.pid not in members
        read_end, write_end = os.pipe()
        guard = subprocess.Popen([PY, "-I", "-S", keeper.__file__, "no-marker", "2"],
                                 stdin=read_end, start_new_session=True)
        os.close(read_end)
        for pid, start in sessions.items():
            os.write(write_end, f"{pid} {start}\n".encode())
        os.close(write_end)
        assert guard.wait(timeout=10) == 0
        assert ours.wait(timeout=5) == -signal.SIGTERM
        assert keeper.run_pids("no-marker-anywhere", {ours.pid: sessions[ours.pid]}) == []
        assert other.poll() is None
    finally:
        for p in (ours, other):
            for pid in keeper.run_pids("none", {p.pid: keeper.start_time(p.pid)}
                                       if p.poll() is None else {}):
                os.kill(pid, signal.SIGKILL)
            p.kill()
            p.wait()


# ----------------------------------------------------------------------------- the launcher
def test_sigterm_to_the_launcher_stops_everything_with_exit_143(tmp_path, tag):
    run_dir = tmp_path / "run"
    launcher = run_driver([driver_server(tag),
                           python_trainer("import time; time.sleep(600)", tag)],
                          run_dir, "--ports", "1", "--grace", "5")
    assert wait_until(lambda: len(survivors(tag, tmp_path)) == 2, 30)
    begun = time.monotonic()
    launcher.send_signal(signal.SIGTERM)
    output = launcher.communicate(timeout=30)[0]
    assert launcher.returncode == 143
    assert time.monotonic() - begun < 5 + 3
    assert "launcher got SIGTERM; run stopped" in output
    assert survivors(tag, tmp_path) == []


def test_ctrl_c_stops_a_server_only_run_with_exit_130(tmp_path, tag):
    launcher = run_driver([driver_server(tag)], tmp_path / "run", "--ports", "1",
                          "--grace", "5")
    assert wait_until(lambda: survivors(tag, tmp_path), 30)
    time.sleep(1.5)  # a server-only run keeps running: it is still up a while later
    assert launcher.poll() is None
    launcher.send_signal(signal.SIGINT)
    output = launcher.communicate(timeout=30)[0]
    assert launcher.returncode == 130
    assert "launcher got SIGINT" in output
    assert survivors(tag, tmp_path) == []


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_sigkill_of_the_launcher_takes_every_process_with_it(tmp_path, tag):
    run_dir = tmp_path / "run"
    launcher = run_driver([driver_server(tag), torchrun(tag, "{port1}", HOLD_S="600")],
                          run_dir, "--ports", "2", "--grace", "10")
    log = run_dir / "logs" / "actor.log"
    assert wait_until(lambda: log.exists() and log.read_text().count("holding") == 2, 200)
    before = survivors(tag, tmp_path)
    assert len(before) >= 4  # http.server, torchrun, 2 workers (in sessions of their own)
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=10)
    assert wait_until(lambda: not survivors(tag, tmp_path), 5), survivors(tag, tmp_path)


def test_sigkill_of_the_launcher_takes_descendants_that_cleared_their_environ(tmp_path, tag):
    """A grandchild with an empty environ in the started session, and one with an empty
    environ in a session of its own (found through its parent): both go with the launcher."""
    spawn = ("import subprocess, sys, time\n"
             "for new in (False, True):\n"
             "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
             " env={}, start_new_session=new)\n"
             "print('spawned', flush=True); time.sleep(600)\n")
    run_dir = tmp_path / "run"
    launcher = run_driver([driver_server(tag), python_trainer(spawn, tag)], run_dir,
                          "--ports", "1", "--grace", "10")
    log = run_dir / "logs" / "actor.log"
    assert wait_until(lambda: log.exists() and "spawned" in log.read_text(), 30)
    assert len(survivors(tag, tmp_path)) == 4  # server, trainer, its two children
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=10)
    assert wait_until(lambda: not survivors(tag, tmp_path), 5), survivors(tag, tmp_path)


def test_two_launches_at_once_get_disjoint_ports_and_both_finish(tmp_path, tag):
    with PortReserver() as r:
        base = r.take()
    fetch = ("import sys, time, urllib.request as u\n"
             "for _ in range(200):\n"
             "    try: u.urlopen('http://127.0.0.1:{port0}/'); sys.exit(0)\n"
             "    except OSError: time.sleep(0.05)\n"
             "sys.exit(1)\n")
    specs = [driver_server(tag),
             ProcessSpec("actor", "actor", "trainer", 0, (PY, "-c", fetch),
                         env={"TEST_RUN_TAG": tag})]
    launchers = [run_driver(specs, tmp_path / f"run{i}", "--ports", "3",
                            "--base-port", str(base)) for i in range(2)]
    outputs = [p.communicate(timeout=60)[0] for p in launchers]
    assert [p.returncode for p in launchers] == [0, 0], outputs
    taken = [set(out.splitlines()[0].split()[1:]) for out in outputs]
    assert len(taken[0]) == len(taken[1]) == 3
    assert not taken[0] & taken[1]
    assert survivors(tag, tmp_path) == []


# ----------------------------------------------------------------------------- plan files
def test_dry_run_text_shows_each_process_as_a_shell_line_with_secrets_masked():
    spec = ProcessSpec("rollout-0", "rollout", "server", 0,
                       ("python", "-m", "vllm", "--chat-template", "a b"),
                       env={"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": "hf_secret"},
                       gpus=(0, 1), health_url="http://127.0.0.1:8000/health")
    assert dry_run_text([spec]) == (
        "# rollout-0: server on node 0, gpus 0,1, health http://127.0.0.1:8000/health\n"
        "CUDA_VISIBLE_DEVICES=0,1 HF_TOKEN='***' \\\n"
        "  python -m vllm --chat-template 'a b'")


def test_written_plan_keeps_secrets_and_is_readable_by_its_owner_only(tmp_path):
    spec = ProcessSpec("actor", "actor", "trainer", 0, ("torchrun",),
                       env={"WANDB_API_KEY": "k-123"})
    plan = Plan(ClusterSpec(1, 1, "cpu"), "collocated", {}, processes=(spec,))
    path = write_plan(plan, tmp_path / "run")
    assert path == tmp_path / "run" / "plan.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["processes"][0]["env"]["WANDB_API_KEY"] == "k-123"
