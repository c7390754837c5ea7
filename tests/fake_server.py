"""A FAKE server, used only by the test for "a server never becomes healthy".

It listens like a real rollout server but answers 503 on every path, forever, so the launcher's
health deadline is what ends the run. Usage: python tests/fake_server.py PORT
"""

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class NeverHealthy(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(503)
        self.end_headers()
        self.wfile.write(b"FAKE server: never healthy\n")


if __name__ == "__main__":
    port = int(sys.argv[1])
    print(f"FAKE server listening on 127.0.0.1:{port}, never healthy", flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), NeverHealthy).serve_forever()
