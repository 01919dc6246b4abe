#!/usr/bin/env bash
# llama.cpp at two builds, prebuilt: install the oldest and the newest xllamacpp CPU wheel (llama.cpp's
# server embedded; cached in .cache/engine-builds/, seconds to install, no compile), run the launcher's
# tests against the newest installed, then gate the cheap example (engine-llamacpp-hosted) on both builds with its
# documented verdict asserted (benchmarks/engine_builds.py exits 1 otherwise) and no server left behind.
# The table goes to out/ci-engine-builds/engine-releases.md (the committed one: benchmarks/engine-releases.md).
# Usage: bash .ci/engine-builds.sh (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
export GATE_THREADS=1 OMP_NUM_THREADS=1
start=$(date +%s)
test -x .venv/bin/python || { python3 -m venv .venv; .venv/bin/pip install -q torch==2.13.0; }
.venv/bin/python -c "import gguf" 2>/dev/null || .venv/bin/pip install -q -e ".[engine]"
BUILDS="${ENGINE_BUILDS:-b8672,b11549}"
.venv/bin/python benchmarks/engine_builds.py --builds "$BUILDS" --install-only
echo "engine builds install step: $(( $(date +%s) - start ))s"
.venv/bin/python -m pytest -q -m engine tests/adapters/openai/test_xllamacpp_server.py
mkdir -p out/ci-engine-builds
rm -f out/ci-engine-builds/engine-releases.md
.venv/bin/python benchmarks/engine_builds.py --builds "$BUILDS" --examples engine-llamacpp-hosted \
  --out out/ci-engine-builds/engine-releases.md
if pgrep -f "xllamacpp_server.py --xllamacpp $PWD/.cache/engine-builds" >/dev/null; then
  echo "an xllamacpp server outlived gate run:"; pgrep -a -f "xllamacpp_server.py --xllamacpp $PWD"; exit 1
fi
echo "engine builds CI passed in $(( $(date +%s) - start ))s"
