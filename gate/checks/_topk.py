"""The top-k observation: what an engine behind HTTP shows, and the established rule to compare it.

An HTTP engine shows, per generated position, the greedy token, its logprob and the top-k (token,
logprob) pairs. `compare_topk` applies the rule of vLLM's `check_logprobs_close` made tie-aware as
gate's dense comparison is: positions are compared while both greedy sequences agree; at the first
that differs the flip is a *tie* when the candidate's token is inside the reference's top-k with a
gap within tolerance, else a failure; |Δlogprob| of the aligned tokens and of every token both top-k
lists hold is measured. It cannot show a change confined to tokens outside both top-k lists.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from gate.checks._compare import Tolerance


@dataclass
class TopKObservation:
    """One request's greedy continuation with top-k logprobs per position."""

    tokens: list[int]
    logprobs: list[float]
    top: list[dict[int, float]]

    @classmethod
    def of(cls, completion: Any) -> TopKObservation:
        return cls(list(completion.tokens), list(completion.logprobs), [dict(t) for t in completion.top])

    def tensor(self) -> torch.Tensor:
        """[n, 2] float64 (token id, logprob): what the control engine diffs between clean and faulty runs."""
        import torch

        return torch.tensor(
            [[float(t), lp] for t, lp in zip(self.tokens, self.logprobs, strict=True)], dtype=torch.float64
        )


@dataclass
class TopKComparison:
    compared: int
    """Positions compared (up to and including the first divergence)."""
    first_divergence: int | None
    tie: bool
    close: bool
    """vLLM's condition at the divergence: each side's token inside the other's top-k."""
    gap: float | None
    """Reference logprob of its token minus that of the candidate's (None: outside the top-k)."""
    gap_lower_bound: float | None
    """When the candidate's token is outside the reference's top-k: the reference's top-1 minus its k-th."""
    max_abs_delta: float
    tolerance: float
    """The largest per-position logprob tolerance used."""

    @property
    def diverged(self) -> bool:
        return self.first_divergence is not None

    @property
    def failed(self) -> bool:
        return self.diverged and not self.tie

    @property
    def over_tolerance(self) -> bool:
        return not self.max_abs_delta <= self.tolerance  # a NaN difference is over any tolerance

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def worst(values: Iterable[float]) -> float:
    """The largest of `values` (0.0 for none), NaN when any is NaN: `max()` skips a NaN that is not first,
    so a NaN logprob would read as no difference at all."""
    seen = [0.0, *values]
    return math.nan if any(math.isnan(v) for v in seen) else max(seen)


def compare_topk(reference: TopKObservation, candidate: TopKObservation, tol: Tolerance) -> TopKComparison:
    """Compare two greedy continuations of the same prompt by the top-k rule (module docstring)."""
    max_delta = 0.0
    max_tol = 0.0
    n = min(len(reference.tokens), len(candidate.tokens))
    for i in range(n):
        ref_tok, cand_tok = reference.tokens[i], candidate.tokens[i]
        ref_top, cand_top = reference.top[i], candidate.top[i]
        row_tol = tol.atol + tol.rtol * abs(reference.logprobs[i])
        max_tol = max(max_tol, row_tol)
        deltas = [abs(ref_top[t] - cand_top[t]) for t in set(ref_top) & set(cand_top)]
        if ref_tok == cand_tok:
            deltas.append(abs(reference.logprobs[i] - candidate.logprobs[i]))
        max_delta = worst([max_delta, *deltas])
        if ref_tok != cand_tok:
            close = cand_tok in ref_top and ref_tok in cand_top
            gap = reference.logprobs[i] - ref_top[cand_tok] if cand_tok in ref_top else None
            lower = reference.logprobs[i] - min(ref_top.values()) if gap is None and ref_top else None
            tie = gap is not None and gap <= row_tol
            return TopKComparison(i + 1, i, tie, close, gap, lower, max_delta, max_tol)
    diverged = n if len(reference.tokens) != len(candidate.tokens) else None
    return TopKComparison(n, diverged, False, False, None, None, max_delta, max_tol)


def exact_equal(reference: TopKObservation, candidate: TopKObservation) -> bool:
    """Tokens, their logprobs and every top-k pair identical as reported (what `exact` claims); NaN equals nothing."""
    values = [
        *reference.logprobs,
        *candidate.logprobs,
        *(v for t in (*reference.top, *candidate.top) for v in t.values()),
    ]
    if any(math.isnan(v) for v in values):
        return False
    return (
        reference.tokens == candidate.tokens
        and reference.logprobs == candidate.logprobs
        and reference.top == candidate.top
    )
