#!/usr/bin/env bash
# Batches on Ray (docs/scale.md): install the `ray` extra, then the tests that start a real local Ray
# cluster on 127.0.0.1 and compare it with the local process pool, and one CLI batch through a cluster
# begun with `ray start --head` and joined with --address auto.
set -euo pipefail
cd "$(dirname "$0")/.."

.venv/bin/python -c 'import ray' 2>/dev/null || .venv/bin/python -m pip install --quiet 'ray>=2.9' \
  || echo "Ray could not be installed: its tests will skip, saying so"
export GATE_THREADS=1 OMP_NUM_THREADS=1
.venv/bin/python -m pytest -q -rs -m ray tests/engine/test_ray_executor.py

if .venv/bin/python -c 'import ray' 2>/dev/null; then
  out=$(mktemp -d)
  trap '.venv/bin/ray stop --force >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
  .venv/bin/ray start --head --node-ip-address 127.0.0.1 --num-cpus 2 --include-dashboard false --disable-usage-stats >/dev/null
  rc=0
  .venv/bin/gate run examples/reference-static-layout.yaml examples/reference-fault-off-by-one-pos.yaml \
    --out "$out/batch" --executor ray --address auto --check greedy-parity -q || rc=$?
  [ "$rc" -eq 1 ] || { echo "expected the batch to fail (exit 1) on off-by-one-pos, got $rc"; exit 1; }
  .venv/bin/python - "$out/batch/summary.json" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
verdicts = {run["name"]: run["verdict"] for run in summary["runs"]}
assert verdicts == {"reference-static-layout": "partial", "reference-fault-off-by-one-pos": "fail"}, verdicts
assert all(run["worker"].startswith("ray node ") for run in summary["runs"]), summary["runs"]
print("ray cluster batch:", summary["summary"])
PY
fi
