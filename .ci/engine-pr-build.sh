#!/usr/bin/env bash
# The PR-vs-main recipe for an engine build (docs/baselines.md, docs/engines.md), on real llama.cpp builds:
# main's build is the reference, the pull request's build the candidate, two launch commands side by side.
# Prebuilt builds (xllamacpp CPU wheels, benchmarks/engine_builds.py): main runs b10068; a pull request
# moving to b9873 (which gives wrong replies when a sliding-window model's cached prefix is reused while
# other requests run: docs/real-bugs.md) must FAIL the sliding-window example, and one moving to b11549
# (clean) must PASS it. .ci/engine.sh calls this. Usage: bash .ci/engine-pr-build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export GATE_THREADS=1 OMP_NUM_THREADS=1
.venv/bin/python benchmarks/engine_builds.py --builds b9873,b10068,b11549 --install-only >/dev/null
builds="$PWD/.cache/engine-builds"
main="$builds/2026.7.10068/bin/llama-server"
pr=out/ci-engine/pr-build; rm -rf "$pr"; mkdir -p "$pr"
for build in correct:2026.10.11549 broken:2026.7.9873; do
  .venv/bin/python - examples/engine-llamacpp-sliding-window.yaml "$main" "$builds/${build#*:}/bin/llama-server" \
    > "$pr/${build%%:*}.yaml" <<'PY'
import sys
text, main, candidate = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
head, ref, cand = text.split("command: [llama-server,")  # the reference's launch, then the candidate's
print(f"{head}command: [{main},{ref}command: [{candidate},{cand}", end="")
PY
done
rc_correct=0; rc_broken=0
.venv/bin/gate run "$pr/correct.yaml" --out "$pr/correct-out" -q || rc_correct=$?
.venv/bin/gate run "$pr/broken.yaml" --out "$pr/broken-out" -q || rc_broken=$?
.venv/bin/python - "$pr" "$rc_correct" "$rc_broken" <<'PY'
import json, sys
pr, rc_correct, rc_broken = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
correct, broken = (json.load(open(f"{pr}/{b}-out/results.json")) for b in ("correct", "broken"))


def served(node):
    """Every engine_version (the servers' GET /props build_info) the record's evidence holds."""
    if isinstance(node, dict):
        return ({node["engine_version"]} if isinstance(node.get("engine_version"), str) else set()).union(
            *map(served, node.values()))
    return set().union(*map(served, node)) if isinstance(node, list) else set()


assert rc_correct == 0 and correct["verdict"] == "pass", (rc_correct, correct["summary"])
ref, cand = correct["subjects"]["reference"], correct["subjects"]["candidate"]
assert "2026.7.10068/bin/llama-server" in ref["command"], ref
assert "2026.10.11549/bin/llama-server" in cand["command"], cand
assert "2026.7.9873/bin/llama-server" in broken["subjects"]["candidate"]["command"]
# the identity names each build by the sha256 of the program it ran, and the servers by their build info
assert len({ref["executable_sha256"], cand["executable_sha256"], broken["subjects"]["candidate"]["executable_sha256"]}) == 3
assert served(correct) == {"b10068-xllamacpp", "b11549-xllamacpp"}, served(correct)
assert served(broken) == {"b10068-xllamacpp", "b9873-xllamacpp"}, served(broken)
perf = next(c for c in correct["checks"] if c["check"] == "phase-performance")
assert perf["status"] in ("pass", "warn"), perf["message"]  # both builds streamed side by side
assert rc_broken == 1 and broken["verdict"] == "fail", (rc_broken, broken["summary"])
caught = [c for c in broken["checks"] if c["status"] == "fail"
          and c["check"] in ("engine-concurrent-conversations", "engine-batch-invariance")]
assert caught and all(c["diagnosis"]["bug_class"] == "continuous-batching" for c in caught), broken["summary"]
print("engine PR build b11549 against main's b10068:", correct["verdict"], "exit", rc_correct, "-", correct["summary"])
print("engine PR build b9873 against main's b10068:", broken["verdict"], "exit", rc_broken, "-", broken["summary"])
PY
echo "engine PR-build recipe passed"
