#!/usr/bin/env bash
# The GPU checks, as one call of the device tool (at most about 8 minutes on one H200; run
# benchmarks/gpu_kit.sh here first and carry .whl):
#   1. the CUDA tests (`pytest -m gpu`): the reference checks in float32 and bfloat16, the offloaded
#      DynamicCache against the full forward;
#   2. examples on CUDA (benchmarks/examples.py), float32 and bfloat16: hf-offloaded, which no CPU
#      can run (an offloaded cache prefetches K/V back on a CUDA side stream), and the offloaded
#      path's own planted fault (hf-fault-padding-in-positions with path: offloaded), which must
#      FAIL, each on the image's transformers (5.17: its prefetch stream does not wait for the default
#      stream, fixed in 5.20, docs/real-bugs.md) and on the 5.24 the kit carries; then hf-dynamic
#      and hf-static on the image's;
#   3. into $OUT: log.txt, examples.md (one row per run), summary.md (every check's controls), and
#      hf-offloaded's results.json and dossier.md on the image's transformers in float32.
# The machine has no network: gate and the core dependencies its image lacks come from .whl,
# installed into a venv of its own that sees the image's torch and transformers through a .pth file.
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
: >"$OUT/examples.md"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
if [ "$DEVICE" = cuda ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || { echo "gpu_check: no GPU here"; exit 3; }
fi
ls .whl/*.whl >/dev/null 2>&1 || { echo "gpu_check: no .whl/ (run benchmarks/gpu_kit.sh here first, then carry .whl)"; exit 2; }

# the image's python (on the H200 a venv holding torch and transformers)
BASE=${GPU_CHECK_PYTHON:-$(command -v python3)}
site_base=$("$BASE" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

venv() {  # DIR WHEEL...: a venv that sees the image's packages after its own, the wheels installed in it
  local dir=$1 site
  shift
  rm -rf "$dir" && "$BASE" -m venv --without-pip "$dir" || return 1
  site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "import site; site.addsitedir('$site_base')" >"$site/_image_packages.pth"
  "$BASE" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$@" || return 1
  printf '#!%s\nimport sys\nfrom gate.cli.main import cli\nsys.exit(cli())\n' "$dir/bin/python" >"$dir/bin/gate"
  chmod +x "$dir/bin/gate"
  "$dir/bin/python" -c "import torch, transformers, gate.adapters.hf; print('$dir: torch', torch.__version__, \
'cuda', torch.cuda.is_available(), '| transformers', transformers.__version__)"
}
venv /tmp/gate-gpu .whl/*.whl || exit 3
envs="image"
if ls .whl/tf-5.24/*.whl >/dev/null 2>&1; then
  venv /tmp/gate-gpu-5.24 .whl/*.whl .whl/tf-5.24/*.whl && envs="image 5.24"
fi
python_of() { [ "$1" = image ] && echo /tmp/gate-gpu/bin/python || echo "/tmp/gate-gpu-$1/bin/python"; }

echo "== 1. pytest -m gpu"
timeout 150 /tmp/gate-gpu/bin/python -m pytest -q -m gpu tests/checks/test_checks_parity.py tests/adapters/hf/test_hf_adapter.py
tests_rc=$?

echo "== 2. examples on $DEVICE"
sed 's/path: dynamic/path: offloaded/; s/^name: hf-fault-padding-in-positions$/name: hf-fault-padding-offloaded/' \
  examples/hf-fault-padding-in-positions.yaml >examples/hf-fault-padding-offloaded.yaml
grep -q 'path: offloaded' examples/hf-fault-padding-offloaded.yaml || echo "gpu_check: the fault example names no dynamic path to swap"
# one examples.py per run, the offloaded ones first, each under its own limit, none started later
# than GPU_CHECK_BUDGET_S after the script began (the device tool stops a command at 10 minutes)
runs=()
for dtype in float32 bfloat16; do
  for env in $envs; do runs+=("$dtype:$env:hf-offloaded" "$dtype:$env:hf-fault-padding-offloaded"); done
done
runs+=(float32:image:hf-dynamic float32:image:hf-static bfloat16:image:hf-dynamic bfloat16:image:hf-static)
for run in "${runs[@]}"; do
  IFS=: read -r dtype env name <<<"$run"
  if [ "$SECONDS" -gt "${GPU_CHECK_BUDGET_S:-420}" ]; then
    echo "gpu_check: $name ($dtype, transformers $env) not started: the budget is spent"
    continue
  fi
  timeout 120 "$(python_of "$env")" benchmarks/examples.py --device "$DEVICE" --dtype "$dtype" --threads 4 \
    --out "/tmp/gpu-tables/$dtype-$env-$name" --work "/tmp/gpu-runs/$dtype-$env" --only "$name" |
    grep '^| hf-' | sed "s/^| /| $dtype, transformers $env | /" | tee -a "$OUT/examples.md"
done
rm -f examples/hf-fault-padding-offloaded.yaml
cp /tmp/gpu-runs/float32-image/hf-offloaded/results.json "$OUT/hf-offloaded-results.json" 2>/dev/null
cp /tmp/gpu-runs/float32-image/hf-offloaded/dossier.md "$OUT/hf-offloaded-dossier.md" 2>/dev/null

echo "== 3. summary"
/tmp/gate-gpu/bin/python - "$tests_rc" "${runs[@]}" <<'PY' | tee "$OUT/summary.md"
import json, pathlib, sys
print(f"pytest -m gpu: exit {sys.argv[1]}")
for run in sys.argv[2:]:
    dtype, env, name = run.split(":")
    results = pathlib.Path(f"/tmp/gpu-runs/{dtype}-{env}/{name}/results.json")
    if not results.exists():
        print(f"{dtype}, transformers {env}, {name}: no results.json")
        continue
    data = json.loads(results.read_text())
    env_seen = data["environment"]
    print(f"{dtype}, transformers {env_seen.get('transformers')}, torch {env_seen.get('torch')}, "
          f"{env_seen.get('device')}, {name}: {data['verdict']} (exit {data['exit_code']})")
    for check in data["checks"]:
        controls = check.get("controls") or []
        seen = ", ".join(f"{c['fault']} ({c.get('kind')}): {c['outcome']}" for c in controls)
        print(f"  {check['check']}: {check['status']}; controls: {seen or 'none'}")
PY
ls -la "$OUT"
