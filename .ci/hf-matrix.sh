#!/usr/bin/env bash
# Test the hf adapter at the low end of its declared transformers range (>=5.2,<6).
# The main venv carries the high end (5.24); this one pins 5.2.x, the oldest kvpress accepts.
# Usage: bash .ci/hf-matrix.sh [--prepare]  (from the repository root; reuses .venv-hf-low when present;
# --prepare only sets the venv up)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-hf-low
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# torch first, pinned: an unpinned resolve would pull a multi-GB CUDA build.
"$VENV/bin/pip" install -q torch==2.13.0
DISABLE_CUDA=1 "$VENV/bin/pip" install -q -e ".[hqq]" "transformers==5.2.*" optimum-quanto pytest hypothesis
[ "${1:-}" = --prepare ] && exit 0  # set-up only (.ci/run does it in the background)
"$VENV/bin/python" -c "import transformers; print('transformers', transformers.__version__)"
export HF_HUB_OFFLINE=1
"$VENV/bin/python" -m pytest tests/adapters/hf -q
# the shipped examples whose verdict depends on the release (docs/hf-adapter.md): a release with a
# known bug must FAIL; the table lands in benchmarks/transformers-low/ and the script exits 1 on a mismatch
"$VENV/bin/python" benchmarks/examples.py --only hf-dynamic hf-assisted-sliding-window hf-quantized-hqq hf-beam-dynamic hf-beam-fault-not-reordered --out benchmarks/transformers-low
