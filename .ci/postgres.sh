#!/usr/bin/env bash
# Reliability trials and the PostgreSQL ledger (docs/reliability.md): a real local PostgreSQL server
# (the Debian package; the tests start their own with initdb/pg_ctl on 127.0.0.1), crash trials with
# kill -9 during append and during run, a WAL deleted under a writer, concurrent writers on both backends.
set -euo pipefail
cd "$(dirname "$0")/.."

bash .ci/ensure-postgres.sh

figures=$(mktemp)
rm -f "$figures"
GATE_RELIABILITY=1 GATE_RELIABILITY_FIGURES="$figures" GATE_THREADS=1 OMP_NUM_THREADS=1 \
  .venv/bin/python -m pytest -q -rs tests/reliability tests/trust/test_ledger_postgres.py tests/core/test_hostile_inputs.py
echo "reliability figures:"
cat "$figures" 2>/dev/null || echo "(none recorded)"
