"""`batch-invariance`: a request computes inside a batch what it computes alone.

Each request (a seeded prompt) is judged against the reference's logits for it alone (one full
pass over the prompt and the reference's greedy continuation) in up to five settings:

* alone: the candidate's own session with batch 1 (a failure here is not a batching bug; it is
  reported so, and greedy-parity/prefix-sweep localise it);
* equal-length batch: requests of one length in one session (no padding; batch composition alone);
* left-padded batch: requests of different lengths padded on the left by the path
  (gate.protocols.BatchedSessions), prefilled together, then decoding the reference's continuation
  one token per step in the same batch, in two row orders;
* right-padded batch: the same requests padded on the right, prefill only;
* continuous batching: the same requests join one running batch at different forwards
  (gate.protocols.ContinuousBatching), each prompt's prefill (a long one in two chunks) in the same
  forward as the others' decode steps; they leave at different steps, one early, and the last
  joins a slot another request left.

Teacher forcing keeps rows aligned: every setting appends the reference's greedy tokens, so a
row whose argmax differs from the reference's (outside its tie band, gate.checks._compare) is
where greedy decoding would diverge. Under a claim that bounds logits (exact, tolerance), a row
beyond the deny allowance fails too. The candidate's batched rows are also set against its own
rows alone (batch invariance in the strict sense; the |Δ| is evidence, not a verdict: kernels of
other shapes round differently).

A path that does not pad (no BatchedSessions) is judged on the equal-length batch only, and the
result says so; so does a path that does not batch continuously.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import torch

from gate.checks._compare import (
    DENY_ALLOWANCE,
    Tolerance,
    bounds_logits,
    compare_rows,
    random_tokens,
    tolerance_for,
    top_k_rows,
)
from gate.checks._diagnosis import BUG_CLASSES
from gate.checks._params import BatchInvarianceParams
from gate.checks.greedy_parity import greedy
from gate.core.check import CheckContext, Outcome, check
from gate.protocols import BatchedSessions, ContinuousBatching, DecodePath

__all__ = ["BatchInvarianceParams", "batch_invariance"]


@dataclass(frozen=True)
class Request:
    """One request: its prompt, the reference's greedy continuation and its rows alone."""

    prompt: torch.Tensor
    """[L] int64."""
    continuation: torch.Tensor
    """[S] the reference's greedy tokens."""
    rows: torch.Tensor
    """[L + S - 1, V] the reference's logits over prompt + continuation[:-1] (row j predicts token j + 1)."""


def reference_request(reference: DecodePath, prompt: torch.Tensor, steps: int) -> Request:
    """The reference's greedy continuation of `prompt` and its rows, from one full pass."""
    tokens, _, _ = greedy(reference, prompt[None], steps)
    full = torch.cat([prompt, tokens[0, :-1].to(prompt.device)])
    rows = reference.full_logits(full[None])[0].float().cpu()
    return Request(prompt, tokens[0].cpu(), rows)


def alone(candidate: DecodePath, request: Request) -> tuple[torch.Tensor, dict[str, Any]]:
    """The candidate's rows for one request in a session of its own: [L + S - 1, V], exercise."""
    session = candidate.new_session(1)
    rows = [session.prefill(request.prompt[None])[0].float().cpu()]
    for token in request.continuation[:-1]:
        rows.append(session.append(token.view(1, 1))[0].float().cpu())
    return torch.cat(rows), dict(session.exercise())


def equal_batch(candidate: DecodePath, requests: list[Request]) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """Requests of one length in one session: each one's rows, and the session's exercise."""
    session = candidate.new_session(len(requests))
    first = session.prefill(torch.stack([r.prompt for r in requests])).float().cpu()
    rows = [first]
    for step in range(requests[0].continuation.shape[0] - 1):
        tokens = torch.stack([r.continuation[step] for r in requests])[:, None]
        rows.append(session.append(tokens).float().cpu())
    out = torch.cat(rows, dim=1)
    return [out[i] for i in range(len(requests))], {**session.exercise(), "rows": len(requests)}


def padded_batch(
    candidate: BatchedSessions, requests: list[Request], side: str
) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """Requests of different lengths padded on `side` into one batch: each one's rows (a left-padded
    batch decodes the continuation; a right-padded one is prefill-only), and the exercise."""
    session = candidate.new_batched_session(len(requests), side)
    rows = [[r.float().cpu()] for r in session.prefill([r.prompt for r in requests])]
    if side == "left":
        for step in range(requests[0].continuation.shape[0] - 1):
            tokens = torch.stack([r.continuation[step] for r in requests])[:, None]
            out = session.append(tokens).float().cpu()
            for i, row in enumerate(rows):
                row.append(out[i])
    return [torch.cat(r) for r in rows], dict(session.exercise())


def _pieces(request: Request, early: bool, steps: int) -> list[torch.Tensor]:
    """What a request feeds a running batch, forward by forward: its prompt (a prompt longer than 8
    tokens in two chunks), then the continuation one token at a time; `early`: it leaves after half
    of its continuation."""
    prompt, length = request.prompt, int(request.prompt.shape[0])
    cut = (length + 1) // 2 if length > 8 else length
    pieces = [prompt[:cut], prompt[cut:]] if cut < length else [prompt]
    decode = (steps - 1) // 2 if early else steps - 1
    return pieces + [request.continuation[i : i + 1] for i in range(decode)]


def continuous_batch(
    candidate: ContinuousBatching, requests: list[Request]
) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """Requests join one running batch one per forward, so each prompt's prefill shares a forward
    with the earlier requests' decode steps; each leaves when its continuation is fed, the first one
    early; with one slot fewer than requests, the last waits for a slot a request left and reuses it.
    Each request's rows, and the session's exercise."""
    steps = int(requests[0].continuation.shape[0])
    slots = max(1, len(requests) - 1)
    session = candidate.new_continuous_session(slots)
    waiting = list(range(len(requests)))
    pending = {i: _pieces(r, i == 0, steps) for i, r in enumerate(requests)}
    rows: dict[int, list[torch.Tensor]] = {i: [] for i in range(len(requests))}
    live: dict[int, int] = {}  # handle -> request index
    while waiting or live:
        if waiting and len(live) < slots:
            live[session.join()] = waiting.pop(0)
        out = session.step({h: pending[i].pop(0) for h, i in live.items()})
        for h, logits in out.items():
            rows[live[h]].append(logits.float().cpu())
        for h in [h for h, i in live.items() if not pending[i]]:
            session.leave(h)
            del live[h]
    return [torch.cat(rows[i]) for i in range(len(requests))], dict(session.exercise())


def _first_failure(
    ref: torch.Tensor, cand: torch.Tensor, tol: Tolerance, bounded: bool, top_k: int
) -> tuple[dict[str, Any] | None, int, int]:
    """The first row of `cand` [N, V] that fails against `ref` [N, V] (an argmax flip outside the tie
    band, or under a bounded claim a |Δ| beyond the deny allowance; None when every row holds), the
    rows over tolerance and the ties."""
    cmp = compare_rows(ref, cand, tol)
    bad = cmp.failed | (cmp.beyond_allowance if bounded else torch.zeros_like(cmp.failed))
    over, ties = int(cmp.over_tolerance.sum()), int(cmp.tie.sum())
    if not bool(bad.any()):
        return None, over, ties
    row = int(bad.nonzero()[0])
    return (
        {
            "position": row,
            "reference_token": int(cmp.ref_top[row]),
            "candidate_token": int(cmp.cand_top[row]),
            "argmax_flip": not bool(cmp.agree[row]),
            "reference_margin": float(cmp.margin[row]),
            "tie_band": float(cmp.tolerance[row]),
            "max_abs_delta": float(cmp.max_abs_delta[row]),
            "reference_top_k": top_k_rows(ref[row][None], top_k)[0],
            "candidate_top_k": top_k_rows(cand[row][None], top_k)[0],
        },
        over,
        ties,
    )


def _max_delta(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


@check("batch-invariance", params=BatchInvarianceParams)
def batch_invariance(ctx: CheckContext, params: BatchInvarianceParams) -> Outcome:
    """The same requests alone, in an equal-length batch and in left- and right-padded batches give the same logits."""
    reference, candidate = ctx.reference, ctx.candidate
    tol = tolerance_for(ctx, params.atol, params.rtol)
    bounded = bounds_logits(ctx)
    vocab = min(reference.vocab_size, candidate.vocab_size)
    limit = min(reference.max_len, candidate.max_len) - params.steps
    lengths = sorted({max(1, min(n, limit)) for n in params.lengths})
    sides = tuple(candidate.padding_sides) if isinstance(candidate, BatchedSessions) else ()
    continuous = isinstance(candidate, ContinuousBatching) and bool(candidate.continuous_batching)
    batch = max(len(lengths), 2)
    equal = max(1, min(params.equal_length, limit))

    def request(length: int, index: int) -> Request:
        prompt = random_tokens(vocab, 1, length, ctx.seed * 7919 + 31 * index + length)[0]
        return ctx.cache.get(
            ("batch-invariance", reference, prompt, params.steps),
            partial(reference_request, reference, prompt, params.steps),
        )

    mixed = [request(n, i) for i, n in enumerate(lengths)] if sides or continuous else []
    same = [request(equal, 100 + i) for i in range(batch)]
    rng = random.Random(ctx.seed)
    order = list(range(len(mixed)))
    shuffled = order[1:] + order[:1]
    rng.shuffle(shuffled)
    settings: list[tuple[str, str, list[int]]] = [("equal-length", "none", list(range(len(same))))]
    for side in ("left", "right"):
        if side in sides:
            settings.append((f"{side}-padded", side, order))
            if side == "left" and len(order) > 1:
                settings.append(("left-padded, rows reordered", side, shuffled))
    if continuous:
        settings.append(("continuous", "continuous", shuffled))

    observed: list[torch.Tensor] = []
    exercise: dict[str, Any] = {"padding_sides": list(sides), "requests": len(mixed) + len(same), "batches": {}}
    results: list[dict[str, Any]] = []
    failure: dict[str, Any] | None = None
    alone_rows: dict[int, torch.Tensor] = {}

    def judge(setting: str, index: int, req: Request, rows: torch.Tensor, own: torch.Tensor | None) -> None:
        nonlocal failure
        ref = req.rows[: rows.shape[0]]
        found, over, ties = _first_failure(ref, rows, tol, bounded, params.top_k)
        entry: dict[str, Any] = {
            "setting": setting,
            "request": index,
            "prompt_len": int(req.prompt.shape[0]),
            "rows": int(rows.shape[0]),
            "max_abs_delta_vs_reference": _max_delta(ref, rows),
            "rows_over_tolerance": over,
            "ties": ties,
            "ok": found is None,
        }
        if own is not None:
            entry["max_abs_delta_vs_alone"] = _max_delta(own[: rows.shape[0]], rows)
            entry["argmax_same_as_alone"] = bool((own[: rows.shape[0]].argmax(-1) == rows.argmax(-1)).all())
        results.append(entry)
        if found is not None and failure is None:
            failure = {"setting": setting, "request": index, "prompt_len": int(req.prompt.shape[0]), **found}

    # alone first: a request that fails alone is not a batching bug, and says so
    for index, req in enumerate(mixed + same):
        rows, ex = alone(candidate, req)
        alone_rows[index] = rows
        observed.append(rows.flatten())
        exercise.setdefault("alone", ex)
        judge("alone", index, req, rows, None)
        if failure is not None and ctx.stop_at_first_failure:
            break
    for setting, side, rows_order in settings:
        if failure is not None and ctx.stop_at_first_failure:
            break
        if side == "none":
            group, offset = [same[i] for i in rows_order], len(mixed)
            outs, ex = equal_batch(candidate, group)
        elif side == "continuous":
            assert isinstance(candidate, ContinuousBatching)
            group, offset = [mixed[i] for i in rows_order], 0
            outs, ex = continuous_batch(candidate, group)
        else:
            assert isinstance(candidate, BatchedSessions)
            group, offset = [mixed[i] for i in rows_order], 0
            outs, ex = padded_batch(candidate, group, side)
        exercise["batches"][setting] = ex
        for slot, (i, rows) in enumerate(zip(rows_order, outs, strict=True)):
            observed.append(rows.flatten())
            where = f"joined {slot + 1} of {len(group)}" if side == "continuous" else f"row {slot}"
            judge(f"{setting} ({where})", offset + i, group[slot], rows, alone_rows.get(offset + i))

    metrics: dict[str, Any] = {
        "requests": len(mixed) + len(same),
        "lengths": lengths,
        "equal_length": equal,
        "steps": params.steps,
        "settings": [s for s, _, _ in settings],
        "padding_sides": list(sides),
        "max_abs_delta_vs_reference": max((r["max_abs_delta_vs_reference"] for r in results), default=0.0),
        "max_abs_delta_batched_vs_alone": max((r.get("max_abs_delta_vs_alone", 0.0) for r in results), default=0.0),
    }
    evidence: dict[str, Any] = {"results": results, "tolerance": tol.as_dict(), "bounded_claim": bounded}
    if not continuous:
        evidence["continuous"] = (
            f"{candidate.name} does not batch continuously (gate.protocols.ContinuousBatching): "
            "no request joined or left a running batch"
        )
    if not sides:
        evidence["padding"] = (
            f"{candidate.name} does not pad a batch of requests of different lengths "
            "(gate.protocols.BatchedSessions): judged on equal-length batches only"
        )
    observation = torch.cat(observed) if observed else None
    if failure is not None:
        bug = _bug_class(failure["setting"])
        what = (
            "argmax"
            if failure["argmax_flip"]
            else f"|Δlogit| {failure['max_abs_delta']:.3g} (beyond {DENY_ALLOWANCE}x tolerance)"
        )
        alone_too = " (it fails alone too, so the bug is not in batching; greedy-parity and prefix-sweep localise it)"
        evidence["first_failure"] = failure
        return Outcome(
            status="fail",
            message=f"request {failure['request']} (prompt {failure['prompt_len']}) {failure['setting']}: {what} "
            f"differs from the reference alone at position {failure['position']} (reference "
            f"{failure['reference_token']}, candidate {failure['candidate_token']}) ({bug})"
            + (alone_too if failure["setting"] == "alone" else ""),
            metrics=metrics,
            evidence=evidence,
            exercise=exercise,
            diagnosis={"bug_class": bug, "explanation": BUG_CLASSES[bug], "setting": failure["setting"]},
            detected_at=failure["position"],
            observation=observation,
        )
    over = sum(r["rows_over_tolerance"] for r in results)
    ties = sum(r["ties"] for r in results)
    metrics.update(rows_over_tolerance=over, ties=ties)
    status: Literal["pass", "warn"] = "warn" if over or ties else "pass"
    coverage = ", ".join(["alone", *metrics["settings"]])
    message = (
        f"{len(mixed) + len(same)} requests give the reference's greedy tokens alone and in every batch ({coverage})"
        + (f"; {over} row(s) beyond tolerance, {ties} tie(s)" if over or ties else ", logits within tolerance")
        + ("" if sides or continuous else "; this path does not pad, so only equal-length batches ran")
        + ("; this path does not pad" if continuous and not sides else "")
        + ("; it does not batch continuously" if sides and not continuous else "")
    )
    return Outcome(
        status=status, message=message, metrics=metrics, evidence=evidence, exercise=exercise, observation=observation
    )


def _bug_class(setting: str) -> str:
    if setting.startswith("alone"):
        return "uncertain"
    if setting.startswith("equal-length"):
        return "batch-crosstalk"
    if setting.startswith("continuous"):
        return "continuous-batching"
    return "padding"
