"""reset-isolation's body: measure two requests through one reset session and fresh ones, judge, explain."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gate.checks._compare import Tolerance, bits_equal, compare_rows, random_tokens, tolerance_for
from gate.checks._diagnosis import BUG_CLASSES
from gate.checks.reset_isolation import ResetIsolationParams
from gate.core.check import CheckContext, Outcome, check
from gate.protocols import Session

Same = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""[B, T, V] pair -> [T]: whether each token position agrees in every row."""


@dataclass(frozen=True)
class Observations:
    """Request A's logits on the reused session, each compared request (reused, fresh), the exercise."""

    a_reused: torch.Tensor
    compared: list[tuple[str, torch.Tensor, torch.Tensor]]
    exercise: dict[str, Any]
    after_reset: dict[str, Any]


@dataclass(frozen=True)
class Judgement:
    """Non-finite logits, each request's comparison, the first bad position and the rounding spread."""

    non_finite: int
    results: dict[str, Any]
    first_bad: int | None
    spread: float


def _chunks(tokens: torch.Tensor, prompt: int) -> list[torch.Tensor]:
    """The prompt as one prefill, then the rest one token at a time."""
    return [tokens[:, :prompt]] + [tokens[:, i : i + 1] for i in range(prompt, tokens.shape[1])]


def _step(session: Session, chunk: torch.Tensor, first: bool) -> torch.Tensor:
    return (session.prefill(chunk) if first else session.append(chunk)).float().cpu()


def _run(session: Session, tokens: torch.Tensor, prompt: int) -> torch.Tensor:
    """Prefill `prompt` tokens, append the rest one by one -> logits [B, T, V]."""
    return torch.cat([_step(session, c, i == 0) for i, c in enumerate(_chunks(tokens, prompt))], dim=1)


def _lockstep(
    reused: Session, fresh: Session, tokens: torch.Tensor, prompt: int, same: Same
) -> tuple[torch.Tensor, torch.Tensor]:
    """A control's run of one request: the reused session beside a fresh one, chunk by chunk,
    stopping after the first chunk whose logits differ (or are not finite)."""
    got: list[torch.Tensor] = []
    want: list[torch.Tensor] = []
    for i, chunk in enumerate(_chunks(tokens, prompt)):
        got.append(_step(reused, chunk, i == 0))
        want.append(_step(fresh, chunk, i == 0))
        finite = bool(torch.isfinite(got[-1]).all()) and bool(torch.isfinite(want[-1]).all())
        if not finite or not bool(same(got[-1], want[-1]).all()):
            break
    return torch.cat(got, dim=1), torch.cat(want, dim=1)


def measure(ctx: CheckContext, params: ResetIsolationParams, same: Same) -> Observations:
    """Request A, a reset, request B on one session; each request again on a fresh session (a control:
    B first, beside a fresh session, stopping at its first difference)."""
    path = ctx.candidate
    req_a = random_tokens(path.vocab_size, params.batch, params.first + params.steps, ctx.seed * 1000 + 1)
    req_b = random_tokens(path.vocab_size, params.batch, params.second + params.steps, ctx.seed * 1000 + 2)
    reused = path.new_session(params.batch)
    a_reused = _run(reused, req_a, params.first)
    before_reset = dict(reused.exercise())
    reused.reset()
    after_reset = dict(reused.exercise())
    a_fresh: torch.Tensor | None
    if ctx.stop_at_first_failure:
        # a control: a reset fault shows in the request after the reset, so that one is compared first,
        # token by token beside a fresh session, stopping at the first difference; request A only if
        # B agrees throughout
        b_reused, b_fresh = _lockstep(reused, path.new_session(params.batch), req_b, params.second, same)
        agrees = b_reused.shape[1] == req_b.shape[1] and bool(same(b_reused, b_fresh).all())
        finite = bool(torch.isfinite(b_reused).all()) and bool(torch.isfinite(b_fresh).all())
        a_fresh = _run(path.new_session(params.batch), req_a, params.first) if agrees and finite else None
    else:
        b_reused = _run(reused, req_b, params.second)
        a_fresh = _run(path.new_session(params.batch), req_a, params.first)
        b_fresh = _run(path.new_session(params.batch), req_b, params.second)
    exercise = {**dict(reused.exercise()), "before_reset": before_reset, "after_reset": after_reset}
    compared = [("second", b_reused, b_fresh)] + ([("first", a_reused, a_fresh)] if a_fresh is not None else [])
    if a_fresh is None:
        exercise["stopped_at_first_failure"] = {"request": "second", "tokens": int(b_reused.shape[1])}
    return Observations(a_reused, compared, exercise, after_reset)


def judge(obs: Observations, same: Same, tol: Tolerance) -> Judgement:
    """Each request against its fresh run, request A first (pure)."""
    compared = obs.compared
    non_finite = sum(int((~torch.isfinite(t)).sum()) for _, got, want in compared for t in (got, want))
    # a correct path's own rounding moves these logits by up to the dtype-aware band: a control that
    # fails the bit-exact comparison by no more than that failed through noise (the control engine)
    spread = float(tol.row(torch.cat([want for _, _, want in compared], dim=1)).max())
    results: dict[str, Any] = {}
    first_bad: int | None = None
    for name, got, want in sorted(compared, key=lambda c: c[0] != "first"):  # request A first
        bad = (~same(got, want)).nonzero().flatten().tolist()
        results[name] = {
            "tokens": int(got.shape[1]),
            "identical": not bad,
            "first_mismatch": bad[0] if bad else None,
            "max_abs_delta": float((got - want).abs().nan_to_num(float("inf")).max()),
        }
        if bad and first_bad is None:
            first_bad = bad[0] + (0 if name == "first" else obs.a_reused.shape[1])
    return Judgement(non_finite, results, first_bad, spread)


def explain(params: ResetIsolationParams, tol: Tolerance, obs: Observations, j: Judgement) -> Outcome:
    """The Outcome of the judgement, built once: non-finite, a reset leak, or a pass."""
    # flat, token-major: a request stopped after t tokens observed a prefix of it
    observation = torch.cat([(got - want).transpose(0, 1).flatten() for _, got, want in obs.compared])
    seen: dict[str, Any] = {"exercise": obs.exercise, "observation": observation, "observation_in_run_order": True}
    if j.non_finite:  # NaN equal to NaN proves nothing about a reset
        return Outcome(
            status="fail",
            message=f"{j.non_finite} non-finite logits on the candidate path: a reset cannot be judged on them",
            metrics={"non_finite_logits": j.non_finite},
            diagnosis={"bug_class": "non-finite-output", "explanation": BUG_CLASSES["non-finite-output"]},
            detected_at=0,
            **seen,
        )
    results, after_reset = j.results, obs.after_reset
    seen["metrics"] = {
        "exact": params.exact,
        "first_identical": results["first"]["identical"] if "first" in results else None,
        "second_identical": results["second"]["identical"],
        "max_abs_delta": max(r["max_abs_delta"] for r in results.values()),
        "cache_len_after_reset": after_reset.get("cache_len"),
    }
    seen["evidence"] = {
        "requests": results,
        "after_reset": after_reset,
        "comparison": "bit patterns" if params.exact else f"argmax within {tol.as_dict()}",
    }
    if j.first_bad is not None:
        leftover = after_reset.get("cache_len")
        detail = (
            f"the position counter survived the reset (cache_len {leftover} after reset)"
            if leftover
            else "state survived the reset"
        )
        return Outcome(
            status="fail",
            message=f"reused session differs from a fresh one ({detail}); second request "
            f"max |Δ| {results['second']['max_abs_delta']:.3g}",
            diagnosis={
                "bug_class": "reset-leak",
                "explanation": f"{detail}: the request after a reset does not match a fresh one "
                "(background: mask oracle)",
                "cache_len_after_reset": leftover,
                "request": "first" if not results.get("first", {"identical": True})["identical"] else "second",
            },
            detected_at=j.first_bad,
            rounding_spread=j.spread,
            **seen,
        )
    return Outcome(
        status="pass",
        message=f"two requests through one reset session are "
        f"{'bit-identical' if params.exact else 'argmax-identical'} to fresh runs",
        rounding_spread=j.spread,
        **seen,
    )


@check("reset-isolation", params=ResetIsolationParams)
def reset_isolation(ctx: CheckContext, params: ResetIsolationParams) -> Outcome:
    """Two requests through one reused session equal two fresh runs."""
    tol = tolerance_for(ctx)

    def same(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
        if params.exact:
            return bits_equal(got, want).all(dim=0)
        cmp = compare_rows(want, got, tol)
        return (cmp.agree | cmp.tie).all(dim=0)

    obs = measure(ctx, params, same)
    return explain(params, tol, obs, judge(obs, same, tol))
