#!/usr/bin/env bash
# The gate Action's run step (action.yml), also run locally by .ci/action.sh.
#
# Runs `gate run` on every manifest in $GATE_MANIFESTS (whitespace-separated) into
# $GATE_OUT/<manifest name>/, and maps each exit code to the job's outcome:
#   0 pass -> success            1 fail, 3 error, 5 partial -> failure
#   6 unproven (nothing failed, but gate could not prove a required check) -> failure, named unproven
#   2 bad input -> failure       4 awaiting approval -> $GATE_ON_AWAITING:
#        neutral (default): success with a ::warning saying a signed approval is needed
#        failure: the step fails        success: success with a ::notice
# Writes step outputs (verdicts, exit-code, out-dir) to $GITHUB_OUTPUT when set; exit-code is the worst
# run's by verdict precedence (error, fail, unproven, partial, awaiting approval, pass), not the largest number.
# Before running, the files this pull request changed are listed for gate's annotations
# (GATE_CHANGED_FILES; `git diff --name-only BASE...HEAD`, BASE from $GATE_BASE_REF or $GITHUB_BASE_REF).
set -uo pipefail

gate_bin=${GATE_BIN:-gate}
out_root=${GATE_OUT:-gate-out}
on_awaiting=${GATE_ON_AWAITING:-neutral}
manifests=${GATE_MANIFESTS:?GATE_MANIFESTS names the manifests to run}
extra_args=${GATE_ARGS:-}

case "$on_awaiting" in neutral|failure|success) ;; *)
  echo "::error title=gate action::on-awaiting-approval must be neutral, failure or success, not '$on_awaiting'"; exit 2;;
esac

mkdir -p "$out_root"
base=${GATE_BASE_REF:-${GITHUB_BASE_REF:-}}
if [ -n "$base" ] && git rev-parse --verify -q "origin/$base" >/dev/null 2>&1; then
  git diff --name-only "origin/$base...HEAD" > "$out_root/changed-files.txt" 2>/dev/null || : > "$out_root/changed-files.txt"
  export GATE_CHANGED_FILES="$out_root/changed-files.txt"
elif [ -n "${GATE_CHANGED_FILES:-}" ]; then
  export GATE_CHANGED_FILES
fi

rank() {
  case $1 in
    0) echo 0 ;; 4) echo 1 ;; 5) echo 2 ;; 6) echo 3 ;; 1) echo 4 ;; *) echo 5 ;;
  esac
}

worst=0
verdicts=""
for manifest in $manifests; do
  name=$(basename "$manifest"); name=${name%.*}
  out="$out_root/$name"
  echo "::group::gate run $manifest"
  # shellcheck disable=SC2086  # GATE_ARGS is a list of words by design
  "$gate_bin" run "$manifest" --out "$out" $extra_args
  rc=$?
  echo "::endgroup::"
  # the verdict as results.json records it (pass-with-waivers, unproven, ...); else from the exit code
  verdict=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["verdict"])' "$out/results.json" 2>/dev/null) \
    || verdict=""
  [ $rc -eq 2 ] && verdict=bad-input  # nothing ran: an older results.json must not speak
  case $rc in
    0) verdict=${verdict:-pass} ;;
    4) verdict=awaiting-approval
       message="$manifest: every check held, but an approximate change needs a signed approval: gate approve $out --key KEY --reason '…' (docs/audit.md)"
       case "$on_awaiting" in
         neutral) echo "::warning title=gate: awaiting approval (neutral)::$message"; rc=0 ;;
         success) echo "::notice title=gate: awaiting approval::$message"; rc=0 ;;
         failure) echo "::error title=gate: awaiting approval::$message" ;;
       esac ;;
    1) verdict=${verdict:-fail} ;;
    2) verdict=bad-input ;;
    3) verdict=${verdict:-error} ;;
    5) verdict=partial ;;
    6) verdict=unproven ;;  # nothing failed, but gate could not prove a required check here: still red
    *) verdict="exit-$rc" ;;
  esac
  verdicts="$verdicts $name=$verdict"
  echo "gate: $manifest -> $verdict (job outcome: $([ $rc -eq 0 ] && echo success || echo failure))"
  # the worst run by gate.core.result.VERDICT_PRECEDENCE, not by number: a failure (1) outranks
  # unproven (6), partial (5) and awaiting approval (4); an error or bad input outranks everything
  [ "$(rank "$rc")" -gt "$(rank "$worst")" ] && worst=$rc
done

if [ -n "${GITHUB_OUTPUT:-}" ]; then
  {
    echo "verdicts=${verdicts# }"
    echo "exit-code=$worst"
    echo "out-dir=$out_root"
  } >> "$GITHUB_OUTPUT"
fi
exit "$worst"
