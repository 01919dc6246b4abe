"""Helpers of the attack tests: gate as a PR job runs it (a real process, this tree's code) and the
Action's run step."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).parents[2]
RUN_SH = ROOT / "action" / "run.sh"
PASSING = ROOT / "examples" / "reference-static-layout.yaml"
"""A cheap reference example that passes (a few seconds on one CPU thread)."""
FAILING = ROOT / "examples" / "reference-fault-missing-start-pos.yaml"
"""A cheap reference example that fails (a planted missing start position)."""


def gate_env(**extra: str) -> dict[str, str]:
    """The environment a CI step gives gate: this tree first on the path, one thread, no CI variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GATE_"))}
    env.update(PYTHONPATH=str(ROOT), GATE_THREADS="1", OMP_NUM_THREADS="1", **extra)
    return env


def copy_dossier(dossier: Path, to: Path) -> Path:
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(dossier, to)
    return to


def action_step(workspace: Path, gate: Path, manifests: str, jobs: int = 1, **env: str) -> tuple[int, str, str, Path]:
    """Run the Action's run step (action/run.sh) in `workspace` as GitHub would: returns its exit code,
    its log, the step outputs it wrote ($GITHUB_OUTPUT) and the out-dir."""
    outputs, summary, out = workspace / "outputs.txt", workspace / "summary.md", workspace / "gate-out"
    outputs.write_text("")
    summary.write_text("")
    done = subprocess.run(
        [str(RUN_SH)],
        cwd=workspace,
        env=gate_env(
            GITHUB_ACTIONS="true",
            GITHUB_WORKSPACE=str(workspace),
            GITHUB_OUTPUT=str(outputs),
            GITHUB_STEP_SUMMARY=str(summary),
            GATE_BIN=str(gate),
            GATE_OUT=str(out),
            GATE_MANIFESTS=manifests,
            GATE_JOBS=str(jobs),
            **env,
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr, outputs.read_text(), out


class FakeEngine:
    """A real HTTP server on 127.0.0.1, in a thread, answering OpenAI-shaped JSON (/v1/models and
    /v1/completions in llama.cpp's id-carrying logprobs shape) and keeping every request's path and
    headers. `redirect_to`: answer every request with a 307 to that base URL instead. `listed` is the
    model /v1/models names and `replies_as` the `model` field its completions carry."""

    VOCAB = 512

    def __init__(self, *, listed: str = "served-model", replies_as: str | None = None, redirect_to: str = "") -> None:
        self.listed, self.replies_as, self.redirect_to = listed, replies_as or listed, redirect_to
        self.requests: list[tuple[str, dict[str, str]]] = []
        engine = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                engine.requests.append((self.path, dict(self.headers.items())))
                if engine.redirect_to:
                    self.send_response(307)
                    self.send_header("Location", engine.redirect_to + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/v1/models":
                    meta = {"n_vocab": engine.VOCAB, "n_ctx": 256}
                    body: Any = {"object": "list", "data": [{"id": engine.listed, "owned_by": "t", "meta": meta}]}
                elif self.path == "/v1/completions":
                    body = engine.completion(request)
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def completion(self, request: dict[str, Any]) -> dict[str, Any]:
        prompt, n, k = request.get("prompt") or [], int(request.get("max_tokens") or 1), 5
        tokens = [3 + (sum(prompt) * 31 + 7 * i) % (self.VOCAB - 3) for i in range(n)]
        content = [
            {
                "id": t,
                "logprob": -0.125,
                "top_logprobs": [{"id": t, "logprob": -0.125}]
                + [{"id": 3 + (t + 1 + j) % (self.VOCAB - 3), "logprob": -3.0 - j} for j in range(k - 1)],
            }
            for t in tokens
        ]
        usage = {"prompt_tokens": len(prompt), "completion_tokens": n, "prompt_tokens_details": {"cached_tokens": 0}}
        choice = {"text": "", "index": 0, "logprobs": {"content": content}, "finish_reason": "length"}
        return {"object": "text_completion", "model": self.replies_as, "choices": [choice], "usage": usage}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def engine_manifest(path: Path, base_url: str, **options: Any) -> Path:
    """A manifest judging the engine at `base_url` against itself (both subjects the same server)."""
    side = {"adapter": "openai", "options": {"base_url": base_url, "flavor": "generic", "retries": 0,
                                              "request_timeout_s": 5, **options}}  # fmt: skip
    doc = {
        "apiVersion": "gate/v1",
        "name": path.stem,
        "intervention": "engine-serving",
        "claim": {"level": "tolerance"},
        "identity": ["token-ids", "model-revision", "kv-dtype"],
        "subject": {"reference": side, "candidate": side, "seed": 0},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def gate_cli(*args: object, **env: str) -> subprocess.CompletedProcess[str]:
    """`gate ARGS` as a CI step runs it: a real process, this tree's code."""
    return subprocess.run(
        [sys.executable, "-m", "gate", *map(str, args)],
        env=gate_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
