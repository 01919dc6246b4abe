#!/usr/bin/env bash
# Every "What next" command a dossier prints, run as printed (tests/report/test_next_steps_run.py): each
# CPU example (reference-* and hf-*, less the rejected and kvpress ones) run into a farm as a reader
# would from the repository root, signed, then each step its dossier.md prints, in order, against the
# exit code printed beside it (`expect exit N (WORD)`, derived from the dossier's own results).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
GATE_THREADS=1 OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 \
  .venv/bin/python -m pytest tests/report/test_next_steps_run.py -m next_steps -q -p no:cacheprovider
echo "next-steps: $(( $(date +%s) - start ))s"
