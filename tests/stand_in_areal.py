"""A stand-in for AReaL in a venv of its own, for tests/test_other_entries.py: a plain venv
(`python -m venv --without-pip`, about a second), which sees this venv's packages through a
.pth file (torchrun needs torch where it runs, as AReaL's venv has it), plus a package only it
has (`areal_stand_in`, standard library only: a server wrapper like AReaL's vLLM one) and an
entry script outside the project that imports it first, as AReaL's examples import `areal`.
Both write what they saw (interpreter, prefix, environment, argv) where the test reads it."""
from __future__ import annotations

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
with open(os.path.join(os.environ["AREAL_RUN_DIR"], "server-seen.json"), "w") as f:
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
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
health = [opener.open(f"http://{a}/health", timeout=10).status for a in addrs.split(",") if a]
run_dir = os.environ["AREAL_RUN_DIR"]
seen = {"executable": sys.executable, "prefix": sys.prefix, "argv": sys.argv[1:],
        "spmd": os.environ.get("AREAL_SPMD_MODE"), "addrs": addrs, "health": health,
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


@dataclass(frozen=True)
class StandIn:
    venv: Path
    python: Path
    entry: Path


def make(where: Path) -> StandIn:
    """The venv, its package and the entry script under `where`."""
    venv = where / "areal-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=60)
    packages = next((venv / "lib").glob("python3*/site-packages"))
    (packages / "launcher-venv.pth").write_text("\n".join(site.getsitepackages()) + "\n")
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
