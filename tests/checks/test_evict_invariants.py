"""evict-invariants: what an evicting cache kept is what its press promises, on every step."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks.evict_invariants import EvictInvariantsParams, evict_invariants
from gate.checks.evict_invariants.body import Judgement, Step, judge_step
from gate.errors import SubjectCrash
from gate.models.evict_faults import EVICT_FAULTS
from gate.protocols import EvictionPolicy, EvictionStep, subject_call
from tests.support import reference as ref

CLAIM = {
    "level": "bounded-degradation",
    "envelopes": [{"slice": "local-control", "metric": "greedy-match", "comparator": ">=", "threshold": "0.90"}],
}
SINK_WINDOW = {"window": 8, "sink": 2, "chunk_size": 5}
KNORM = {"window": 6, "sink": 2, "budget": 14, "score": "knorm", "chunk_size": 5}


def _evicting(evict: dict[str, Any]) -> Any:
    options = Options.model_validate({"max_len": ref.MAX_LEN, "path": "evicting", "evict": evict})
    return ReferenceAdapter().build(options, device="cpu", dtype="float32", seed=0)


def _run(path: Any, stop: bool = False) -> Any:
    ctx = ref.ctx(ref.path("full"), path, claim=CLAIM)
    ctx.stop_at_first_failure = stop
    return evict_invariants(ctx, EvictInvariantsParams())


@pytest.mark.parametrize("evict", [SINK_WINDOW, KNORM], ids=["sink-window", "knorm"])
def test_a_correct_press_holds_every_invariant_on_prefill_chunks_and_decode(evict: dict[str, Any]) -> None:
    out = _run(_evicting(evict))
    assert out.status == "pass", out.message
    assert out.evidence["phases"] == ["chunk", "decode", "prefill"]
    assert set(out.evidence["invariants"].values()) == {"held"}
    assert out.metrics["score_recomputed_float32"] and out.metrics["max_score_mismatch"] < 1e-5
    # the short prompts (1 token, window - 1) ran and kept everything
    assert {"short-1", f"short-{evict['window'] - 1}"} <= set(out.exercise["scenarios"])


@pytest.mark.parametrize(
    ("fault", "evict", "cls"),
    [
        ("evict-drop-sink", SINK_WINDOW, "evict-protected"),
        ("evict-window-off-by-one", SINK_WINDOW, "evict-protected"),
        ("evict-rank-sign", KNORM, "evict-ranking"),
        ("evict-budget-off-by-one", SINK_WINDOW, "evict-budget"),
        ("evict-positions-renumbered", KNORM, "evict-position"),
    ],
)
def test_each_planted_fault_breaks_exactly_its_own_invariant(fault: str, evict: dict[str, Any], cls: str) -> None:
    out = _run(_evicting(evict).with_fault(fault))
    assert out.status == "fail", out.message
    assert out.diagnosis is not None and out.diagnosis["bug_class"] == cls, out.message
    assert out.diagnosis["classes"] == [cls], out.message  # one invariant, not a cascade
    stopped = _run(_evicting(evict).with_fault(fault), stop=True)
    assert stopped.status == "fail" and stopped.diagnosis is not None and stopped.diagnosis["bug_class"] == cls


def test_the_faults_are_the_evicting_paths_own_and_a_manifest_can_name_one() -> None:
    path = _evicting({**KNORM, "fault": "evict-rank-sign"})
    assert path.name.endswith("+evict-rank-sign") and set(EVICT_FAULTS) <= set(path.faults())
    assert _run(path).diagnosis["bug_class"] == "evict-ranking"  # type: ignore[index]
    with pytest.raises(ValueError, match="unknown eviction fault"):
        Options.model_validate({"path": "evicting", "evict": {"window": 4, "fault": "evict-nothing"}})
    with pytest.raises(ValueError, match="at least sink \\+ window"):
        Options.model_validate({"path": "evicting", "evict": {"window": 4, "sink": 2, "budget": 5}})


def test_a_path_that_cannot_say_what_it_kept_is_unproven_with_why() -> None:
    out = _run(ref.path("dynamic"))
    assert out.status == "unproven" and "EvictionReport" in out.message


def _step(kept: list[int], scores: list[float], positions: list[int] | None = None) -> Step:
    n = len(scores)
    pool = torch.arange(n).view(1, 1, n)
    kept_t = torch.tensor(kept).view(1, 1, -1)
    carried = torch.tensor(positions if positions is not None else kept).view(1, 1, -1)
    keys = torch.zeros(1, 1, n, 2)
    keys[..., 0] = -torch.tensor(scores)  # knorm's score is minus the key's norm
    return Step("t", "prefill", False, EvictionStep(0, n, pool, kept_t, carried, None, keys))


def test_a_tie_across_the_boundary_is_a_note_with_its_size_never_a_failure() -> None:
    policy = EvictionPolicy("knorm", "knorm", sink=1, window=1, keeps_last=True, budget=4)
    # pool of 6: 0 the sink, 5 the window; of 1..4 (scores -3, -1, -1, -1) two are kept from a 3-way tie
    step = _step([0, 2, 3, 5], [-9.0, -3.0, -1.0, -1.0, -1.0, -0.5])
    j = Judgement()
    judge_step(policy, step, 0, 1e-5, j)
    assert j.findings == [] and len(j.ties) == 1 and j.ties[0]["size"] == 3 and j.ties[0]["kept"] == 2
    wrong = Judgement()
    judge_step(policy, _step([0, 1, 2, 5], [-9.0, -3.0, -1.0, -1.0, -1.0, -0.5]), 0, 1e-5, wrong)
    assert [f.cls for f in wrong.findings] == ["evict-ranking"]


def test_a_short_prompt_that_lost_a_token_is_evict_short() -> None:
    policy = EvictionPolicy("sink-window", "position", sink=0, window=4, keeps_last=True, budget=4)
    st = _step([0, 2], [0.0, 0.0, 0.0]).step
    j = Judgement()
    judge_step(policy, Step("short-3", "prefill", True, st), 0, 1e-5, j)
    assert "evict-short" in [f.cls for f in j.findings]


class _RefusesOneToken:
    """A real evicting path whose prefill refuses a 1-token prompt inside the subject, as kvpress's
    SnapKV, StreamingLLM, ExpectedAttention and TOVA refuse prompts up to their window or sinks."""

    def __init__(self, path: Any) -> None:
        self._path = path

    def __getattr__(self, name: str) -> Any:
        return getattr(self._path, name)

    def new_session(self, batch: int) -> Any:
        session = self._path.new_session(batch)
        prefill = session.prefill

        def refusing(tokens: torch.Tensor) -> Any:
            with subject_call("press.compress", length=0):
                assert tokens.shape[1] > 1, "Query length 1 should be greater than the window size"
            return prefill(tokens)

        session.prefill = refusing
        return session


def test_a_crash_in_one_scenario_is_a_finding_and_the_others_are_still_judged() -> None:
    out = _run(_RefusesOneToken(_evicting(SINK_WINDOW)))
    assert out.status == "fail" and out.diagnosis is not None, out.message
    assert out.diagnosis["bug_class"] == "crash" and out.diagnosis["scenario"] == "short-1", out.message
    assert "Query length 1" in out.diagnosis["exception"] and out.metrics["broken"] == {"crash": 1}
    assert set(out.exercise["scenarios"]) == {"prefill", "chunked", "short-7"}  # the others ran
    assert "scenarios prefill, chunked, short-7 ran and held every invariant" in out.message, out.message
    # an invariant broken elsewhere names the diagnosis, the crash beside it
    broken = _run(_RefusesOneToken(_evicting(SINK_WINDOW).with_fault("evict-drop-sink")))
    assert broken.diagnosis is not None and broken.diagnosis["bug_class"] == "evict-protected", broken.message
    assert broken.diagnosis["classes"] == ["crash", "evict-protected"]
    assert "crashed in scenario short-1" in broken.message and "short-1" in broken.evidence["crashed"]
    with pytest.raises(SubjectCrash):  # a control stops at its first failure: the engine counts the crash
        _run(_RefusesOneToken(_evicting(SINK_WINDOW)), stop=True)
