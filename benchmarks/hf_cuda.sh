#!/usr/bin/env bash
# Run the hf example set on CUDA in bfloat16 (see benchmarks/examples.py). Exits 3 without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
export HF_HUB_OFFLINE=1
exec "$PY" benchmarks/examples.py --device cuda --dtype bfloat16 "$@"
