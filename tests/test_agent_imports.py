"""Every node's agent pays its imports before it starts anything (bench_scale: ~0.2 s of its
~0.3 s of CPU, times the nodes): a run without a hang timeout imports no hang watch, and a
node whose preflight checks no server imports no backend, torch or Hydra."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

IMPORTED = (
    "import json, sys\n"
    "import launcher.node.agent\n"
    "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
    "('launcher', 'torch', 'hydra', 'omegaconf', 'vllm', 'sglang'))))\n"
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
    assert not [m for m in modules if m.split(".")[0] in ("torch", "hydra", "omegaconf")]
