"""The known llama.cpp build bugs of benchmarks/engine_builds.py (KNOWN_BUGS) and how a run is judged
against them: a buggy build must show its bug (exit code, check, class), a fixed one the documented
verdict. Pure: no server (the runs themselves are .ci/engine-builds.sh)."""

from __future__ import annotations

import sys

from gate.checks._diagnosis import BUG_CLASSES
from tests.support.repo import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from engine_builds import BUILD_EXAMPLES, BUILDS, KNOWN_BUGS, expected, judge_run

from gate.adapters.openai.xllamacpp_server import build_number

NUMBERS = [build_number(v) for v in BUILDS]


def test_each_known_bug_names_wheels_that_exist_and_a_fixed_build_outside_its_range() -> None:
    for bug in KNOWN_BUGS:
        assert {bug.first, bug.last, bug.fixed} <= set(NUMBERS), bug.name
        assert bug.first <= bug.last < bug.fixed and not bug.covers(bug.fixed, bug.example), bug.name
        assert bug.example in BUILD_EXAMPLES and (REPO / "examples" / f"{bug.example}.yaml").is_file()
        assert all((REPO / "gate" / "checks" / name.replace("-", "_")).is_dir() for name in bug.checks())
        assert bug.bug_class is None or bug.bug_class in BUG_CLASSES
        assert (bug.status == "error") == (bug.exit == 14) and bug.upstream


def record(check: str, status: str, bug_class: str | None, *more: tuple[str, str, str]) -> dict[str, object]:
    """A run's results.json: engine-prefix-parity passed, `check` in `status` with `bug_class`, and `more`
    checks as (check, status, class)."""
    shown = [
        {"check": name, "status": state, "diagnosis": {"problems": ["x"], **({"bug_class": cls} if cls else {})}}
        for name, state, cls in [(check, status, bug_class), *more]
    ]
    return {"checks": [{"check": "engine-prefix-parity", "status": "pass"}, *shown]}


RESTORED = ("engine-slot-restore", "fail", "restored-state")
"""b9538..b9873's other sliding-window bug, shown beside the first in every run of that example."""


def test_a_buggy_build_must_show_its_bug_with_its_class() -> None:
    example = "engine-llamacpp-sliding-window"
    assert expected(9873, example, "pass")[0] == 1 and expected(10068, example, "pass") == (0, [])
    caught = record("engine-concurrent-conversations", "fail", "continuous-batching", RESTORED)
    assert judge_run(9873, example, "pass", 1, caught) == []
    unclassed = record("engine-concurrent-conversations", "fail", None, RESTORED)
    assert "with class None, not continuous-batching" in judge_run(9873, example, "pass", 1, unclassed)[0]
    # the bug did not show: exit 0 on a buggy build is a departure, as is exit 1 on the fixed one
    names = "swa-reuse-under-load-wrong, swa-slot-restore-foreign-checkpoint"
    assert f"expected 1 ({names})" in judge_run(9873, example, "pass", 0, {"checks": []})[0]
    assert "exit 1, expected 0 (pass)" in judge_run(10068, example, "pass", 1, caught)[0]
    # the batch it lands in decides which of its two checks shows it: either counts, neither does not
    batched = record("engine-batch-invariance", "fail", "continuous-batching", RESTORED)
    assert judge_run(9873, example, "pass", 1, batched) == []
    missed = judge_run(9873, example, "pass", 1, record("engine-prefix-parity", "fail", "cached-reply", RESTORED))
    assert "not shown: engine-concurrent-conversations is None, engine-batch-invariance is None" in missed[0]


def test_a_slot_restored_on_another_prompts_checkpoint_is_restored_state_not_a_crash() -> None:
    # b9873 also aborts on the truncated copy later in the same check: the class must still name the restore
    example, first = (
        "engine-llamacpp-sliding-window",
        ("engine-concurrent-conversations", "fail", "continuous-batching"),
    )
    assert judge_run(9873, example, "pass", 1, record(*RESTORED, first)) == []
    renamed = judge_run(9873, example, "pass", 1, record("engine-slot-restore", "fail", "crash", first))
    assert renamed == [
        f"b9873 {example}: known bug swa-slot-restore-foreign-checkpoint shows in engine-slot-restore "
        "with class crash, not restored-state"
    ]
    assert [b.name for b in expected(9538, example, "pass")[1]] == [
        "swa-reuse-under-load-wrong",
        "swa-slot-restore-foreign-checkpoint",
    ]


def test_speculative_logprobs_left_out_on_b8672_beside_ignore_eos() -> None:
    example = "engine-llamacpp-speculative"
    code, bugs = expected(8672, example, "pass")
    assert code == 14 and [b.name for b in bugs] == ["ignore-eos-ignored", "speculative-logprobs-unreported"]
    both = record("engine-batch-invariance", "error", None, ("engine-prefix-parity", "fail", "unreported-logprobs"))
    assert judge_run(8672, example, "pass", 14, both) == []
    as_cache = record("engine-batch-invariance", "error", None, ("engine-prefix-parity", "fail", "cached-reply"))
    assert "with class cached-reply, not unreported-logprobs" in judge_run(8672, example, "pass", 14, as_cache)[0]
    assert expected(9093, example, "pass") == (0, [])


def test_n_gram_drafted_logprobs_on_b8929_fail_the_conversations_check_whatever_its_class() -> None:
    # the speculative example on b8929: engine-concurrent-conversations fails (3 of 3 full runs), an
    # accepted n-gram draft reported with logprob 0; the class gate gives it is not pinned (None)
    example = "engine-llamacpp-speculative"
    code, bugs = expected(8929, example, "pass")
    assert code == 1 and [b.name for b in bugs] == ["ngram-drafted-logprobs-unreported"]
    shown = record("engine-concurrent-conversations", "fail", "continuous-batching")
    assert judge_run(8929, example, "pass", 1, shown) == []
    assert (
        "not shown: engine-concurrent-conversations is pass"
        in judge_run(8929, example, "pass", 0, record("engine-concurrent-conversations", "pass", None))[1]
    )
    assert expected(8929, "engine-llamacpp-prefix", "pass") == (0, [])


def test_ignore_eos_is_an_error_on_both_examples_of_b8672_only() -> None:
    for example in ("engine-llamacpp-prefix", "engine-llamacpp-quantised-kv"):
        code, bugs = expected(8672, example, "pass")
        assert code == 14 and [b.name for b in bugs] == ["ignore-eos-ignored"]
        assert judge_run(8672, example, "pass", 14, record("engine-batch-invariance", "error", None)) == []
    assert expected(8929, "engine-llamacpp-prefix", "pass") == (0, [])
    assert expected(8672, "engine-llamacpp-hosted", "pass") == (0, [])


def test_a_one_token_prefix_missed_on_b9294_shows_on_the_speculative_example_too() -> None:
    # `gate bisect` over the speculative example ran b9294: engine-prefix-parity failed, "no cache hit at
    # length(s) 1", class missed-reuse (benchmarks/engine-bisect.md), as on the prefix example
    example = "engine-llamacpp-speculative"
    assert [b.name for b in expected(9294, example, "pass")[1]] == ["one-token-prefix-not-reused"]
    missed = {
        "checks": [{"check": "engine-prefix-parity", "status": "fail", "diagnosis": {"bug_class": "missed-reuse"}}]
    }
    assert judge_run(9294, example, "pass", 1, missed) == []
    assert expected(9093, example, "pass") == (0, []) and expected(9538, example, "pass") == (0, [])
