"""A stand-in for AReaL in a venv of its own, for tests/test_other_entries.py: a plain venv
(`python -m venv --without-pip`, about a second), which sees this venv's packages through a
.pth file (torchrun needs torch where it runs, as AReaL's venv has it), plus a package only it
has (`areal_stand_in`, standard library only: a server wrapper like AReaL's vLLM one) and an
entry script outside the project that imports it first, as AReaL's examples import `areal`.
Both write what they saw (interpreter, prefix, environment, argv) where the test reads it.

Every process the stand-in's interpreter runs inside a launcher run (one with $AREAL_RUN_DIR:
servers, torchrun and its ranks, workers, whatever they spawn) also writes
`<run folder>/python-seen/<pid>.json` at start-up (a .pth hook, `python_seen`), so the runs on
Slurm and Ray can show which of their processes ran under it (`seen_by`)."""

from __future__ import annotations

import json
import site
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "areal_stand_in"

SERVER = '''
"""Answers /health on --host/--port like a server wrapper; records how it was started."""
import argparse, http.server, json, os, sys

ap = argparse.ArgumentParser()
ap.add_argument("--host")
ap.add_argument("--port", type=int)
args, rest = ap.parse_known_args()
component = os.environ.get("AREAL_COMPONENT", "rollout")  # a teacher's: server-seen-teacher.json
name = "server-seen.json" if component == "rollout" else f"server-seen-{component}.json"
with open(os.path.join(os.environ["AREAL_RUN_DIR"], name), "w") as f:
    json.dump({"executable": sys.executable, "prefix": sys.prefix, "argv": sys.argv[1:]}, f)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *a):
        pass


http.server.HTTPServer((args.host, args.port), Health).serve_forever()
'''

ENTRY = '''
"""A trainer entry of someone else's: imports its own package first, as AReaL's do."""
import json
import os
import sys
import urllib.request

import areal_stand_in  # noqa: F401  (only the stand-in venv has it)

addrs = os.environ.get("AREAL_LLM_SERVER_ADDRS", "")
teacher = os.environ.get("AREAL_TEACHER_ADDRS", "")  # AReaL 2.0's served teacher, when planned
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
health = [opener.open(f"http://{a}/health", timeout=10).status for a in addrs.split(",") if a]
teacher_health = [opener.open(f"http://{a}/health", timeout=10).status
                  for a in teacher.split(",") if a]
run_dir = os.environ["AREAL_RUN_DIR"]
seen = {"executable": sys.executable, "prefix": sys.prefix, "argv": sys.argv[1:],
        "spmd": os.environ.get("AREAL_SPMD_MODE"), "addrs": addrs, "health": health,
        "teacher": teacher, "teacher_health": teacher_health,
        "rank": os.environ.get("RANK"),
        "folders": {d: os.path.isdir(os.path.join(run_dir, d)) for d in ("", "name_resolve")}}
with open(os.path.join(run_dir, f"entry-seen-{os.environ['RANK']}.json"), "w") as f:
    json.dump(seen, f)
'''

WORKER = '''
"""A worker of someone else's: records how it was started, then runs until stopped."""
import json, os, sys, time

with open(os.path.join(os.environ["AREAL_RUN_DIR"], "worker-seen.json"), "w") as f:
    json.dump({"executable": sys.executable, "prefix": sys.prefix}, f)
while True:
    time.sleep(1)
'''

# Imported at start-up by the .pth line below: cheap (os and sys are loaded already; json only
# inside a run) and never raising, so no process under this interpreter fails because of it.
SEEN = '''
"""Records how this interpreter was started, when it runs inside a launcher run."""
import os
import sys


def _record():
    run_dir = os.environ.get("AREAL_RUN_DIR")
    if not run_dir:
        return
    import json
    folder = os.path.join(run_dir, "python-seen")
    os.makedirs(folder, exist_ok=True)
    seen = {"executable": sys.executable, "prefix": sys.prefix, "argv": sys.argv,
            "orig_argv": getattr(sys, "orig_argv", None), "rank": os.environ.get("RANK"),
            "component": os.environ.get("AREAL_COMPONENT"),
            "process": os.environ.get("AREAL_LAUNCH_PROCESS")}
    path = os.path.join(folder, f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(seen, f)
    os.replace(path + ".tmp", path)


try:
    _record()
except Exception:
    pass
'''
SEEN_FOLDER = "python-seen"


@dataclass(frozen=True)
class StandIn:
    venv: Path
    python: Path
    entry: Path


def make(where: Path) -> StandIn:
    """The venv, its package and the entry script under `where`."""
    venv = where / "areal-venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    packages = next((venv / "lib").glob("python3*/site-packages"))
    (packages / "launcher-venv.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    (packages / "python_seen.py").write_text(textwrap.dedent(SEEN))
    (packages / "python-seen.pth").write_text("import python_seen\n")
    (packages / PACKAGE).mkdir()
    (packages / PACKAGE / "__init__.py").write_text('"""AReaL, as far as a test needs."""\n')
    (packages / PACKAGE / "server.py").write_text(textwrap.dedent(SERVER))
    (packages / PACKAGE / "worker.py").write_text(textwrap.dedent(WORKER))
    # a module whose own first import is missing everywhere: the preflight finds its file
    (packages / PACKAGE / "needs_more.py").write_text("import not_installed_anywhere\n")
    entry = where / "examples" / "gsm8k_like.py"
    entry.parent.mkdir()
    entry.write_text(textwrap.dedent(ENTRY))
    return StandIn(venv, venv / "bin" / "python", entry)


def seen_by(run_dir: Path) -> list[dict]:
    """What each process the stand-in's interpreter ran in the run at `run_dir` recorded."""
    return [json.loads(p.read_text()) for p in sorted((run_dir / SEEN_FOLDER).glob("*.json"))]


def assert_ran_under(
    stand_in: StandIn,
    seen: list[dict],
    ranks: int = 2,
    server_module: str = "",
    also: frozenset[str] = frozenset(),
) -> None:
    """`seen` (seen_by of a run) shows the actor's torchrun and its `ranks` ranks under the
    stand-in's interpreter, and the rollout server running `server_module` under it too ("":
    the server ran under another one), and nothing of any other component but `also`."""
    assert seen, "no process of the run ran under the stand-in's interpreter"
    assert {(s["executable"], s["prefix"]) for s in seen} == {
        (str(stand_in.python), str(stand_in.venv))
    }
    actor = [s for s in seen if "actor" in (s["component"] or "").split(",")]
    assert any("torch.distributed.run" in s["orig_argv"] for s in actor), actor
    assert sorted({s["rank"] for s in actor if s["rank"] is not None}) == [
        str(r) for r in range(ranks)
    ], actor
    if server_module:
        assert any(s["component"] == "rollout" and server_module in s["orig_argv"] for s in seen), (
            seen
        )
    assert {s["component"] for s in seen} == {"actor", "rollout"} - (
        set() if server_module else {"rollout"}
    ) | also, seen
