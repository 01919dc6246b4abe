#!/usr/bin/env bash
# llama.cpp at the builds its known bugs live on, prebuilt: install xllamacpp CPU wheels (llama.cpp's
# server embedded; cached in .cache/engine-builds/, seconds to install, no compile), run the launcher's
# tests against the newest, then run benchmarks/engine_builds.py on the bug subset: each known bug's
# last buggy build and its first fixed one on the example that shows it (KNOWN_BUGS there: a buggy build
# must show its bug, exit code, check and class; a fixed one the documented verdict), and the newest
# build on the builds-only n-gram speculative example (.ci/engine.sh runs every other llama.cpp example on
# the same newest build, once). engine_builds.py exits 1 on any departure; no server may be left behind.
# The table goes to out/ci-engine-builds/engine-releases.md (the committed one: benchmarks/engine-releases.md).
# Usage: bash .ci/engine-builds.sh (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
export GATE_THREADS=1 OMP_NUM_THREADS=1
start=$(date +%s)
test -x .venv/bin/python || { python3 -m venv .venv; .venv/bin/pip install -q torch==2.13.0; }
.venv/bin/python -c "import gguf" 2>/dev/null || .venv/bin/pip install -q -e ".[engine]"
.venv/bin/python benchmarks/engine_builds.py --builds b8672,b8929,b9873,b10068,b11549 --install-only
echo "engine builds install step: $(( $(date +%s) - start ))s"
.venv/bin/python -m pytest -q -m engine tests/adapters/openai/test_xllamacpp_server.py
# gate bisect over builds, a user's binaries and git commits built into servers (each finds the ignore_eos fix
# or stops after two runs; the pair's dossiers and gate diff)
.venv/bin/python -m pytest -q -m engine tests/cli/test_bisect.py
mkdir -p out/ci-engine-builds
table=out/ci-engine-builds/engine-releases.md; rm -f "$table"
# ignore_eos ignored (b8672; fixed in b8929: ggml-org/llama.cpp PR #21203)
.venv/bin/python benchmarks/engine_builds.py --builds b8672,b8929 --examples engine-llamacpp-prefix --out "$table"
# speculative decoding leaves out every token's logprobs after the first (b8672; clean from b8929), and
# b8929 reports an accepted n-gram draft's logprob as 0 (engine-concurrent-conversations fails there)
.venv/bin/python benchmarks/engine_builds.py --builds b8672,b8929 --examples engine-llamacpp-speculative --out "$table"
# wrong replies when a sliding-window prefix is reused under load, and a sliding-window slot restored from
# a file continuing on another prompt's context checkpoint (both b9538..b9873; clean from b10068)
.venv/bin/python benchmarks/engine_builds.py --builds b9873,b10068 --examples engine-llamacpp-sliding-window --out "$table"
# the newest: the n-gram speculative example (.ci/engine.sh runs the other llama.cpp examples on this build;
# the draft-model one is a live bug on every build, exit 14: the full matrix runs it)
.venv/bin/python benchmarks/engine_builds.py --builds b11549 --out "$table" --examples engine-llamacpp-speculative
if pgrep -f "xllamacpp_server.py --xllamacpp $PWD/.cache/engine-builds" >/dev/null; then
  echo "an xllamacpp server outlived gate run:"; pgrep -a -f "xllamacpp_server.py --xllamacpp $PWD"; exit 1
fi
echo "engine builds CI passed in $(( $(date +%s) - start ))s"
