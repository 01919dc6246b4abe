"""The known llama.cpp build bugs of benchmarks/engine_builds.py (KNOWN_BUGS) and how a run is judged
against them: a buggy build must show its bug (exit code, check, class), a fixed one the documented
verdict. Pure: no server (the runs themselves are .ci/engine-builds.sh)."""

from __future__ import annotations

import sys

from gate.checks._diagnosis import BUG_CLASSES
from tests.support.repo import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from engine_builds import BUILDS, KNOWN_BUGS, expected, judge_run
from engine_llamacpp import EXAMPLES

from gate.adapters.openai.xllamacpp_server import build_number

NUMBERS = [build_number(v) for v in BUILDS]


def test_each_known_bug_names_wheels_that_exist_and_a_fixed_build_outside_its_range() -> None:
    for bug in KNOWN_BUGS:
        assert {bug.first, bug.last, bug.fixed} <= set(NUMBERS), bug.name
        assert bug.first <= bug.last < bug.fixed and not bug.covers(bug.fixed, bug.example), bug.name
        assert bug.example in EXAMPLES
        assert all((REPO / "gate" / "checks" / name.replace("-", "_")).is_dir() for name in bug.checks())
        assert bug.bug_class is None or bug.bug_class in BUG_CLASSES
        assert (bug.status == "error") == (bug.exit == 14) and bug.upstream


def record(check: str, status: str, bug_class: str | None) -> dict[str, object]:
    diagnosis = {"problems": ["x"], **({"bug_class": bug_class} if bug_class else {})}
    return {
        "checks": [
            {"check": "engine-prefix-parity", "status": "pass"},
            {"check": check, "status": status, "diagnosis": diagnosis},
        ]
    }


def test_a_buggy_build_must_show_its_bug_with_its_class() -> None:
    example = "engine-llamacpp-sliding-window"
    assert expected(9873, example, "pass")[0] == 1 and expected(10068, example, "pass") == (0, [])
    caught = record("engine-concurrent-conversations", "fail", "continuous-batching")
    assert judge_run(9873, example, "pass", 1, caught) == []
    unclassed = record("engine-concurrent-conversations", "fail", None)
    assert "with class None, not continuous-batching" in judge_run(9873, example, "pass", 1, unclassed)[0]
    # the bug did not show: exit 0 on a buggy build is a departure, as is exit 1 on the fixed one
    assert "expected 1 (swa-reuse-under-load-wrong)" in judge_run(9873, example, "pass", 0, {"checks": []})[0]
    assert "exit 1, expected 0 (pass)" in judge_run(10068, example, "pass", 1, caught)[0]
    # the batch it lands in decides which of its two checks shows it: either counts, neither does not
    batched = record("engine-batch-invariance", "fail", "continuous-batching")
    assert judge_run(9873, example, "pass", 1, batched) == []
    missed = judge_run(9873, example, "pass", 1, record("engine-prefix-parity", "fail", "cached-reply"))
    assert "not shown: engine-concurrent-conversations is None, engine-batch-invariance is None" in missed[0]


def test_ignore_eos_is_an_error_on_both_examples_of_b8672_only() -> None:
    for example in ("engine-llamacpp-prefix", "engine-llamacpp-quantised-kv"):
        code, bugs = expected(8672, example, "pass")
        assert code == 14 and [b.name for b in bugs] == ["ignore-eos-ignored"]
        assert judge_run(8672, example, "pass", 14, record("engine-batch-invariance", "error", None)) == []
    assert expected(8929, "engine-llamacpp-prefix", "pass") == (0, [])
    assert expected(8672, "engine-llamacpp-hosted", "pass") == (0, [])
