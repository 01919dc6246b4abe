#!/usr/bin/env bash
# Exercise the gate Action's run step (action/run.sh) locally, as GitHub would run it: a pull
# request in a scratch git repository whose manifests name the changed file in `change.paths`.
# Checks: a passing manifest succeeds; a failing one fails with ::error annotations on the manifest
# AND on the changed file; the Markdown summary lands in $GITHUB_STEP_SUMMARY; step outputs are set;
# exit 4 (awaiting approval) maps to neutral (success + warning) by default and to failure when asked.
set -euo pipefail
cd "$(dirname "$0")/.."
repo_root=$PWD
gate_bin=${GATE_BIN:-$repo_root/.venv/bin/gate}
work=$(mktemp -d /tmp/gate-action.XXXXXX)
trap 'rm -rf "$work"' EXIT
export GATE_THREADS=1

fail() { echo "action check FAILED: $*" >&2; exit 1; }

# A pull request: main has the kernel, the PR branch changes it and adds the manifests.
git init -q -b main "$work/pr"
cd "$work/pr"
git config user.email ci@example.com; git config user.name ci
mkdir -p kernels gate; echo "# paged attention kernel" > kernels/paged.py; echo "# untouched" > kernels/other.py
git add -A; git commit -qm base
git update-ref refs/remotes/origin/main HEAD
echo "# the change under review" >> kernels/paged.py
for name in reference-static-layout reference-fault-missing-start-pos reference-quant-int8; do
  # name the kernel (changed) and another file (unchanged) as the change's own files
  sed '/^intervention:/i change: {paths: [kernels/paged.py, kernels/other.py]}' \
    "$repo_root/examples/$name.yaml" > "gate/$name.yaml"
done
git add -A; git commit -qm change

run_step() {  # run_step OUT_NAME MANIFESTS [GATE_ON_AWAITING]; sets rc, log, summary, outputs
  local out=$1 manifests=$2 mode=${3:-neutral}
  summary="$work/$out.summary.md"; outputs="$work/$out.outputs"; log="$work/$out.log"
  : > "$summary"; : > "$outputs"
  rc=0
  env GITHUB_ACTIONS=true GITHUB_WORKSPACE="$work/pr" GITHUB_STEP_SUMMARY="$summary" GITHUB_OUTPUT="$outputs" \
      GATE_BASE_REF=main GATE_BIN="$gate_bin" GATE_OUT="$work/$out" GATE_MANIFESTS="$manifests" \
      GATE_ON_AWAITING="$mode" "$repo_root/action/run.sh" > "$log" 2>&1 || rc=$?
}

echo "--- passing manifest"
run_step pass gate/reference-static-layout.yaml
[ "$rc" -eq 0 ] || { cat "$log"; fail "passing manifest: exit $rc"; }
grep -q '^verdicts=reference-static-layout=pass$' "$outputs" || fail "no verdict output: $(cat "$outputs")"
grep -q 'gate: PASS' "$summary" || fail "the step summary has no PASS dossier"
grep -q '^::error' "$log" && fail "a passing run annotated errors"
test -f "$work/pass/reference-static-layout/junit.xml" || fail "no junit.xml"

echo "--- failing manifest"
run_step fail gate/reference-fault-missing-start-pos.yaml
[ "$rc" -eq 1 ] || { cat "$log"; fail "failing manifest: exit $rc, expected 1"; }
grep -q '^::error file=gate/reference-fault-missing-start-pos.yaml,' "$log" || fail "no annotation on the manifest"
grep -q '^::error file=kernels/paged.py,' "$log" || fail "no annotation on the changed file named in change.paths"
grep -q '^::error file=kernels/other.py,' "$log" && fail "annotated a file the pull request did not change"
grep -q 'gate: FAIL' "$summary" && grep -q '### What next' "$summary" || fail "the summary lacks the FAIL dossier or What next"
grep -q '^verdicts=reference-fault-missing-start-pos=fail$' "$outputs" || fail "wrong verdict output"

echo "--- awaiting approval: neutral by default, failure when asked"
run_step awaiting gate/reference-quant-int8.yaml
[ "$rc" -eq 0 ] || { cat "$log"; fail "awaiting approval should be neutral (exit 0), got $rc"; }
grep -q '^::warning title=gate: awaiting approval (neutral)::.*gate approve' "$log" || fail "no neutral warning"
grep -q 'awaiting-approval' "$outputs" || fail "no awaiting-approval verdict output"
run_step strict gate/reference-quant-int8.yaml failure
[ "$rc" -eq 4 ] || fail "on-awaiting-approval: failure should fail the step (exit 4), got $rc"

echo "action script: pass, fail (annotated on the changed file), neutral and strict approval all as documented"
