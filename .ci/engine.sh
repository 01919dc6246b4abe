#!/usr/bin/env bash
# Gate a real engine: llama.cpp's server, prebuilt (the newest xllamacpp CPU wheel, installed into
# .cache/engine-builds/ by benchmarks/engine_builds.py in seconds, no compile; its bin/llama-server wrapper
# is `llama-server` here), run the engine tests against it (the attention families of the tiny model among
# them), then gate the engine examples end to end (prefix, quantised KV, hosted rehearsal, a hybrid
# sliding-window model) and check their verdicts, their exit codes and that no server process is left
# behind. `make engine` (llama.cpp's own CMake build from the llama-cpp-python sdist, about 45 min of one
# core) stays the reference build for users: GATE_LLAMA_SERVER=$PWD/.cache/engine/llama-server runs this on it.
# Usage: bash .ci/engine.sh (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
export GATE_THREADS=1 OMP_NUM_THREADS=1
start=$(date +%s)
test -x .venv/bin/python || { python3 -m venv .venv; .venv/bin/pip install -q torch==2.13.0; }
.venv/bin/python -c "import gguf" 2>/dev/null || .venv/bin/pip install -q -e ".[engine]"
if [ -z "${GATE_LLAMA_SERVER:-}" ]; then
  .venv/bin/python benchmarks/engine_builds.py --builds b11549 --install-only
  export GATE_LLAMA_SERVER="$PWD/.cache/engine-builds/2026.10.11549/bin/llama-server"
fi
echo "engine install step: $(( $(date +%s) - start ))s (llama-server: $GATE_LLAMA_SERVER)"
export PATH="$(dirname "$GATE_LLAMA_SERVER"):$PATH"
.venv/bin/python -m pytest -q -m engine tests/adapters/openai

# the examples once more, timed, into a results table (the committed one is benchmarks/engine_llamacpp.md)
mkdir -p out/ci-engine
.venv/bin/python benchmarks/engine_llamacpp.py --out out/ci-engine/engine_llamacpp.md
bash .ci/engine-pr-build.sh  # the PR-vs-main recipe for an engine build, on real builds

if pgrep -x llama-server >/dev/null; then
  echo "a llama-server process outlived gate run:"; pgrep -a -x llama-server; exit 1
fi
echo "engine CI passed in $(( $(date +%s) - start ))s"
