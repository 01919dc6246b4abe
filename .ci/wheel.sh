#!/usr/bin/env bash
# The wheel as a user installs it: build it, install it in a fresh venv, then from the installed copy
# validate every reference example (or see it rejected as documented), run one and verify its signed
# dossier: adapters, checks, templates, examples and signing all from site-packages, not this tree.
# torch is the one dependency not installed again: .ci/torch-links.sh gives the fresh venv .venv's CPU
# build, and pip installs everything else the wheel requires from the index (about 50 s less:
# measured 2026-12-06, a venv plus torch==2.13.0 from the local wheel took 52 s).
# Usage: bash .ci/wheel.sh [WORK] (from the repository root, after make install; WORK: /tmp by default)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-/tmp}
VENV=$WORK/gate-wheel-venv
TORCH_LINKS=$VENV.torch  # .ci/torch-links.sh
RUN=$WORK/gate-wheel-run
KEY=$WORK/gate-wheel-key
rm -rf dist "$VENV" "$TORCH_LINKS" "$RUN" "$KEY.key" "$KEY.pub"
.venv/bin/python -m build --wheel --outdir dist . >/dev/null
python3 -m venv "$VENV"
bash .ci/torch-links.sh "$VENV"
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$VENV/bin/pip" install --quiet dist/decode_gate-*.whl
(
  cd "$WORK"
  # torch is the linked one (not a second copy), gate and its data are the wheel's
  "$VENV/bin/python" - "$TORCH_LINKS" "$site" <<'PY'
import sys
from pathlib import Path

import gate
import torch

links, site = sys.argv[1], sys.argv[2]
assert torch.__file__.startswith(links + "/"), f"torch not the linked build: {torch.__file__}"
assert not (Path(site) / "torch").exists(), f"a second torch was installed in {site}"
assert gate.__file__.startswith(site + "/"), f"gate not from the wheel: {gate.__file__}"
print("torch", torch.__version__, "linked from .venv; gate from", gate.__file__)
PY
  examples=$("$VENV/bin/python" -c 'from gate._util.resources import data_dir; print(data_dir("examples"))')
  case "$examples" in */site-packages/gate/_data/examples) ;; *) echo "examples not from the wheel: $examples"; exit 1;; esac
  "$VENV/bin/gate" plan "$examples/reference-static-layout.yaml"
  for manifest in "$examples"/reference-*.yaml; do
    if head -n 1 "$manifest" | grep -q '^# gate-expect: rejected'; then
      rc=0; "$VENV/bin/gate" validate "$manifest" 2>/dev/null || rc=$?
      [ "$rc" -eq 2 ] || { echo "expected a policy rejection (exit 2), got $rc: $manifest"; exit 1; }
    else
      "$VENV/bin/gate" validate "$manifest" >/dev/null
    fi
  done
  echo "every reference example validates (or is rejected as documented) from the wheel"
  # one real run from the installed wheel: adapters, checks, templates and signing all from site-packages
  "$VENV/bin/gate" keygen --out "$KEY" >/dev/null
  GATE_THREADS=1 "$VENV/bin/gate" run "$examples/reference-prefix-basic.yaml" --out "$RUN" \
    --sign-key "$KEY.key"
  "$VENV/bin/gate" verify "$RUN" --run-key "$KEY.pub"
)
