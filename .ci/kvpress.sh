#!/usr/bin/env bash
# Test the hf adapter's kvpress path in its own environment: kvpress pins transformers<5.3, so it
# lives beside (not in) the main venv, with copies on kvpress 0.5.4 and 0.5.3 (known bugs) beside it. Usage: bash .ci/kvpress.sh [--prepare]  (from the repository root; --prepare only sets the venv up)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-kvpress
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# torch first, pinned: an unpinned resolve would pull a multi-GB CUDA build.
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q -e ".[kvpress]" "transformers==5.2.*" pytest hypothesis
# kvpress 0.5.4, the release before the fix of a one-token cache emptied (docs/real-bugs.md): a
# hard-linked copy of the venv above with only kvpress swapped (about 15 s; torch never reinstalled).
# Its scripts' #! lines still name the first venv's python, so it is only ever run as
# "$BUGGY/bin/python -m ..." (pip, pytest, gate), and kvpress_is below checks what each imports
BUGGY=.venv-kvpress-0.5.4
if [ ! -f "$BUGGY/.kvpress-0.5.4" ]; then
  rm -rf "$BUGGY" "$BUGGY.partial"
  cp -al "$VENV" "$BUGGY.partial"
  "$BUGGY.partial/bin/python" -m pip install -q --no-deps kvpress==0.5.4
  mv "$BUGGY.partial" "$BUGGY" && touch "$BUGGY/.kvpress-0.5.4"
fi
# kvpress 0.5.3, the release before PR #227 (protected positions scored max + 1): the same kind of copy
OLDER=.venv-kvpress-0.5.3
if [ ! -f "$OLDER/.kvpress-0.5.3" ]; then
  rm -rf "$OLDER" "$OLDER.partial"
  cp -al "$VENV" "$OLDER.partial"
  "$OLDER.partial/bin/python" -m pip install -q --no-deps kvpress==0.5.3
  mv "$OLDER.partial" "$OLDER" && touch "$OLDER/.kvpress-0.5.3"
fi
# this tree's entry points in the copies too, where a check was added since a copy was made (about 25 s)
entry_points() { "$1/bin/python" -c "import importlib.metadata as m; print(sorted(m.entry_points(group='gate.checks')))"; }
for copy in "$BUGGY" "$OLDER"; do
  if [ "$(entry_points "$copy")" != "$(entry_points "$VENV")" ]; then
    "$copy/bin/python" -m pip install -q --no-deps -e .
  fi
done
# each venv imports the kvpress it is named for, from itself (the replays below mean nothing otherwise)
kvpress_is() {  # venv, "fixed" (0.5.5 or later), "0.5.4" or "0.5.3"
  "$1/bin/python" - "$2" <<'PY'
import importlib.metadata, sys
import kvpress
version, want = importlib.metadata.version("kvpress"), sys.argv[1]
fixed = tuple(int(p) for p in version.split(".")[:3]) >= (0, 5, 5)
if not kvpress.__file__.startswith(sys.prefix) or (version != want if want != "fixed" else not fixed):
    sys.exit(f"{sys.prefix}: kvpress {version} from {kvpress.__file__}, expected {want}")
PY
}
kvpress_is "$VENV" fixed
kvpress_is "$BUGGY" 0.5.4
kvpress_is "$OLDER" 0.5.3
[ "${1:-}" = --prepare ] && exit 0  # set-up only (.ci/run does it in the background)
"$VENV/bin/python" -c "import kvpress, transformers; print('kvpress ok; transformers', transformers.__version__)"
export HF_HUB_OFFLINE=1
"$VENV/bin/python" -m pytest tests/adapters/hf/test_hf_kvpress.py -q
fails_on() {  # venv, -k EXPR, "N failed", the assertion's text, what it shows: the tests must fail there on it
  local buggy
  buggy=$("$1/bin/python" -m pytest tests/adapters/hf/test_hf_kvpress.py -q -p no:cacheprovider -k "$2" 2>&1 || true)
  if ! grep -Eq "^$3[ ,]" <<<"$(tail -1 <<<"$buggy")" || ! grep -q "$4" <<<"$buggy"; then
    echo "$1: -k $2 did not give '$3' on '$4' ($5 went unseen):" >&2
    tail -5 <<<"$buggy" >&2
    exit 1
  fi
  echo "$1: $5, caught ($3)"
}
fails_on_0_5_4() { fails_on "$BUGGY" "$@"; }
# the one-token tests hold kvpress PR #264: they must fail on 0.5.4, every one on its assertion
fails_on_0_5_4 one_token "4 failed" "AssertionError" "one-token prompts empty the cache"
# KnormPress scored by a bfloat16 key norm (fixed in 0.5.5): evict-invariants, recomputing the score in
# float32, must break evict-ranking on 0.5.4 (the test passed on 0.5.5 in the run above)
fails_on_0_5_4 bfloat16_knorm "1 failed" "AssertionError: evict-ranking" \
  "KnormPress's bfloat16 key norm evicts off the float32 ranking (evict-ranking)"
# SnapKV, ExpectedAttention and TOVA scored what they protect with scores.max() up to 0.5.3 (PR #227,
# fixed in 0.5.4): where the budget is just the protected positions, a window position, a sink or the
# last token is evicted. evict-invariants must break evict-protected on 0.5.3 for all three presses and
# hold on 0.5.4 (here) and 0.5.5 (the run above); the whole check on the same presses (which refuse its
# 1-token scenario on every release, class crash) must name evict-protected on 0.5.3 and only crash on
# 0.5.4 and 0.5.5. About 11 s each.
fails_on "$OLDER" just_holds "3 failed" "AssertionError: evict-protected" \
  "SnapKV, ExpectedAttention and TOVA evict a position they protect (evict-protected)"
fails_on "$OLDER" refuses_short "3 failed" "AssertionError: evict-protected" \
  "evict-invariants names evict-protected beside the presses' short-prompt crashes"
"$BUGGY/bin/python" -m pytest tests/adapters/hf/test_hf_kvpress.py -q -p no:cacheprovider -k "just_holds or refuses_short"
# kvpress-short-prompt: the one-token bug caught by a `gate run` (check short-prompt of the eviction
# policy): on 0.5.4 it must fail with class kv-truncation, on 0.5.5 pass (a run of one check is a
# partial run, exit 5 on a pass and 1 on a failure: the check's own status is what is asserted)
short_prompt() {  # venv, expected "status class" of short-prompt
  local out rc got
  out=$(mktemp -d)
  rc=0
  "$1/bin/python" -m gate run examples/hf-kvpress-short-prompt.yaml --check short-prompt --out "$out" -q || rc=$?
  got=$("$1/bin/python" - "$out/results.json" <<'PY'
import json, sys
checks = {c["check"]: c for c in json.load(open(sys.argv[1]))["checks"]}
check = checks["short-prompt"]
print(check["status"], (check.get("diagnosis") or {}).get("bug_class"), "|", check["message"])
PY
)
  rm -rf "$out"
  if [ "${got%% |*}" != "$2" ]; then
    echo "kvpress-short-prompt in $1: expected short-prompt '$2', got '$got' (exit $rc)" >&2
    exit 1
  fi
  echo "kvpress-short-prompt in $1: $got"
}
short_prompt "$VENV" "pass None"
short_prompt "$BUGGY" "fail kv-truncation"
