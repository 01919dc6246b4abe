"""mask-oracle's tolerance follows the dtype the probe computes in: a correct probe that rounds its
outputs to bfloat16 passes, and the faults it is built to see still fail it with their class."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from gate.checks.mask_oracle import ORACLE_RTOL, MaskOracleParams, mask_oracle, oracle_rtol
from tests.support import reference


class RoundingProbe:
    """A path whose attention probe answers in a 16-bit dtype (as a bfloat16 kernel would)."""

    def __init__(self, inner: Any, dtype: str) -> None:
        self.inner, self.dtype = inner, dtype

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def attention_probe(self, requests: Any, *, poison_tail: bool = False) -> Any:
        outputs = self.inner.attention_probe(requests, poison_tail=poison_tail)
        kind = getattr(torch, self.dtype)
        return [[o.to(kind).float() for o in request] for request in outputs]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_correct_16_bit_probe_passes_and_its_faults_still_fail(dtype: str) -> None:
    full = reference.path("full")
    clean = mask_oracle(reference.ctx(full, RoundingProbe(reference.path("static"), dtype)), MaskOracleParams())
    assert clean.status == "pass", clean.message
    assert clean.metrics["rtol"] == ORACLE_RTOL[dtype] and clean.metrics["max_abs_error"] > ORACLE_RTOL["float32"]
    for fault, bug_class in [("mask-origin-reset", "mask-offset"), ("truncated-last-block", "kv-truncation")]:
        faulty = RoundingProbe(reference.path("static").with_fault(fault), dtype)
        outcome = mask_oracle(reference.ctx(full, faulty), MaskOracleParams())
        assert outcome.status == "fail" and outcome.diagnosis is not None
        assert outcome.diagnosis["bug_class"] == bug_class


def test_float32_keeps_its_tolerance_and_params_win() -> None:
    assert oracle_rtol(MaskOracleParams(), "float32") == 1e-5
    assert oracle_rtol(MaskOracleParams(rtol=1e-3), "bfloat16") == 1e-3
    bf16 = RoundingProbe(reference.path("static"), "bfloat16")
    strict = mask_oracle(reference.ctx(reference.path("full"), bf16), MaskOracleParams(rtol=1e-5))
    assert strict.status == "fail"  # float32's tolerance on a bfloat16 probe: the false alarm this fixes
