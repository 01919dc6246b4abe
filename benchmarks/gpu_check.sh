#!/usr/bin/env bash
# The GPU checks, as one call of the device tool (at most about 8 minutes on one H200; run
# benchmarks/gpu_kit.sh here first and carry .whl):
#   1. the CUDA tests (`pytest -m gpu`): the reference checks in float32 and bfloat16, the offloaded
#      DynamicCache against the full forward;
#   2. examples on CUDA (benchmarks/examples.py) in float32 and in bfloat16: hf-offloaded, which no
#      CPU can run (an offloaded cache prefetches K/V back on a CUDA side stream), beside hf-dynamic
#      and hf-static, and the offloaded path's own planted fault (hf-fault-padding-in-positions with
#      path: offloaded), which must FAIL;
#   3. into $OUT: log.txt, examples.md (one row per run), hf-offloaded's results.json and
#      dossier.md, summary.md.
# The machine has no network: gate and the core dependencies its image lacks come from .whl, installed
# into a venv of its own that sees the image's torch and transformers through a .pth file.
# Usage (on the GPU machine, from the repository root): bash benchmarks/gpu_check.sh
# A dry run of the same steps on a CPU, to try the script where there is no GPU (the offloaded
# examples then stop as AdapterUnavailable, and the CUDA tests skip):
#   KIT_PYTHON_VERSION=3.11 bash benchmarks/gpu_kit.sh
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
if [ "$DEVICE" = cuda ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || { echo "gpu_check: no GPU here"; exit 3; }
fi
ls .whl/*.whl >/dev/null 2>&1 || { echo "gpu_check: no .whl/ (run benchmarks/gpu_kit.sh here first, then carry .whl)"; exit 2; }

# the image's python (on the H200 a venv holding torch and transformers)
BASE=${GPU_CHECK_PYTHON:-$(command -v python3)}
V=/tmp/gate-gpu
rm -rf "$V" && "$BASE" -m venv --without-pip "$V"
site_v=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
site_base=$("$BASE" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import site; site.addsitedir('$site_base')" >"$site_v/_image_packages.pth"
"$BASE" -m pip install -q --no-index --no-deps --no-compile --target "$site_v" .whl/*.whl || exit 3
printf '#!%s\nimport sys\nfrom gate.cli.main import cli\nsys.exit(cli())\n' "$V/bin/python" >"$V/bin/gate"
chmod +x "$V/bin/gate"
PY=$V/bin/python
"$PY" -c "import torch, transformers, gate.adapters.hf; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), '| transformers', transformers.__version__)" || exit 3

echo "== 1. pytest -m gpu"
timeout 150 "$PY" -m pytest -q -m gpu tests/checks/test_checks_parity.py tests/adapters/hf/test_hf_adapter.py
tests_rc=$?

echo "== 2. examples on $DEVICE"
# the offloaded path's own fault: the padding example with its candidate on the offloaded path
sed 's/path: dynamic/path: offloaded/; s/^name: hf-fault-padding-in-positions$/name: hf-fault-padding-offloaded/' \
  examples/hf-fault-padding-in-positions.yaml >examples/hf-fault-padding-offloaded.yaml
grep -q 'path: offloaded' examples/hf-fault-padding-offloaded.yaml || echo "gpu_check: the fault example names no dynamic path to swap"
# one examples.py per example, the offloaded ones first, each under its own limit, none started later
# than GPU_CHECK_BUDGET_S after the script began (the device tool stops a command at 10 minutes)
for run in float32:hf-offloaded float32:hf-fault-padding-offloaded bfloat16:hf-offloaded \
  bfloat16:hf-fault-padding-offloaded float32:hf-dynamic float32:hf-static bfloat16:hf-dynamic bfloat16:hf-static; do
  dtype=${run%%:*} name=${run#*:}
  if [ "$SECONDS" -gt "${GPU_CHECK_BUDGET_S:-420}" ]; then
    echo "gpu_check: $name ($dtype) not started: the budget is spent"
    continue
  fi
  timeout 120 "$PY" benchmarks/examples.py --device "$DEVICE" --dtype "$dtype" --threads 4 --out "/tmp/gpu-$dtype-$name" \
    --work "/tmp/gpu-runs-$dtype" --only "$name" | grep '^| hf-' | tee -a "$OUT/examples.md"
done
rm -f examples/hf-fault-padding-offloaded.yaml
cp /tmp/gpu-runs-float32/hf-offloaded/results.json "$OUT/hf-offloaded-results.json" 2>/dev/null
cp /tmp/gpu-runs-float32/hf-offloaded/dossier.md "$OUT/hf-offloaded-dossier.md" 2>/dev/null

echo "== 3. summary"
"$PY" - "$OUT" "$tests_rc" <<'PY' | tee "$OUT/summary.md"
import json, pathlib, sys
out, tests_rc = pathlib.Path(sys.argv[1]), int(sys.argv[2])
print(f"pytest -m gpu: exit {tests_rc}")
for dtype in ("float32", "bfloat16"):
    for name in ("hf-offloaded", "hf-fault-padding-offloaded"):
        results = pathlib.Path(f"/tmp/gpu-runs-{dtype}/{name}/results.json")
        if not results.exists():
            print(f"{dtype} {name}: no results.json")
            continue
        data = json.loads(results.read_text())
        print(f"{dtype} {name}: {data['verdict']} (exit {data['exit_code']})")
        for check in data["checks"]:
            controls = check.get("controls") or []
            seen = ", ".join(f"{c['fault']} ({c.get('kind')}): {c['outcome']}" for c in controls)
            print(f"  {check['check']}: {check['status']}; controls: {seen or 'none'}")
PY
ls -la "$OUT"
