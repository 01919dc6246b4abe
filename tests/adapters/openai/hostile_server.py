"""A real OpenAI-compatible HTTP server on 127.0.0.1 that lies, hangs or snoops, to test how gate meets it.

Usage: python hostile_server.py PORT MODE [--no-cache]. It serves /health, /v1/models and
/v1/completions in llama.cpp's id-carrying logprobs shape; greedy tokens are a function of the
prompt and it keeps a real prefix cache of what it was sent (cached tokens: the longest prefix a
prompt shares with an earlier prompt and its reply, one less when the whole prompt is cached),
reported in usage.prompt_tokens_details.cached_tokens; --no-cache turns it off (a reference).
MODE says how it misbehaves:

  honest              nothing: the replies a correct engine gives
  env                 honest, and GET /env answers the server's own environment as JSON
  nan                 every logprob is NaN (JSON `NaN`)
  cached-negative     reports -5 cached tokens
  cached-huge         reports 10**9 cached tokens
  cached-over-prompt  reports 3 more cached tokens than the prompt has
  cached-beyond       reports the whole prompt as cached from the second request on (more than it shares)
  cached-first        reports half the prompt as cached on every request, the very first included
  drip-body           sends a completion's headers, then its body one byte every 0.05 s
  drip-headers        sends a completion's status line and headers one byte every 0.05 s
  endless-sse         a streamed completion sends an event every 0.02 s and never ends
  inject              answers a completion with HTTP 400 whose body forges a GitHub workflow command
                      and terminal escapes
  malformed-logprob   a logprob that is a string
  malformed-usage     `usage` is a list
  malformed-choices   `choices` is a string
  malformed-cached    cached_tokens is a string
  short               one token fewer than asked for
  vocab-huge          /v1/models states a vocabulary of "lots" tokens
  not-http            answers a completion with a line that is not an HTTP status line

The process ends by itself after LIFETIME_S seconds, whatever happens to the test that started it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PORT, MODE = int(sys.argv[1]), sys.argv[2]
NO_CACHE = "--no-cache" in sys.argv[3:]
LIFETIME_S = 90.0
VOCAB = 512
INJECTED = "bad request\n::notice title=gate verdict::PASS injected\r::error::forged\x1b[2K\x1b[1A\x1b[31mred"
SEEN: list[list[int]] = []
LOCK = threading.Lock()


def models() -> dict[str, Any]:
    vocab: Any = "lots" if MODE == "vocab-huge" else VOCAB
    return {"object": "list", "data": [{"id": "hostile", "owned_by": "test", "meta": {"n_vocab": vocab, "n_ctx": 256}}]}


def shared(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def cached_for(prompt: list[int], first: bool) -> Any:
    """The count this mode reports for a prompt (what an honest prefix cache would reuse, or a lie)."""
    with LOCK:
        honest = 0 if NO_CACHE else max((shared(prompt, seen) for seen in SEEN), default=0)
    honest = min(honest, len(prompt) - 1)
    lies: dict[str, Any] = {
        "cached-negative": -5,
        "cached-huge": 10**9,
        "cached-over-prompt": len(prompt) + 3,
        "cached-beyond": honest if first else len(prompt),
        "cached-first": len(prompt) // 2,
        "malformed-cached": "many",
    }
    return lies.get(MODE, honest)


def completion(prompt: list[int], max_tokens: int, top_k: int) -> tuple[dict[str, Any], list[int]]:
    with LOCK:
        first = not SEEN
    cached = cached_for(prompt, first)
    base = sum(prompt) * 31
    n = max_tokens - 1 if MODE == "short" else max_tokens
    tokens = [3 + (base + 7 * i) % (VOCAB - 3) for i in range(n)]
    content = []
    for i, token in enumerate(tokens):
        logprob: Any = float("nan") if MODE == "nan" else -0.125
        if MODE == "malformed-logprob" and i == 1:
            logprob = "high"
        others = [3 + (token + 1 + j) % (VOCAB - 3) for j in range(top_k - 1)]
        top = [{"id": token, "logprob": logprob}] + [{"id": t, "logprob": -3.0 - j} for j, t in enumerate(others)]
        content.append({"id": token, "logprob": logprob, "top_logprobs": top})
    usage: Any = {
        "prompt_tokens": len(prompt),
        "completion_tokens": len(tokens),
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    if MODE == "malformed-usage":
        usage = [usage]
    choices: Any = [{"text": "", "index": 0, "logprobs": {"content": content}, "finish_reason": "length"}]
    if MODE == "malformed-choices":
        choices = "none"
    return {"object": "text_completion", "model": "hostile", "choices": choices, "usage": usage}, tokens


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        sys.stderr.write(f"request {self.command} {self.path}\n")

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, b'{"status": "ok"}')
        elif self.path == "/v1/models":
            self._send(200, json.dumps(models()).encode())
        elif self.path == "/env" and MODE == "env":
            self._send(200, json.dumps(dict(os.environ)).encode())
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        prompt = [int(t) for t in request.get("prompt", [])]
        top_k = int(request.get("n_probs") or request.get("logprobs") or 1)
        reply, tokens = completion(prompt, int(request.get("max_tokens", 1)), top_k)
        with LOCK:
            SEEN.append(prompt + tokens)
        body = json.dumps(reply).encode()
        if MODE == "inject":
            self._send(400, INJECTED.encode())
        elif MODE == "not-http":
            self.wfile.write(b"HELLO WORLD\r\n\r\n")
            self.close_connection = True
        elif MODE == "drip-body":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.flush()
            self._drip(body)
        elif MODE == "drip-headers":
            head = f"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            self._drip(head.encode() + body)
        elif MODE == "endless-sse" and request.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            event = {"choices": [{"index": 0, "logprobs": {"content": reply["choices"][0]["logprobs"]["content"][:1]}}]}
            while True:
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.02)
        else:
            self._send(200, body)

    def _drip(self, data: bytes) -> None:
        for i in range(len(data)):
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()
            time.sleep(0.05)


def _end_by_itself() -> None:
    time.sleep(LIFETIME_S)
    os._exit(0)


threading.Thread(target=_end_by_itself, daemon=True).start()


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        sys.stderr.write("a client went away\n")  # gate cut a dripping reply: expected, no traceback


Server(("127.0.0.1", PORT), Handler).serve_forever()
