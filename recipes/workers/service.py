"""What both shipped workers share: a JSON-over-HTTP service on the port the launcher gave it
($AREAL_WORKER_HOST, $AREAL_WORKER_PORT), GET /health, and offload between phases.

Stdlib only (no torch): a worker's process starts in well under a second on two cores.

Protocol (every body JSON):
  GET  /health   -> {"status": "ok", "state": "ready" | "offloaded", "name": "env-0"}
  POST /offload  -> {"state": "offloaded", "digest": D}: the state goes to a file in the run
                    folder and is dropped from memory (RLinf's offload between phases)
  POST /reload   -> {"state": "ready", "digest": D}: read back; D is the state's sha256, so the
                    caller confirms the reload brought back what was offloaded
  POST <path>    -> the worker's own calls; 409 while offloaded, 400 on a bad body
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional

Handler = Callable[[dict], dict]


class BadRequest(ValueError):
    """A body the call cannot use: answered 400 with the message."""


@dataclass
class Offloadable:
    """A worker's state as JSON-able data, which offload() writes out and drops and reload()
    reads back; `state` is None while offloaded."""

    spill: Path
    state: Optional[dict] = None
    spilled: str = ""  # the digest of what offload() wrote
    lock: threading.Lock = field(default_factory=threading.Lock)

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.state, sort_keys=True).encode()).hexdigest()

    def offload(self) -> dict:
        with self.lock:
            if self.state is not None:
                digest = self.digest()  # before it is dropped
                staging = self.spill.with_suffix(".partial")
                staging.parent.mkdir(parents=True, exist_ok=True)
                staging.write_text(json.dumps(self.state, sort_keys=True))
                os.replace(staging, self.spill)
                self.state, self.spilled = None, digest
            return {"state": "offloaded", "digest": self.spilled}

    def reload(self) -> dict:
        with self.lock:
            if self.state is None:
                self.state = json.loads(self.spill.read_text())
                self.spill.unlink()
            return {"state": "ready", "digest": self.digest()}


def stamp() -> str:
    """Wall-clock seconds, as the trainers log them too (one clock on one machine)."""
    return f"{time.time():.6f}"


def say(name: str, text: str) -> None:
    print(f"{name}: {text}", flush=True)


def serve(name: str, store: Offloadable, calls: dict[str, Handler]) -> int:
    """Answer on $AREAL_WORKER_HOST:$AREAL_WORKER_PORT until SIGTERM; exit 0 then."""
    host = os.environ.get("AREAL_WORKER_HOST") or "127.0.0.1"
    port = int(os.environ.get("AREAL_WORKER_PORT") or "0")

    class Handle(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: Any) -> None:  # one line per call is ours
            pass

        def _reply(self, code: int, body: dict) -> None:
            raw = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/health":
                return self._reply(404, {"error": f"no GET {self.path}"})
            state = "offloaded" if store.state is None else "ready"
            self._reply(200, {"status": "ok", "state": state, "name": name})

        def do_POST(self) -> None:
            path = self.path.split("?")[0]
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                if not isinstance(body, dict):
                    raise BadRequest("the body is a JSON object")
                if path == "/offload":
                    out = store.offload()
                    say(name, f"offloaded (digest {out['digest'][:12]}) at {stamp()}")
                    return self._reply(200, out)
                if path == "/reload":
                    out = store.reload()
                    say(name, f"reloaded (digest {out['digest'][:12]}) at {stamp()}")
                    return self._reply(200, out)
                if path not in calls:
                    return self._reply(
                        404, {"error": f"no POST {path}; calls: {', '.join(sorted(calls))}"}
                    )
                if store.state is None:
                    return self._reply(409, {"error": f"{name} is offloaded: POST /reload"})
                self._reply(200, calls[path](body))
            except (BadRequest, ValueError, KeyError, TypeError) as exc:
                self._reply(400, {"error": f"{path}: {type(exc).__name__}: {exc}"})

    server = ThreadingHTTPServer((host, port), Handle)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    say(name, f"listening on {host}:{server.server_address[1]}")
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    say(name, "stopped")
    return 0


def identity() -> tuple[str, Path]:
    """This process's name (env-0) and where its offloaded state goes (the run folder)."""
    name = (
        f"{os.environ.get('AREAL_COMPONENT') or Path(sys.argv[0]).stem}-"
        f"{os.environ.get('AREAL_WORKER_INDEX', '0')}"
    )
    run_dir = Path(os.environ.get("AREAL_RUN_DIR") or ".")
    return name, run_dir / "workers" / f"{name}.offloaded.json"
