"""A FAKE rollout server that records every call it gets, for the memory-phase tests.

CPU cannot show GPU memory being released (vLLM's CPU build refuses sleep mode and SGLang has
no CPU build here), so what these tests can check is the calls a real engine would get and
their order: each request is appended to a shared journal as (server address, METHOD path)
and answered with the smallest JSON the recipe's client accepts. It does no inference.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWERS: dict[str, Any] = {  # path (query dropped) -> body; anything else: {}
    "/v1/completions": {
        "choices": [
            {
                "index": 0,
                "text": " one two",
                "token_ids": [5, 6],
                "prompt_token_ids": [1, 4],
                "logprobs": {"token_logprobs": [-0.1, -0.2]},
            }
        ]
    },
    "/update_weights_from_disk": {"success": True},
    "/weight_info": {"weight_version": None},
}


class RecordingServer:
    """One FAKE server on 127.0.0.1 (a free port), writing into `journal` (shared by several
    servers, so the order across servers is kept too)."""

    def __init__(self, journal: list[tuple[str, str]]) -> None:
        self.journal = journal
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                owner.journal.append((owner.addr, f"{self.command} {self.path}"))
                body = json.dumps(ANSWERS.get(self.path.split("?")[0], {})).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = f"127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
