"""Model-level experiments: what sessions alone can show, for a path with no layer trace and no probe."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gate.checks._diagnosis.classes import SMALL_RELATIVE_ERROR

if TYPE_CHECKING:
    import torch

    from gate.checks._compare import Tolerance
    from gate.protocols import DecodePath

VISIBILITY_OFFSET = 8
"""The cache length of the visibility experiment: a mask from the chunk's origin hides its last token."""


def _rows(path: DecodePath, calls: Sequence[torch.Tensor]) -> torch.Tensor:
    """One fresh session of `path` fed `calls` (a prefill, then appends): the last call's logits."""
    session = path.new_session(calls[0].shape[0])
    out = session.prefill(calls[0])
    for tokens in calls[1:]:
        out = session.append(tokens)
    return out.float().cpu()


def visibility(
    reference: DecodePath, candidate: DecodePath, vocab: int, tol: Tolerance, seed: int, width: int
) -> dict[str, Any]:
    """Model-level mask experiment: a prefill of VISIBILITY_OFFSET tokens, then a step of `width`
    tokens; the token just before the step is changed. Every query of the step sees that token
    under a causal mask, so the reference's first row moves; a candidate whose first row does not
    move at all (within its tolerance, and by a tenth of the reference's move where the reference
    moves by only a few bands) did not see it: its mask ignores the cache offset."""
    import torch

    from gate.checks._compare import random_tokens

    offset = VISIBILITY_OFFSET
    a = random_tokens(vocab, 1, offset + width, seed * 7919 + width)
    b = a.clone()
    b[0, offset - 1] = (a[0, offset - 1] + 1) % vocab
    with torch.no_grad():
        ref = [reference.full_logits(t)[:, offset].float().cpu() for t in (a, b)]
        cand = [_rows(candidate, [t[:, :offset], t[:, offset:]])[:, 0] for t in (a, b)]
    band = float(tol.row(ref[0]).max())
    ref_move = float((ref[0] - ref[1]).abs().max())
    cand_move = float((cand[0] - cand[1]).abs().nan_to_num(float("inf")).max())
    return {
        "cached": offset,
        "step_tokens": width,
        "reference_moves": ref_move,
        "candidate_moves": cand_move,
        # in float32 the reference moves by many bands; in bfloat16 the band is wide, and a candidate
        # blind to the token moves by nothing at all next to the reference's several bands
        "blind": cand_move <= band and (ref_move > 10 * band or (ref_move > 2 * band and cand_move <= 0.1 * ref_move)),
    }


def one_shot_deviates(
    reference: DecodePath, candidate: DecodePath, tokens: torch.Tensor, at: int, tol: Tolerance
) -> bool:
    """The token at `at` appended after a one-shot prefill of the prefix, against the full pass."""
    return _fed_deviates(reference, candidate, tokens, at, tol, [tokens[:, :at], tokens[:, at : at + 1]])


def _fed_deviates(
    reference: DecodePath, candidate: DecodePath, tokens: torch.Tensor, at: int, tol: Tolerance, calls: list[Any]
) -> bool:
    return _off(reference.full_logits(tokens[:, : at + 1])[:, at].float().cpu(), _rows(candidate, calls)[:, -1], tol)


def nan_only_on_cached_reads(candidate: DecodePath, tokens: torch.Tensor) -> bool:
    """The candidate's cached session returns NaN for `tokens` on an empty cache while its own full
    pass is finite: only the cache read differs, so it touched slots past the valid length."""
    import torch

    with torch.no_grad():
        cached = _rows(candidate, [tokens])
        full = candidate.full_logits(tokens).float().cpu()
    return bool(cached.isnan().any()) and bool(full.isfinite().all())


SHARED_PREFIX = 7
"""Tokens of request A before its continuation, and of request B prefilled in between (`shared_sessions`)."""


def shared_sessions(reference: DecodePath, candidate: DecodePath, tol: Tolerance, seed: int) -> dict[str, Any] | None:
    """Whether two live sessions of the candidate share one cache: A's next token wrong after a second
    session prefilled B and right alone is A reading B's state (foreign-state); else None."""
    import torch

    from gate.checks._compare import compare_rows

    vocab = min(reference.vocab_size, candidate.vocab_size)
    a, b = seeded_tokens(vocab, SHARED_PREFIX + 1, seed), seeded_tokens(vocab, SHARED_PREFIX, seed + 1)
    with torch.no_grad():
        full = reference.full_logits(a)[:, -1].float().cpu()
        alone = _rows(candidate, [a[:, :-1], a[:, -1:]])[:, -1]
        first = candidate.new_session(1)
        first.prefill(a[:, :-1])
        candidate.new_session(1).prefill(b)
        beside = first.append(a[:, -1:]).float().cpu()[:, -1]
    off = {}
    for name, rows in (("alone", alone), ("beside", beside)):
        cmp = compare_rows(full[None], rows[None], tol)
        off[name] = (bool((cmp.failed | cmp.over_tolerance).any()), float(cmp.max_abs_delta.max()))
    if off["alone"][0] or not off["beside"][0]:
        return None
    return {
        "bug_class": "foreign-state",
        "evidence": f"request A's next token after a second session prefilled {SHARED_PREFIX} other tokens "
        f"differs from A's full pass (max |Δ| {off['beside'][1]:.3g}), and A continued with no other session "
        f"agrees (max |Δ| {off['alone'][1]:.3g}): the two sessions share one cache, so A read B's state",
        "sessions": {"alone_max_delta": off["alone"][1], "beside_max_delta": off["beside"][1]},
    }


STEPWISE_LONGEST = 512
"""Longest prefix the stepwise experiment feeds one token per step (a step per token)."""

UNIFORM_LENGTHS = (1, 9, 17)
"""Prompt lengths of the uniform-prompt experiment (one token over 0, 8 and 16 cached copies)."""


def _off(reference_row: torch.Tensor, candidate_row: torch.Tensor, tol: Tolerance) -> bool:
    """One row of logits [B, V] outside its tolerance (NaN counts) or with another argmax."""
    from gate.checks._compare import compare_rows

    cmp = compare_rows(reference_row[None], candidate_row[None], tol)
    return bool((cmp.failed | cmp.over_tolerance).any())


def stepwise_deviates(
    reference: DecodePath, candidate: DecodePath, tokens: torch.Tensor, at: int, tol: Tolerance
) -> bool | None:
    """The token at `at` after the prefix was fed one token per step (no step of several tokens
    anywhere), against the full pass; None past STEPWISE_LONGEST. A mask that depends on distance (a
    window) is wrong here too; one that depends on how the prefix was cut into chunks is not."""
    import torch

    if at > STEPWISE_LONGEST or at < 1:
        return None
    with torch.no_grad():
        return _fed_deviates(reference, candidate, tokens, at, tol, [tokens[:, i : i + 1] for i in range(at + 1)])


def uniform_prompt(
    reference: DecodePath, candidate: DecodePath, vocab: int, tol: Tolerance, seed: int
) -> dict[str, Any]:
    """Model-level experiment on one token repeated: where the reference's full pass gives every row
    the same logits (positions enter only through relative scores, as with RoPE), every key holds the
    same value, so no mask, window, position or truncated read can move the answer. The candidate's
    last row after a prefill of n - 1 copies and a step of one, for n in UNIFORM_LENGTHS: which
    lengths deviate, by how much (`large`: beyond an approximation), whether the deviation holds as
    the cache grows (one key of garbage read past the end weighs less the more keys there are), and
    whether every length gives the same answer."""
    import torch

    from gate.checks._compare import random_tokens

    token = int(random_tokens(vocab, 1, 1, seed * 7919 + 3)[0, 0])
    longest = UNIFORM_LENGTHS[-1]
    prompt = torch.full((1, longest), token, dtype=torch.long)
    with torch.no_grad():
        ref = reference.full_logits(prompt)[0].float().cpu()  # [longest, V]
        rows = {
            n: _rows(candidate, [prompt[:, :n]] if n == 1 else [prompt[:, : n - 1], prompt[:, n - 1 : n]])[0, -1]
            for n in UNIFORM_LENGTHS
        }
    band = float(tol.row(ref[0]).max())
    position_free = float((ref - ref[0]).abs().max()) <= band
    deviating = [n for n in UNIFORM_LENGTHS if _off(ref[n - 1][None], rows[n][None], tol)]
    spread = float(ref[0].max() - ref[0].min())
    delta = {n: float((rows[n] - ref[n - 1]).abs().nan_to_num(float("inf")).max()) for n in UNIFORM_LENGTHS}
    return {
        "token": token,
        "position_free": position_free,
        "deviating_lengths": deviating,
        "max_delta": {str(n): round(d, 6) for n, d in delta.items()},
        "large": all(delta[n] > SMALL_RELATIVE_ERROR * spread for n in deviating),
        "holds": delta[longest] >= 0.5 * delta[UNIFORM_LENGTHS[-2]],
        "same_answer": bool(deviating)
        and all(float((rows[n] - rows[deviating[0]]).abs().max()) <= band for n in deviating),
    }


def head_map(
    reference: DecodePath, candidate: DecodePath, vocab: int, tol: Tolerance, seed: int, *, cached: bool
) -> dict[str, Any] | None:
    """kv-head-mapping where the uniform-prompt experiment supports it (`cached`: wrong only over a
    non-empty cache; else from the empty one on, the same answer at every length); else None."""
    seen = uniform_prompt(reference, candidate, vocab, tol, seed)
    finite = all(math.isfinite(d) for d in seen["max_delta"].values())
    if not (seen["position_free"] and seen["large"] and seen["holds"] and finite):
        return None
    # over a cache: only the steps over one (the first token right, a decode kernel's own map); on an
    # empty cache: every step, one and the same answer at every length (a cache written by one set of
    # weights and read with another, the reference's stale-weights fault, moves with the length)
    if seen["deviating_lengths"] != (list(UNIFORM_LENGTHS[1:]) if cached else list(UNIFORM_LENGTHS)):
        return None
    if not cached and not seen["same_answer"]:
        return None
    where = "over a cache of copies" if cached else "on an empty cache"
    return {
        "bug_class": "kv-head-mapping",
        "evidence": f"one token repeated: the full pass gives every row the same logits, so every key holds the "
        "same value and no mask, window, position or truncated read can move the answer; the candidate's "
        f"one-token step {where} is wrong there (lengths {seen['deviating_lengths']}, max |Δ| by length "
        f"{seen['max_delta']}), not shrinking as the cache grows: a query head reads another KV head's values "
        "(a cached path computing with other weights would look the same: LayerTracing would show the read map)",
        "uniform_prompt": seen,
    }


def seeded_tokens(vocab: int, length: int, seed: int) -> torch.Tensor:
    from gate.checks._compare import random_tokens

    return random_tokens(vocab, 1, length, seed * 7919 + 17)
