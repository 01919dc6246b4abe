#!/usr/bin/env bash
# The hf examples on four transformers releases spread across the supported range (>=5.2,<6), each in
# its own venv (benchmarks/releases.py: a hard-linked copy of one base venv, torch never reinstalled),
# against the verdict each example documents for that release. With 5.2 (.ci/hf-matrix.sh) and 5.24
# (the main venv) they exercise every branch of gate/adapters/hf/compat.py:
#   5.9   forward without cache_position, mask builder without it; crop keeps a length; continuous
#         batching's page size named block_size, generate_batch without warmup; prompt lookup crashes
#         without an EOS token (a crash finding); DynamicCache.reset keeps its length (a real bug)
#   5.15  crop takes a count to drop, StaticLayer.crop, generate's max_cache_len; block_size with warmup
#   5.18  ContinuousBatchingConfig(page_size=...); DynamicLayer.reset fixed
#   5.23  the last release before the `cache` rename (past_key_values, Fp8QuantizedLayer)
# A fast subset of the examples per release (measured in docs/hf-adapter.md); the whole set is
# `python benchmarks/releases.py`. Usage: bash .ci/hf-releases.sh [--prepare]  (--prepare: venvs only)
set -euo pipefail
cd "$(dirname "$0")/.."
RELEASES=(5.9 5.15 5.18 5.23)
EXAMPLES=(hf-dynamic hf-static hf-generate-paged hf-prompt-lookup)
PY=.venv/bin/python
if [ "${1:-}" = --prepare ]; then
  exec "$PY" benchmarks/releases.py --prepare --releases "${RELEASES[@]}"
fi
export HF_HUB_OFFLINE=1 GATE_THREADS=1
"$PY" benchmarks/releases.py --releases "${RELEASES[@]}" --only "${EXAMPLES[@]}" --out out/ci-releases.md
