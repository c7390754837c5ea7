"""A worker for tests of node groups: says where it runs, then serves /health until stopped
(and /score as the shipped reward worker's protocol has it, each text scored 0: the runs that
place it test where it runs, not what the policy learns).

It writes <run folder>/node-report/<component>-<index>.json: its host, Slurm's node name, the
Ray node it runs under (the --node-ip-address of the raylet above it), CUDA_VISIBLE_DEVICES
(null: unset), its interpreter, and every GROUP_* variable it was given; then answers
GET /health on AREAL_WORKER_HOST:AREAL_WORKER_PORT (the supervisor's probe) until SIGTERM.
Stdlib only: a node group's own interpreter may have nothing else.
"""

import http.server
import json
import os
import signal
import socket
import sys
from pathlib import Path


def ray_node_ip() -> "str | None":
    pid = os.getpid()
    while pid > 1:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            return None
        for arg in argv:
            if arg.startswith((b"--node_ip_address=", b"--node-ip-address=")):
                return arg.split(b"=", 1)[1].decode()
        pid = parent
    return None


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def do_POST(self) -> None:
        if self.path != "/score":
            self.send_response(404)
            self.end_headers()
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        answer = json.dumps({"rewards": [0.0] * len(body.get("texts", []))}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


def main() -> int:
    env = os.environ
    name = f"{env['AREAL_COMPONENT']}-{env['AREAL_WORKER_INDEX']}"
    report = {
        "host": socket.gethostname(),
        "slurm_node": env.get("SLURMD_NODENAME"),
        "ray_node_ip": ray_node_ip(),
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
        "python": sys.executable,
        "index": int(env["AREAL_WORKER_INDEX"]),
        "group_env": {k: v for k, v in env.items() if k.startswith("GROUP_")},
    }
    folder = Path(env["AREAL_RUN_DIR"]) / "node-report"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(report))
    print(f"{name}: {json.dumps(report)}", flush=True)
    server = http.server.HTTPServer(
        (env.get("AREAL_WORKER_HOST", "0.0.0.0"), int(env["AREAL_WORKER_PORT"])), Health
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
