#!/usr/bin/env bash
# The CI journey end to end (tests/journey/test_ci_journey.py): record main, gate a pull request's
# correct and broken builds against main's recording, approve an approximate change as its dossier
# prints it, re-run it (approved), trace its commit, waive and revoke, audit: every command one the
# README, the docs or the dossier print. What each step printed: out/ci-journey.log.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p out
start=$(date +%s)
GATE_THREADS=1 OMP_NUM_THREADS=1 GATE_JOURNEY_LOG="$PWD/out/ci-journey.log" \
  .venv/bin/python -m pytest tests/journey -m journey -q -p no:cacheprovider
cat out/ci-journey.log
echo "journey: $(( $(date +%s) - start ))s"
