#!/usr/bin/env bash
# Exercise the gate Action's run step (action/run.sh) locally, as GitHub would run it: a pull
# request in a scratch git repository whose manifests name the changed file in `change.paths`.
# Checks: a passing manifest and a bad one run at once (jobs: 2): the pass has no error, the bad one
# an ::error at its file and line; a failing one fails with exactly one ::error per failing check, on
# the changed file; the Markdown summary (a table of every manifest with its approval state, then the
# dossiers) lands in $GITHUB_STEP_SUMMARY; step outputs are set; exit 4 (awaiting approval) maps to
# neutral (success + warning) by default and to failure when asked.
set -euo pipefail
cd "$(dirname "$0")/.."
repo_root=$PWD
gate_bin=${GATE_BIN:-$repo_root/.venv/bin/gate}
work=$(mktemp -d /tmp/gate-action.XXXXXX)
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$work"' EXIT
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
printf 'apiVersion: gate/v1\nname: bad\nintervention: layout\nclaim:\n  level: exakt\n' > gate/bad.yaml
git add -A; git commit -qm change

run_step() {  # run_step OUT_NAME MANIFESTS [GATE_ON_AWAITING [GATE_JOBS]]; sets rc, log, summary, outputs
  local out=$1 manifests=$2 mode=${3:-neutral} jobs=${4:-1}
  summary="$work/$out.summary.md"; outputs="$work/$out.outputs"; log="$work/$out.log"
  : > "$summary"; : > "$outputs"
  rc=0
  env GITHUB_ACTIONS=true GITHUB_WORKSPACE="$work/pr" GITHUB_STEP_SUMMARY="$summary" GITHUB_OUTPUT="$outputs" \
      GATE_BASE_REF=main GATE_BIN="$gate_bin" GATE_OUT="$work/$out" GATE_MANIFESTS="$manifests" \
      GATE_ON_AWAITING="$mode" GATE_JOBS="$jobs" "$repo_root/action/run.sh" > "$log" 2>&1 || rc=$?
}

echo "--- a passing manifest and a bad one, two at once"
run_step pass "gate/reference-static-layout.yaml gate/bad.yaml" neutral 2
[ "$rc" -eq 2 ] || { cat "$log"; fail "a bad manifest beside a passing one: exit $rc, expected 2"; }
grep -q '^verdicts=reference-static-layout=pass bad=bad-input$' "$outputs" || fail "no verdict output: $(cat "$outputs")"
grep -q 'gate: PASS' "$summary" || fail "the step summary has no PASS dossier"
# a verdict that held with warnings says so in its cell, pytest style ("pass, 1 warning"; phase-performance's
# warnings follow this machine's load, so the count is optional here)
grep -Eq '^\| `gate/reference-static-layout.yaml` \| pass(, [0-9]+ warnings?)? \| not needed \| none \|$' "$summary" \
  || fail "no summary row for the pass: $(grep static-layout "$summary")"
grep -q '^::error file=gate/bad.yaml,line=4,col=1,title=gate: bad manifest::claim: ' "$log" || { cat "$log"; fail "the bad manifest is not annotated at its line"; }
[ "$(grep -c '^::error' "$log")" -le 3 ] || fail "a passing run annotated errors"
test -f "$work/pass/reference-static-layout/junit.xml" || fail "no junit.xml"

echo "--- failing manifest"
run_step fail gate/reference-fault-missing-start-pos.yaml
[ "$rc" -eq 1 ] || { cat "$log"; fail "failing manifest: exit $rc, expected 1"; }
grep -q '^::error file=kernels/paged.py,' "$log" || fail "no annotation on the changed file named in change.paths"
grep -q '^::error file=kernels/other.py,' "$log" && fail "annotated a file the pull request did not change"
errors=$(grep -c '^::error' "$log"); checks=$(grep '^::error' "$log" | sed 's/.*title=\([^:]*\)::.*/\1/' | sort -u | wc -l)
[ "$errors" -eq "$checks" ] || fail "$errors error annotations for $checks failing checks (one each)"
grep -q 'also concerns gate/reference-fault-missing-start-pos.yaml' "$log" || fail "the annotation does not name the manifest"
grep -q 'gate: FAIL' "$summary" && grep -q '### What next' "$summary" || fail "the summary lacks the FAIL dossier or What next"
grep -q '^verdicts=reference-fault-missing-start-pos=fail$' "$outputs" || fail "wrong verdict output"

echo "--- awaiting approval: neutral by default, failure when asked"
run_step awaiting gate/reference-quant-int8.yaml
[ "$rc" -eq 0 ] || { cat "$log"; fail "awaiting approval should be neutral (exit 0), got $rc"; }
grep -q '^::warning title=gate: awaiting approval (neutral)::.*gate approve' "$log" || fail "no neutral warning"
grep -q 'awaiting-approval' "$outputs" || fail "no awaiting-approval verdict output"
grep -Eq '^\| `gate/reference-quant-int8.yaml` \| awaiting-approval(, [0-9]+ warnings?)? \| awaiting: `gate approve' "$summary" \
  || fail "no approval state in the summary: $(grep quant-int8 "$summary")"
grep -q 'Why it did not pass' "$summary" && fail "an awaiting dossier shows the failure box"
run_step strict gate/reference-quant-int8.yaml failure
[ "$rc" -eq 4 ] || fail "on-awaiting-approval: failure should fail the step (exit 4), got $rc"

echo "action script: pass and bad input at once (annotated at its line), fail (one annotation per check, on the changed file), neutral and strict approval, the summary table, all as documented"
