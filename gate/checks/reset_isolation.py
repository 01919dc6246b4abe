"""`reset-isolation`: two independent requests through ONE reused session equal two fresh runs.

Request A (prompt, then tokens appended one at a time) runs on a session; the session is reset;
request B runs on the same session. Each must match the same request on a fresh session of the
same path. Both runs execute the same shapes, so the comparison is bit-exact by default: a reset
either restores the initial state or it does not (background: mask oracle; reset position state as well as K/V).
"""

from __future__ import annotations

from typing import Any

import torch

from gate.checks._compare import bits_equal, compare_rows, random_tokens, tolerance_for
from gate.checks._diagnosis import BUG_CLASSES
from gate.checks._params import ResetIsolationParams
from gate.core.check import CheckContext, Outcome, check
from gate.protocols import Session


def _run(session: Session, tokens: torch.Tensor, prompt: int) -> torch.Tensor:
    """Prefill `prompt` tokens, append the rest one by one -> logits [B, T, V]."""
    out = [session.prefill(tokens[:, :prompt]).float().cpu()]
    for i in range(prompt, tokens.shape[1]):
        out.append(session.append(tokens[:, i : i + 1]).float().cpu())
    return torch.cat(out, dim=1)


@check("reset-isolation", params=ResetIsolationParams)
def reset_isolation(ctx: CheckContext, params: ResetIsolationParams) -> Outcome:
    """Two requests through one reused session equal two fresh runs."""
    path = ctx.candidate
    vocab = path.vocab_size
    req_a = random_tokens(vocab, params.batch, params.first + params.steps, ctx.seed * 1000 + 1)
    req_b = random_tokens(vocab, params.batch, params.second + params.steps, ctx.seed * 1000 + 2)

    reused = path.new_session(params.batch)
    a_reused = _run(reused, req_a, params.first)
    before_reset = dict(reused.exercise())
    reused.reset()
    after_reset = dict(reused.exercise())
    b_reused = _run(reused, req_b, params.second)
    exercise = {**dict(reused.exercise()), "before_reset": before_reset, "after_reset": after_reset}
    a_fresh = _run(path.new_session(params.batch), req_a, params.first)
    b_fresh = _run(path.new_session(params.batch), req_b, params.second)

    observation = torch.cat([(a_reused - a_fresh).flatten(), (b_reused - b_fresh).flatten()])
    non_finite = sum(int((~torch.isfinite(t)).sum()) for t in (a_reused, b_reused, a_fresh, b_fresh))
    if non_finite:  # NaN equal to NaN proves nothing about a reset
        return Outcome(
            status="fail",
            message=f"{non_finite} non-finite logits on the candidate path: a reset cannot be judged on them",
            metrics={"non_finite_logits": non_finite},
            exercise=exercise,
            diagnosis={"bug_class": "non-finite-output", "explanation": BUG_CLASSES["non-finite-output"]},
            detected_at=0,
            observation=observation,
        )
    tol = tolerance_for(ctx)
    # a correct path's own rounding moves these logits by up to the dtype-aware band: a control that
    # fails the bit-exact comparison by no more than that failed through noise (the control engine)
    spread = float(tol.row(torch.cat([a_fresh, b_fresh], dim=1)).max())
    results: dict[str, Any] = {}
    first_bad: int | None = None
    for name, got, want in (("first", a_reused, a_fresh), ("second", b_reused, b_fresh)):
        if params.exact:
            same = bits_equal(got, want).all(dim=0)  # [T]
        else:
            cmp = compare_rows(want, got, tol)
            same = (cmp.agree | cmp.tie).all(dim=0)
        bad = (~same).nonzero().flatten().tolist()
        results[name] = {
            "tokens": int(got.shape[1]),
            "identical": not bad,
            "first_mismatch": bad[0] if bad else None,
            "max_abs_delta": float((got - want).abs().nan_to_num(float("inf")).max()),
        }
        if bad and first_bad is None:
            first_bad = bad[0] + (0 if name == "first" else a_reused.shape[1])
    metrics = {
        "exact": params.exact,
        "first_identical": results["first"]["identical"],
        "second_identical": results["second"]["identical"],
        "max_abs_delta": max(r["max_abs_delta"] for r in results.values()),
        "cache_len_after_reset": after_reset.get("cache_len"),
    }
    evidence = {
        "requests": results,
        "after_reset": after_reset,
        "comparison": "bit patterns" if params.exact else f"argmax within {tol.as_dict()}",
    }
    if first_bad is not None:
        leftover = after_reset.get("cache_len")
        detail = (
            f"the position counter survived the reset (cache_len {leftover} after reset)"
            if leftover
            else "state survived the reset"
        )
        diagnosis = {
            "bug_class": "reset-leak",
            "explanation": f"{detail}: the request after a reset does not match a fresh one (background: mask oracle)",
            "cache_len_after_reset": leftover,
            "request": "first" if not results["first"]["identical"] else "second",
        }
        return Outcome(
            status="fail",
            message=f"reused session differs from a fresh one ({detail}); second request "
            f"max |Δ| {results['second']['max_abs_delta']:.3g}",
            metrics=metrics,
            evidence=evidence,
            exercise=exercise,
            diagnosis=diagnosis,
            detected_at=first_bad,
            observation=observation,
            rounding_spread=spread,
        )
    return Outcome(
        status="pass",
        message=f"two requests through one reset session are "
        f"{'bit-identical' if params.exact else 'argmax-identical'} to fresh runs",
        metrics=metrics,
        evidence=evidence,
        exercise=exercise,
        observation=observation,
        rounding_spread=spread,
    )
