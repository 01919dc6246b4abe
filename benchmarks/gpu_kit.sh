#!/usr/bin/env bash
# Pack what benchmarks/gpu_check.sh needs on a GPU machine that has no network (the device tool's
# H200: Python 3.12, torch 2.11 and transformers 5.17 installed, no pydantic, cryptography or
# datasets): gate's own wheel, built from this checkout, and the wheels of the core dependencies
# that image lacks, for CPython 3.12 on manylinux x86-64, and transformers 5.24, into .whl/ (ignored
# by git; about 23 MB).
# Run here, then call the device tool with carry [".whl"] and the command `bash benchmarks/gpu_check.sh`.
# Usage: bash benchmarks/gpu_kit.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
rm -rf .whl && mkdir -p .whl
"$PY" -m build --wheel --outdir .whl . >/dev/null
# the versions this checkout's .venv runs (one version of each: two would stop the install there)
mapfile -t pins < <("$PY" -c 'import importlib.metadata as m, sys; print(*(f"{n}=={m.version(n)}" for n in sys.argv[1:]), sep="\n")' \
  pydantic pydantic_core annotated_types typing_inspection typing_extensions cryptography cffi pycparser datasets \
  dill multiprocess)
# KIT_PYTHON_VERSION=3.11 packs for this machine's python instead (a dry run of gpu_check.sh here)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "${KIT_PYTHON_VERSION:-3.12}" --implementation cp \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl "${pins[@]}"
# transformers 5.24 beside the image's 5.17 (offloading's prefetch race is fixed from 5.20): its
# other requirements (huggingface-hub, tokenizers, safetensors, typer, regex) are in the image
mkdir -p .whl/tf-5.24
"$PY" -m pip download -q --no-deps -d .whl/tf-5.24 transformers==5.24.0
ls -R .whl
du -sh .whl
