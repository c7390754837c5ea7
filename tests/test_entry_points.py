"""A serving backend and a runner from another package, found through entry points only.

The package is written into tmp_path as an installed distribution would leave it (its
modules plus `echolm_pkg-0.1.dist-info/` with METADATA and entry_points.txt), no pip; a real
`python -m launcher.cli.main` subprocess with tmp_path on PYTHONPATH plans and dry-runs with
it. Nothing under launcher/ names it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BACKEND = '''
"""echolm: a serving backend of its own package (its record and its class); its server is a
stdlib HTTP server."""
from dataclasses import dataclass

from launcher.backends.kinds import ServeBackend
from launcher.backends.servers import ServerClient, ServerSet, listen_args
from launcher.spec.backend_facts import CARD_BUDGET, SERVE, BackendFacts, Install
from launcher.spec.plan import host_placeholder

FACTS = BackendFacts(
    "echolm", SERVE, "echolm_backend:EcholmBackend", dims="d", example="echolm:d1", order=9,
    install=Install("echolm_server", "put echolm on PYTHONPATH"), memory_model=CARD_BUDGET,
)


@dataclass
class EcholmOptions:
    greeting: str = "hello"


class EcholmBackend(ServeBackend[EcholmOptions]):
    facts = FACTS
    Options = EcholmOptions
    module = "echolm_server"
    client = ServerClient(health="/ping", release="/release", resume="/resume", release_flag="")
    refused = {"--port": "is set by the launcher"}

    def servers(self, comp, plan, engine, ctx):
        flags = self.user_flags(engine)
        out = ServerSet()
        for inst in comp.instances:
            node = inst.nodes[0]
            port = ctx.next_port()
            out.addrs.append(f"{host_placeholder(node)}:{port}")
            argv = [*self.argv_head(engine, ctx), *listen_args(node, port),
                    "--greeting", self.options_of(engine).greeting, *flags]
            env = self.env(engine, ctx, {})
            out.processes.append(self.server(plan, comp, inst, node, argv, env, (port,), port))
        return out
'''

SERVER = '''
"""echolm's server: answers its health path, says its greeting."""
import argparse
from http.server import BaseHTTPRequestHandler, HTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--host")
parser.add_argument("--port", type=int)
parser.add_argument("--greeting")
args = parser.parse_args()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(args.greeting.encode())


HTTPServer((args.host, args.port), Handler).serve_forever()
'''

RUNNER = '''
"""printrunner: runs on this machine like launcher=local, and says so in its dry run."""
from dataclasses import dataclass

from launcher.runners import LauncherBase
from launcher.runners import local


@dataclass
class Config(LauncherBase):
    _target_: str = "printrunner.Runner"
    banner: str = "PRINTRUNNER"


class Runner(local.Runner):
    name = "printrunner"

    def dryrun(self, request):
        return f"{self.config.banner} would start:\\n" + super().dryrun(request)
'''


def write_package(root: Path) -> None:
    """The modules and the dist-info folder an installed `echolm-pkg` would leave."""
    (root / "echolm_backend.py").write_text(textwrap.dedent(BACKEND))
    (root / "echolm_server.py").write_text(textwrap.dedent(SERVER))
    (root / "printrunner.py").write_text(textwrap.dedent(RUNNER))
    info = root / "echolm_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echolm-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[areal_launch.backends]\necholm = echolm_backend:FACTS\n\n"
        "[areal_launch.runners]\nprintrunner = printrunner\n"
    )


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(root), str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, "-m", "launcher.cli.main", *args],
        cwd=root,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_an_entry_point_backend_plans_and_an_entry_point_runner_dry_runs_it(tmp_path):
    write_package(tmp_path)
    engines = ("rollout.backend=echolm:d1", "actor=none", "rollout.echolm.greeting=howdy")

    out = cli(tmp_path, "plan", "--json", *engines)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["components"]["rollout"]["backend"] == "echolm"

    out = cli(tmp_path, "launcher=printrunner", "launcher.dry_run=true", *engines)
    assert out.returncode == 0, out.stderr
    assert "PRINTRUNNER would start:" in out.stdout
    server = next(line for line in out.stdout.splitlines() if "echolm_server" in line)
    assert "--greeting howdy" in server


def test_a_key_of_a_backend_that_cannot_be_loaded_names_why_not_an_unknown_key(tmp_path):
    """The package is installed but its module fails to import: a key of its section is not
    called unknown (the section is missing only because the module is), the load error is."""
    write_package(tmp_path)
    (tmp_path / "echolm_backend.py").write_text("import echolm_missing_dependency\n")
    out = cli(
        tmp_path, "plan", "rollout.backend=echolm:d1", "actor=none", "rollout.echolm.greeting=hi"
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    line = out.stderr.strip()
    assert "'rollout.echolm'" in line and "unknown config key" not in line, line
    assert "echolm_missing_dependency" in line and "ModuleNotFoundError" in line, line


def test_no_file_under_launcher_names_them():
    for path in (ROOT / "launcher").rglob("*"):
        if path.is_file() and path.suffix in (".py", ".yaml", ".txt", ".md"):
            text = path.read_text()
            assert "echolm" not in text and "printrunner" not in text, path
