#!/usr/bin/env bash
# Every "What next" command a dossier prints, run as printed (tests/report/test_next_steps_run.py): each
# CPU example (reference-* and hf-*, less the rejected and kvpress ones) run into a farm as a reader
# would from the repository root, signed, then each step its dossier.md prints, in order, against the
# exit code printed beside it (`expect exit N (WORD)`, derived from the dossier's own results).
# Usage: bash .ci/next-steps.sh [ci]: every example (make next-steps-test: about 35-45 min on 2 cores), or
# with `ci` one example of each kind of next step (.ci/run): a failure reproduced alone and with the checks
# that stand in for it, a named design hazard, an approval then a verify, a pass, a speculative and an
# eviction failure, a Hugging Face example.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
if [ "${1:-}" = ci ]; then
  export GATE_NEXT_STEPS_EXAMPLES=reference-quant-int8,reference-fault-mask-origin-reset,reference-prefix-fault-trust-hash,reference-prefix-basic,reference-spec-fault-bonus-from-draft,reference-evict-sink,hf-dynamic
fi
GATE_THREADS=1 OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 \
  .venv/bin/python -m pytest tests/report/test_next_steps_run.py -m next_steps -q -p no:cacheprovider
echo "next-steps: $(( $(date +%s) - start ))s"
