#!/usr/bin/env bash
# The hf examples on four transformers releases spread across the supported range (>=5.2,<6), each in
# its own venv (benchmarks/releases.py: a hard-linked copy of one base venv, torch never reinstalled),
# against the verdict each example documents for that release. With 5.2 (.ci/hf-matrix.sh) and 5.24
# (the main venv) they exercise every branch of gate/adapters/hf/compat.py:
#   5.9   forward without cache_position, mask builder without it; crop keeps a length; continuous
#         batching's page size named block_size, generate_batch without warmup; prompt lookup crashes
#         without an EOS token (a crash finding); DynamicCache.reset keeps its length (a real bug)
#   5.15  crop takes a count to drop, StaticLayer.crop, generate's max_cache_len; block_size with
#         warmup; prompt lookup's EOS guard
#   5.18  ContinuousBatchingConfig(page_size=...); DynamicLayer.reset fixed
#   5.23  the last release before the `cache` rename (past_key_values), Fp8QuantizedLayer
# Each release runs the fast examples that reach its branches (hf-dynamic and hf-static everywhere,
# continuous batching where its config changed, prompt lookup where its EOS handling did); the whole
# set is `python benchmarks/releases.py`. Measured: docs/hf-adapter.md ("Every release in range").
# Usage: bash .ci/hf-releases.sh [--prepare]  (--prepare: set the venvs up only)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
declare -A EXAMPLES=(
  [5.9]="hf-dynamic hf-static hf-generate-paged hf-prompt-lookup"
  [5.15]="hf-dynamic hf-static hf-generate-paged hf-prompt-lookup"
  [5.18]="hf-dynamic hf-static hf-generate-paged"
  [5.23]="hf-dynamic hf-static"
)
RELEASES=(5.9 5.15 5.18 5.23)
if [ "${1:-}" = --prepare ]; then
  exec "$PY" benchmarks/releases.py --prepare --releases "${RELEASES[@]}"
fi
export HF_HUB_OFFLINE=1 GATE_THREADS=1
status=0
for release in "${RELEASES[@]}"; do
  # shellcheck disable=SC2086  # the example names are words
  "$PY" benchmarks/releases.py --releases "$release" --only ${EXAMPLES[$release]} \
    --out "out/ci-releases/$release.md" --work "out/ci-releases/runs" || status=1
done
exit "$status"
