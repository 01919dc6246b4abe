#!/usr/bin/env bash
# Gate a real engine: build llama.cpp's server (make engine, cached in .cache/engine/), run the engine
# tests against it (the attention families of the tiny model among them), then gate the engine examples
# end to end (prefix, quantised KV, hosted rehearsal, a hybrid sliding-window model) and check their
# verdicts, their exit codes and that no server process is left behind.
# Usage: bash .ci/engine.sh (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
export GATE_THREADS=1 OMP_NUM_THREADS=1
start=$(date +%s)
make engine
echo "engine build step: $(( $(date +%s) - start ))s"
test -x .venv/bin/python || { python3 -m venv .venv; .venv/bin/pip install -q torch==2.13.0; }
.venv/bin/python -c "import gguf" 2>/dev/null || .venv/bin/pip install -q -e ".[engine]"
export PATH="$PWD/.cache/engine:$PATH"
.venv/bin/python -m pytest -q -m engine tests/adapters/openai

# the examples once more, timed, into a results table (the committed one is benchmarks/engine_llamacpp.md)
mkdir -p out/ci-engine
.venv/bin/python benchmarks/engine_llamacpp.py --out out/ci-engine/engine_llamacpp.md
bash .ci/engine-pr-build.sh  # the PR-vs-main recipe for an engine build

if pgrep -x llama-server >/dev/null; then
  echo "a llama-server process outlived gate run:"; pgrep -a -x llama-server; exit 1
fi
echo "engine CI passed in $(( $(date +%s) - start ))s"
