"""Tolerances follow the dtype the subject computes in, and batch-invariance says how far a correct
path may move (so a control that moves no further is unobservable, not missed)."""

from __future__ import annotations

from gate.checks._compare import DEFAULT_TOLERANCE, computing_dtype, tolerance_for
from gate.checks.batch_invariance import BatchInvarianceParams, batch_invariance
from tests.support import reference


class ComputesIn:
    """A path that says it computes in another dtype than the manifest names (a plugin's own choice)."""

    def __init__(self, inner: object, dtype: str) -> None:
        self.__dict__["inner"], self.__dict__["dtype"] = inner, dtype

    def __getattr__(self, name: str) -> object:
        return getattr(self.__dict__["inner"], name)


def test_the_least_precise_dtype_of_manifest_reference_and_candidate_sets_the_band() -> None:
    ref, cand = reference.path("full"), reference.path("static")
    assert computing_dtype(reference.ctx(ref, cand)) == "float32"
    bf16 = reference.ctx(ref, ComputesIn(cand, "bfloat16"))
    assert computing_dtype(bf16) == "bfloat16"
    tol = tolerance_for(bf16)
    assert (tol.atol, tol.rtol) == DEFAULT_TOLERANCE["bfloat16"] and tol.source == "bfloat16 default"
    assert computing_dtype(reference.ctx(ref, ComputesIn(cand, "int8-unknown"))) == "float32"
    assert computing_dtype(reference.ctx(ref, cand, dtype="float16")) == "float16"


def test_batch_invariance_reports_the_change_a_correct_path_may_show() -> None:
    ref, cand = reference.path("full"), reference.path("static")
    params = BatchInvarianceParams(lengths=[5, 9], steps=2, equal_length=6)
    outcome = batch_invariance(reference.ctx(ref, cand), params)
    assert outcome.status in ("pass", "warn"), outcome.message
    assert outcome.tolerated_change is not None and 0 < outcome.tolerated_change < 1
    wide = batch_invariance(reference.ctx(ref, ComputesIn(cand, "bfloat16")), params)
    assert wide.tolerated_change is not None and wide.tolerated_change > 100 * outcome.tolerated_change
