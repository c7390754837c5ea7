"""Every node's agent pays its imports before it starts anything (bench_scale: most of its CPU,
times the nodes): a run without a hang timeout imports no hang watch, a node whose preflight
checks no server imports no backend, torch or Hydra, and a console that is no terminal (a
Slurm task's log) is written without rich."""

import json
import subprocess
import sys
from pathlib import Path

from launcher.node.runs import write_private
from launcher.spec.process import ProcessSpec
from tests.hand_requests import request_for

ROOT = Path(__file__).resolve().parent.parent
OURS = ("launcher", "torch", "hydra", "omegaconf", "vllm", "sglang", "rich")
MODULES = f"sorted(m for m in sys.modules if m.split('.')[0] in {OURS!r})"
IMPORTED = f"import json, sys\nimport launcher.node.agent\nprint(json.dumps({MODULES}))\n"
# the agent's own process after a whole run of its node (its keeper and supervisor are forks)
RAN = (
    "import json, sys\n"
    "from launcher.node.agent import main\n"
    "code = main(sys.argv[1:])\n"
    f"print(json.dumps({MODULES}))\n"
    "sys.exit(code)\n"
)


def test_the_node_agent_imports_neither_the_hang_watches_nor_a_backend():
    done = subprocess.run(
        [sys.executable, "-c", IMPORTED], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(done.stdout))
    assert "launcher.node.supervisor" in modules and "launcher.node.tracebacks" in modules
    assert not modules & {"launcher.node.watchdog", "launcher.node.silence"}
    assert not [m for m in modules if m.startswith(("launcher.backends", "launcher.memory"))]
    assert not [m for m in modules if m.split(".")[0] in ("torch", "hydra", "omegaconf", "rich")]


def test_a_node_of_scripts_runs_on_a_plain_console_without_rich_or_a_backend(tmp_path):
    """A whole run of one node whose process is a plain script (a stand-in's shape): its
    lines and the summary reach the plain console, and neither the preflight nor the console
    imported rich or a backend (a `-m` argv alone may be torchrun's, which the backend reads)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    script = tmp_path / "hello.py"
    script.write_text("print('hello\\tfrom the node')\n")
    actor = ProcessSpec("actor", "actor", "trainer", 0, (sys.executable, str(script)))
    request = request_for(run_dir, [actor], num_nodes=1, device="cpu")
    write_private(run_dir / "request.json", request.to_json())
    done = subprocess.run(
        [sys.executable, "-c", RAN, str(run_dir / "request.json"), "--node", "0"]
        + ["--hosts", "127.0.0.1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    *shown, last = done.stdout.splitlines()
    assert "actor | hello   from the node" in shown, shown  # tabs expanded, as rich wrote them
    assert any(line.startswith("process  exit  duration  log") for line in shown), shown
    assert not [line for line in shown if line != line.rstrip()], shown  # no trailing blanks
    modules = set(json.loads(last))
    assert not [m for m in modules if m.split(".")[0] == "rich"], modules
    assert not [m for m in modules if m.startswith(("launcher.backends", "launcher.memory"))]
