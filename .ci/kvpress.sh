#!/usr/bin/env bash
# Test the hf adapter's kvpress path in its own environment: kvpress pins transformers<5.3, so it
# lives beside (not in) the main venv. Usage: bash .ci/kvpress.sh [--prepare]  (from the repository root; --prepare only sets the venv up)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-kvpress
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# torch first, pinned: an unpinned resolve would pull a multi-GB CUDA build.
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q -e ".[kvpress]" "transformers==5.2.*" pytest hypothesis
[ "${1:-}" = --prepare ] && exit 0  # set-up only (.ci/run does it in the background)
"$VENV/bin/python" -c "import kvpress, transformers; print('kvpress ok; transformers', transformers.__version__)"
export HF_HUB_OFFLINE=1
"$VENV/bin/python" -m pytest tests/adapters/hf/test_hf_kvpress.py -q
