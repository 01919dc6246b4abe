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
from collections.abc import Callable
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
from gate.checks._probe import probe_order as shared_probe_order
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


Stop = Callable[[dict[int, torch.Tensor]], bool]
"""Told the rows each request of a setting got from one forward ({request's slot: new rows}); True
stops the setting there (a control's early stop, `_Watch`)."""


def alone(
    candidate: DecodePath, request: Request, stop: Stop | None = None, rows_wanted: int | None = None
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The candidate's rows for one request in a session of its own: [L + S - 1, V], exercise (with
    `stop`, up to the first forward it stops at; with `rows_wanted`, no further than that many rows)."""
    session = candidate.new_session(1)
    rows = [session.prefill(request.prompt[None])[0].float().cpu()]
    done = stop is not None and stop({0: rows[0]})
    for token in request.continuation[:-1]:
        if done or (rows_wanted is not None and sum(r.shape[0] for r in rows) >= rows_wanted):
            break
        rows.append(session.append(token.view(1, 1))[0].float().cpu())
        done = stop is not None and stop({0: rows[-1]})
    return torch.cat(rows), dict(session.exercise())


def equal_batch(
    candidate: DecodePath, requests: list[Request], stop: Stop | None = None
) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """Requests of one length in one session: each one's rows, and the session's exercise."""
    session = candidate.new_session(len(requests))
    rows = [session.prefill(torch.stack([r.prompt for r in requests])).float().cpu()]
    done = stop is not None and stop(dict(enumerate(rows[0])))
    for step in range(requests[0].continuation.shape[0] - 1):
        if done:
            break
        tokens = torch.stack([r.continuation[step] for r in requests])[:, None]
        rows.append(session.append(tokens).float().cpu())
        done = stop is not None and stop(dict(enumerate(rows[-1])))
    out = torch.cat(rows, dim=1)
    return [out[i] for i in range(len(requests))], {**session.exercise(), "rows": len(requests)}


def padded_batch(
    candidate: BatchedSessions, requests: list[Request], side: str, stop: Stop | None = None
) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """Requests of different lengths padded on `side` into one batch: each one's rows (a left-padded
    batch decodes the continuation; a right-padded one is prefill-only), and the exercise."""
    session = candidate.new_batched_session(len(requests), side)
    first = [r.float().cpu() for r in session.prefill([r.prompt for r in requests])]
    rows = [[r] for r in first]
    done = stop is not None and stop(dict(enumerate(first)))
    if side == "left":
        for step in range(requests[0].continuation.shape[0] - 1):
            if done:
                break
            tokens = torch.stack([r.continuation[step] for r in requests])[:, None]
            out = session.append(tokens).float().cpu()
            for i, row in enumerate(rows):
                row.append(out[i])
            done = stop is not None and stop(dict(enumerate(out)))
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
    candidate: ContinuousBatching, requests: list[Request], stop: Stop | None = None
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
        fed = {live[h]: logits.float().cpu() for h, logits in out.items()}
        for i, logits in fed.items():
            rows[i].append(logits)
        if stop is not None and stop(fed):
            break
        for h in [h for h, i in live.items() if not pending[i]]:
            session.leave(h)
            del live[h]
    empty = requests[0].rows[:0]
    return [torch.cat(rows[i]) if rows[i] else empty for i in range(len(requests))], dict(session.exercise())


class _Watch:
    """A control's early stop inside a setting: the rows each forward gives a request are judged
    against the reference's rows at the same positions, and the setting stops at the first forward
    in which one fails (one failure proves power). The request's rows so far are then judged as a
    whole, as a positive run judges them all."""

    def __init__(self, requests: list[Request], tol: Tolerance, bounded: bool) -> None:
        self.requests, self.tol, self.bounded = requests, tol, bounded
        self.seen = [0] * len(requests)

    def __call__(self, fed: dict[int, torch.Tensor]) -> bool:
        failed = False
        for slot, rows in fed.items():
            start = self.seen[slot]
            self.seen[slot] += int(rows.shape[0])
            cmp = compare_rows(self.requests[slot].rows[start : start + rows.shape[0]], rows, self.tol)
            bad = (cmp.failed | cmp.beyond_allowance) if self.bounded else cmp.failed
            failed = failed or bool(bad.any())
        return failed


SETTING_WORDS: dict[str, tuple[str, ...]] = {
    "none": ("equal", "length", "crosstalk"),
    "left": ("left", "padded", "padding"),
    "right": ("right", "padded", "padding"),
    "continuous": ("continuous", "join", "leave", "slot"),
}
"""What each kind of setting is called, for `probe_order` (none: the equal-length batch)."""


def probe_order(sides: list[str], control: str | None) -> list[int]:
    """The order a run walks its batched settings in (indices into `sides`, each setting's kind;
    gate.checks._probe): a control walks first the settings its fault's name points at
    (pad-attended: the padded batches; stale-slot-on-join: the continuous one). A control walks
    the batches before the requests alone either way (a batching fault shows only in a batch);
    a positive run walks them all, alone first."""
    return shared_probe_order(sides, control, _names_setting)


def _names_setting(fault: str, side: str) -> bool:
    words = [w for w in fault.split("-") if len(w) >= 3]
    return any(v.startswith(w) or w.startswith(v) for w in words for v in SETTING_WORDS.get(side, ()))


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

    # the observation is laid out in the positive run's order (alone, then each setting's rows), so a
    # control that walks the whole schedule in another order is compared with it piece by piece; a
    # control that stopped holds only the pieces it ran (a shorter observation)
    observed: dict[tuple[int, int], torch.Tensor] = {}
    exercise: dict[str, Any] = {"padding_sides": list(sides), "requests": len(mixed) + len(same), "batches": {}}
    results: list[dict[str, Any]] = []
    alone_rows: dict[int, torch.Tensor] = {}
    everyone = mixed + same
    control = ctx.stop_at_first_failure

    def judge(
        setting: str, index: int, req: Request, rows: torch.Tensor, own: torch.Tensor | None
    ) -> dict[str, Any] | None:
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
        if found is None:
            return None
        return {"setting": setting, "request": index, "prompt_len": int(req.prompt.shape[0]), **found}

    alone_found: dict[int, dict[str, Any] | None] = {}

    def run_alone(index: int, rows_wanted: int | None = None) -> dict[str, Any] | None:
        req = everyone[index]
        watch = _Watch([req], tol, bounded) if control else None
        rows, ex = alone(candidate, req, watch, rows_wanted)
        alone_rows[index] = rows
        observed[(0, index)] = rows.flatten()
        exercise.setdefault("alone", ex)
        alone_found[index] = judge("alone", index, req, rows, None)
        return alone_found[index]

    def walk_alone() -> dict[str, Any] | None:
        """Every request alone, in order, up to the first that fails (a control) or all (a positive
        run); a request a control already ran alone and saw fail is not run again."""
        first: dict[str, Any] | None = None
        for index in range(len(everyone)):
            found = alone_found[index] if alone_found.get(index) is not None else run_alone(index)
            first = first or found
            if first is not None and control:
                break
        return first

    def run_setting(k: int) -> dict[str, Any] | None:
        setting, side, rows_order = settings[k]
        if side == "none":
            group, offset = [same[i] for i in rows_order], len(mixed)
        else:
            group, offset = [mixed[i] for i in rows_order], 0
        watch = _Watch(group, tol, bounded) if control else None
        if side == "none":
            outs, ex = equal_batch(candidate, group, watch)
        elif side == "continuous":
            assert isinstance(candidate, ContinuousBatching)
            outs, ex = continuous_batch(candidate, group, watch)
        else:
            assert isinstance(candidate, BatchedSessions)
            outs, ex = padded_batch(candidate, group, side, watch)
        exercise["batches"][setting] = ex
        first: dict[str, Any] | None = None
        for slot, (i, rows) in enumerate(zip(rows_order, outs, strict=True)):
            if control and not rows.shape[0]:
                continue  # the setting stopped before this request ran
            observed[(1 + k, slot)] = rows.flatten()
            where = f"joined {slot + 1} of {len(group)}" if side == "continuous" else f"row {slot}"
            found = judge(f"{setting} ({where})", offset + i, group[slot], rows, alone_rows.get(offset + i))
            first = first or found
        return first

    failure: dict[str, Any] | None = None
    if not control:
        # alone first: a request that fails alone is not a batching bug, and says so
        failure = walk_alone()
        for k in range(len(settings)):
            found = run_setting(k)
            failure = failure or found
    else:
        # a control needs one failure: the batches first (where a batching fault shows), the settings
        # its fault's name points at before the rest, each stopping at its first failing forward
        for k in probe_order([side for _, side, _ in settings], ctx.control):
            failure = run_setting(k)
            if failure is not None:
                break
        if failure is None:
            failure = walk_alone()
        else:
            # is the request wrong alone too? then the bug is not in batching, and the failure
            # reported is the one a positive run reports: the first request that fails alone
            failing, position = failure["request"], failure["position"]
            if run_alone(failing, rows_wanted=position + 1) is not None:
                failure = walk_alone()
            else:
                failure["alone_holds_through"] = position
    observation = torch.cat([observed[key] for key in sorted(observed)]) if observed else None

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
    # a correct path may move a row by its dtype's band (x the deny allowance under a claim that
    # bounds the logits): a control that moved the rows no further and passed is unobservable here
    widest = max((float(tol.row(r.rows).max()) for r in everyone if r.rows.numel()), default=None)
    outcome = Outcome(status, message, metrics, evidence, exercise, observation=observation)
    # without a bound on the logits the check passes any move that keeps each greedy token: inf
    outcome.tolerated_change = None if widest is None else (widest * DENY_ALLOWANCE if bounded else float("inf"))
    return outcome


def _bug_class(setting: str) -> str:
    if setting.startswith("alone"):
        return "uncertain"
    if setting.startswith("equal-length"):
        return "batch-crosstalk"
    if setting.startswith("continuous"):
        return "continuous-batching"
    return "padding"
