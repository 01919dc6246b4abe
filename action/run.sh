#!/usr/bin/env bash
# The gate Action's run step (action.yml), also run locally by .ci/action.sh.
#
# Runs `gate run` on every manifest in $GATE_MANIFESTS (whitespace-separated) into
# $GATE_OUT/<manifest name>/, $GATE_JOBS (default 1) at a time, and maps each exit code to the job's outcome:
#   0 pass -> success            1 fail, 3 error, 5 partial -> failure
#   6 unproven (nothing failed, but gate could not prove a required check) -> failure, named unproven
#   2 bad input -> failure, annotated at the manifest's file and line (gate's FILE:LINE:COL: field: message)
#   4 awaiting approval -> $GATE_ON_AWAITING:
#        neutral (default): success with a ::warning saying a signed approval is needed
#        failure: the step fails        success: success with a ::notice
# GitHub shows at most 10 error annotations per step: each run writes its annotations (one per
# failing check) to <out>/annotations.txt, and this step prints at most 10 errors over all the
# manifests; the job summary opens with a table of every manifest (verdict, approval state, every
# failing check), then each dossier.
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

# Each run writes $out_root/<name>/ (and gate keeps its previous run in <name>.previous/, this step its
# log in <name>.action/): two manifests whose names meet there (gate/a/m.yaml and gate/b/m.yaml; m.yaml
# and m.previous.yaml) would write one folder, and one run's verdict would stand for both. Refused up
# front, naming both, before anything runs.
declare -A owner=()
for manifest in $manifests; do
  name=$(basename "$manifest"); name=${name%.*}
  for slot in "$name" "$name.previous" "$name.action"; do
    if [ -n "${owner[$slot]:-}" ]; then
      echo "::error file=$manifest,title=gate action::$manifest and ${owner[$slot]} would share $out_root/$slot/ (each run writes $out_root/<file name>/): rename one of them"
      exit 2
    fi
  done
  owner[$name]=$manifest
  for slot in "$name.previous" "$name.action"; do owner[$slot]=$manifest; done
done

mkdir -p "$out_root"
# Before any run starts, every older output of these manifests moves aside (gate's own <name>.previous/):
# a step cancelled while an earlier manifest runs must not leave a later one's old verdict in <name>/.
for manifest in $manifests; do
  name=$(basename "$manifest"); name=${name%.*}
  if [ -f "$out_root/$name/results.json" ]; then
    rm -rf "$out_root/$name.previous" && mv "$out_root/$name" "$out_root/$name.previous"
  fi
  rm -rf "$out_root/$name.action"
done
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


jobs=${GATE_JOBS:-1}
case "$jobs" in ''|*[!0-9]*|0) echo "::error title=gate action::jobs must be a positive integer, not '$jobs'"; exit 2;; esac
summary_file=${GITHUB_STEP_SUMMARY:-}

run_one() {  # run_one MANIFEST OUT: gate run, its log, exit code and annotations beside its outputs
  local manifest=$1 out=$2
  mkdir -p "$out.action"
  : > "$out.action/annotations.txt"; : > "$out.action/summary.md"
  # shellcheck disable=SC2086  # GATE_ARGS is a list of words by design
  GATE_ANNOTATIONS="$out.action/annotations.txt" GITHUB_STEP_SUMMARY="$out.action/summary.md" \
    "$gate_bin" run "$manifest" --out "$out" $extra_args > "$out.action/log" 2>&1
  echo $? > "$out.action/rc"
}

names=()
for manifest in $manifests; do
  name=$(basename "$manifest"); name=${name%.*}
  names+=("$name"); out="$out_root/$name"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  run_one "$manifest" "$out" &
done
wait

worst=0
verdicts=""
errors_shown=0
errors_left=0
table="| manifest | verdict | approval | failing checks |"$'\n'"|---|---|---|---|"
i=0
for manifest in $manifests; do
  name=${names[$i]}; i=$((i + 1))
  out="$out_root/$name"
  echo "::group::gate run $manifest"
  cat "$out.action/log"
  echo "::endgroup::"
  rc=$(cat "$out.action/rc")
  # the verdict as results.json records it (pass-with-waivers, unproven, ...); else from the exit code
  verdict=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["verdict"])' "$out/results.json" 2>/dev/null) \
    || verdict=""
  [ "$rc" -eq 2 ] && verdict=bad-input  # nothing ran: an older results.json must not speak
  # a verdict that held with warnings says so, pytest style ("pass, 1 warning"): its summary leads with the tally
  warned=$(python3 -c 'import json, re, sys; m = re.match(r"\d+ passed, (\d+ warnings?) \(", json.load(open(sys.argv[1]))["summary"]); print(m.group(1) if m else "")' "$out/results.json" 2>/dev/null) \
    || warned=""
  [ "$rc" -eq 2 ] && warned=""
  approval="n/a"
  failing=""
  case $rc in
    0) verdict=${verdict:-pass}; approval="not needed"
       # exit 0 with results.json awaiting approval: the ledger's approvals of the same evidence counted
       # (approval.json beside it names them), so the run stands approved without a new signature
       [ "$verdict" = awaiting-approval ] && verdict=approved ;;
    4) verdict=awaiting-approval
       # the approve command exactly as the dossier prints it (with the run's --ledger and --trust)
       approve=$(sed -n 's/^ *\(gate approve .*\)$/\1/p' "$out/dossier.md" 2>/dev/null | head -n 1)
       approve=${approve:-"gate approve $out --key KEY --reason '…'"}
       approval="awaiting: \`$approve\`"
       message="$manifest: every check held, but an approximate change needs a signed approval: $approve (docs/audit.md)"
       case "$on_awaiting" in
         neutral) echo "::warning title=gate: awaiting approval (neutral)::$message"; rc=0 ;;
         success) echo "::notice title=gate: awaiting approval::$message"; rc=0 ;;
         failure) echo "::error title=gate: awaiting approval::$message"; errors_shown=$((errors_shown + 1)) ;;
       esac ;;
    1) verdict=${verdict:-fail} ;;
    2) verdict=bad-input ;;
    3) verdict=${verdict:-error} ;;
    5) verdict=partial ;;
    6) verdict=unproven ;;  # nothing failed, but gate could not prove a required check here: still red
    *) verdict="exit-$rc" ;;
  esac
  [ -f "$out/dossier.approved.md" ] && approval="approved (dossier.approved.html)"
  [ "$verdict" = approved ] && approval=approved
  if [ "$verdict" = bad-input ]; then
    # gate's one-line error: "gate: FILE:LINE:COL: field: message" -> an annotation at that file and line
    while IFS= read -r line; do
      if [[ $line =~ ^gate:\ (.+):([0-9]+):([0-9]+):\ (.*)$ ]]; then
        note="::error file=${BASH_REMATCH[1]},line=${BASH_REMATCH[2]},col=${BASH_REMATCH[3]},title=gate: bad manifest::${BASH_REMATCH[4]}"
      else
        note="::error file=$manifest,title=gate: bad input::${line#gate: }"
      fi
      failing="bad input: ${line#gate: }"
      if [ "$errors_shown" -lt 10 ]; then echo "$note"; errors_shown=$((errors_shown + 1))
      else errors_left=$((errors_left + 1)); fi
    done < <(grep '^gate: ' "$out.action/log" | head -n 3)
  fi
  while IFS= read -r line; do
    case $line in
      ::error*)
        title=${line#*title=}; title=${title%%::*}; title=${title//%3A/:}; title=${title//%2C/,}
        failing="$failing${failing:+, }${title#gate }"
        if [ "$errors_shown" -lt 10 ]; then echo "$line"; errors_shown=$((errors_shown + 1))
        else errors_left=$((errors_left + 1)); fi ;;
      *) echo "$line" ;;
    esac
  done < "$out.action/annotations.txt"
  cell=${failing:-none}
  table="$table"$'\n'"| \`$manifest\` | $verdict${warned:+, $warned} | $approval | ${cell//|/\\|} |"
  verdicts="$verdicts $name=$verdict"
  echo "gate: $manifest -> $verdict (job outcome: $([ "$rc" -eq 0 ] && echo success || echo failure))"
  # the worst run by gate.core.result.VERDICT_PRECEDENCE, not by number: a failure (1) outranks
  # unproven (6), partial (5) and awaiting approval (4); an error or bad input outranks everything
  [ "$(rank "$rc")" -gt "$(rank "$worst")" ] && worst=$rc
done
if [ "$errors_left" -gt 0 ]; then
  echo "::notice title=gate: annotations capped::GitHub shows 10 error annotations per step; $errors_left more failing checks are listed in the job summary"
fi

if [ -n "$summary_file" ]; then
  {
    echo "## gate: ${#names[@]} manifest(s)"
    echo
    echo "$table"
    [ "$errors_left" -gt 0 ] && { echo; echo "GitHub shows 10 error annotations per step: $errors_left more failing checks are annotated only here."; }
    echo
    for name in "${names[@]}"; do cat "$out_root/$name.action/summary.md"; done
  } >> "$summary_file"
fi

if [ -n "${GITHUB_OUTPUT:-}" ]; then
  {
    echo "verdicts=${verdicts# }"
    echo "exit-code=$worst"
    echo "out-dir=$out_root"
  } >> "$GITHUB_OUTPUT"
fi
exit "$worst"
