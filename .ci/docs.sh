#!/usr/bin/env bash
# Every command of README.md and docs/*.md run as printed (tests/docs/test_docs_run.py): each document
# in a fresh git repository linking this checkout's examples, policies, ..., its shell blocks in order,
# each command's exit code against the one its comment documents (`# exit N`, else 0). Each block the
# docs mark `<!-- gate-docs: skip REASON -->` is listed with its reason (-rs). Per command: exit code
# and seconds, printed for each document.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
GATE_THREADS=1 OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/docs -m docs -q -rs -s -p no:cacheprovider
echo "docs: $(( $(date +%s) - start ))s"
