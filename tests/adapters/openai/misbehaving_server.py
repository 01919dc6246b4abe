"""A real HTTP server process that misbehaves on purpose, to test how gate meets a bad engine.

Usage: python misbehaving_server.py PORT MODE, MODE one of
  html      answers every request with an HTML page (not JSON)
  slow      lists a model, then never answers a completion in time
  crash     lists a model, then exits (status 1) on the first completion
  forks     lists a model and starts a child process in its own group (a worker), then serves
  silent    lists a model but states neither its vocabulary size nor its context length
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

PORT, MODE = int(sys.argv[1]), sys.argv[2]
MODELS = {"object": "list", "data": [{"id": "m", "owned_by": "test", "meta": {"n_vocab": 512, "n_ctx": 256}}]}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        sys.stderr.write("request\n")

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if MODE == "html":
            self._send(200, b"<html>hello</html>", "text/html")
        elif self.path in ("/health", "/v1/models"):
            models = {"object": "list", "data": [{"id": "m", "owned_by": "test"}]} if MODE == "silent" else MODELS
            self._send(200, json.dumps(models if self.path == "/v1/models" else {"status": "ok"}).encode())
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:
        if MODE == "slow":
            time.sleep(30)
        if MODE == "crash":
            sys.stderr.write("fatal: simulated abort in the decode loop\n")
            sys.stderr.flush()
            os._exit(1)
        self._send(200, b"<html>not json</html>", "text/html")


if MODE == "forks":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"worker pid {child.pid}", flush=True)
HTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
