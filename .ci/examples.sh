#!/usr/bin/env bash
# Every reference example end to end: `gate run` on each examples/reference-*.yaml, its verdict and exit
# code compared with the `# gate-expect:` header it documents (benchmarks/examples.py exits 1 on a
# mismatch). The hf set runs the same way where time allows: bash .ci/examples.sh hf
set -euo pipefail
cd "$(dirname "$0")/.."
export GATE_THREADS=1 OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
for set in "${@:-reference}"; do
  start=$(date +%s)
  .venv/bin/python benchmarks/examples.py --set "$set" --out "out/ci-examples-$set"
  echo "examples ($set): $(( $(date +%s) - start ))s"
done
