#!/usr/bin/env bash
# The PR-vs-main recipe for an engine build (docs/baselines.md, docs/engines.md): main's llama-server
# build is the reference, the pull request's build the candidate, two launch commands side by side.
# CI has one build, so "main's build" and a correct "PR build" are that binary under two names, and a
# broken "PR build" is a wrapper that stores its K cache as 4-bit blocks by default.
# Needs llama-server on PATH (make engine; .ci/engine.sh calls this). Usage: bash .ci/engine-pr-build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export GATE_THREADS=1 OMP_NUM_THREADS=1
export PATH="$PWD/.cache/engine:$PATH"
pr=out/ci-engine/pr-build; rm -rf "$pr"; mkdir -p "$pr/main" "$pr/correct" "$pr/broken"
real=$(command -v llama-server)
ln -s "$real" "$pr/main/llama-server"; ln -s "$real" "$pr/correct/llama-server"
printf '#!/bin/sh\nexec "%s" "$@" --cache-type-k q4_0\n' "$real" > "$pr/broken/llama-server"; chmod +x "$pr/broken/llama-server"
for build in correct broken; do
  .venv/bin/python - examples/engine-llamacpp-prefix.yaml "$PWD/$pr" "$build" > "$pr/$build.yaml" <<'PY'
import sys
text, pr, build = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
head, ref, cand = text.split("command: [llama-server,")  # the reference's launch, then the candidate's
print(f"{head}command: [{pr}/main/llama-server,{ref}command: [{pr}/{build}/llama-server,{cand}", end="")
PY
done
rc_correct=0; rc_broken=0
.venv/bin/gate run "$pr/correct.yaml" --out "$pr/correct-out" -q || rc_correct=$?
.venv/bin/gate run "$pr/broken.yaml" --out "$pr/broken-out" -q || rc_broken=$?
.venv/bin/python - "$pr" "$rc_correct" "$rc_broken" <<'PY'
import json, sys
pr, rc_correct, rc_broken = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
correct, broken = (json.load(open(f"{pr}/{b}-out/results.json")) for b in ("correct", "broken"))
assert rc_correct == 0 and correct["verdict"] == "pass", (rc_correct, correct["summary"])
assert "main/llama-server" in correct["subjects"]["reference"]["command"], correct["subjects"]["reference"]
assert "correct/llama-server" in correct["subjects"]["candidate"]["command"]
# the identity names each build by the sha256 of the program it ran: one binary under two names here
ref, cand = correct["subjects"]["reference"], correct["subjects"]["candidate"]
assert ref["executable_sha256"] == cand["executable_sha256"] != broken["subjects"]["candidate"]["executable_sha256"]
perf = next(c for c in correct["checks"] if c["check"] == "phase-performance")
assert perf["status"] in ("pass", "warn"), perf["message"]  # both builds streamed side by side
assert rc_broken == 1 and broken["verdict"] == "fail", (rc_broken, broken["summary"])
assert any(c["check"] == "engine-prefix-parity" and c["status"] == "fail" for c in broken["checks"])
print("engine PR build against main's, correct:", correct["verdict"], "exit", rc_correct, "-", correct["summary"])
print("engine PR build against main's, broken:", broken["verdict"], "exit", rc_broken, "-", broken["summary"])
PY
echo "engine PR-build recipe passed"
