#!/usr/bin/env bash
# Real library bugs as a regression suite (docs/real-bugs.md): each shipped example on a release that
# ships the bug must FAIL its check with the bug's class, and on the release with the fix PASS
# (benchmarks/real_bugs.py; single-check runs, about 2.5 min, plus about 25 s of CPU each for quantized-beam and paged-attention-left). Venvs from benchmarks/releases.py
# (hard-linked copies of one base venv, torch never reinstalled).
# Usage: bash .ci/real-bugs.sh [--prepare]  (--prepare: set the venvs up only)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
if [ "${1:-}" = --prepare ]; then
  "$PY" benchmarks/releases.py --prepare --releases 5.8 5.9 5.12 5.13 5.14 5.15 5.17 5.18 5.23
  # quanto (hf-beam-quantized) compiles its C++ kernels into each venv on first use: build them
  # here, in the background step, not inside the timed runs
  for release in 5.18 5.23; do
    ".venv-tf-$release/bin/python" -c \
      "from optimum.quanto.library.extensions import get_extension; get_extension('quanto_cpp').lib"
  done
  exit 0
fi
export HF_HUB_OFFLINE=1 GATE_THREADS=1
"$PY" benchmarks/real_bugs.py
