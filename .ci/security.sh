#!/usr/bin/env bash
# The attack tests of docs/security.md (tests/security/): each plays an attack on the pull-request
# job through the real CLI or the Action's run step (action/run.sh) and asserts it is refused or that
# nothing is lost: two manifests sharing an output folder, header secrets and cross-origin redirects,
# a reason forging workflow commands, a stale verdict after SIGTERM, a server serving another model,
# exit codes missing from `gate --help`, and the verifier's rows (baseline, policy, known bugs, the
# PostgreSQL ledger on a real local server). Local servers only (127.0.0.1); about a minute on a CPU.
# `make test` runs the same tests; .ci/run installs PostgreSQL before it, so none of them skips there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/ensure-postgres.sh
GATE_THREADS=1 OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -rs tests/security
