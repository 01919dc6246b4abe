"""Bug classes named without tracing: the model-level experiments put to the classes a failure's
length profile predicts, for a path with no layer trace and no probe."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gate.checks._diagnosis.classes import uncertain
from gate.checks._diagnosis.experiments import (
    UNIFORM_LENGTHS,
    VISIBILITY_OFFSET,
    head_map,
    nan_only_on_cached_reads,
    one_shot_deviates,
    stepwise_deviates,
    visibility,
)

if TYPE_CHECKING:
    import torch

    from gate.checks._compare import Tolerance
    from gate.protocols import DecodePath

EMPTY_CACHE_CANDIDATES = ("kv-head-mapping", "stale-state", "positional-index")
"""What can move the logits of one token on an empty cache (one key, no offset, no prefix state)
while the full pass over the same token is right: which KV head a query head reads, the weights
or projections the cached path computes with, or a position encoding that is absolute. Never a
mask offset (there is none) or a window."""

CHUNK_CANDIDATES = ("mask-offset", "positional-index")
"""What makes a multi-token step over a cache wrong where one-token steps and a one-shot prefill are right."""


def window_or_chunk(
    reference: DecodePath, candidate: DecodePath, tokens: torch.Tensor, at: int, tol: Tolerance, seed: int
) -> dict[str, Any]:
    """An onset at length `at` (what a window predicts) put to the two experiments that separate a
    window from a chunk's mask origin: a window depends on distance, so a step of several tokens
    over a cache still sees the token before it and the prefix fed one token per step is wrong at
    `at` too; a chunk whose mask starts at the chunk is blind to that token. Only blindness names the
    chunk's origin (transformers 5.4-5.8's paged kernel hides keys yet sees that token: a window)."""
    vocab = min(reference.vocab_size, candidate.vocab_size)
    seen = visibility(reference, candidate, vocab, tol, seed, width=2)
    stepwise = stepwise_deviates(reference, candidate, tokens, at, tol)
    found = {"visibility": seen, "stepwise_deviates": stepwise}
    if seen["blind"]:
        return {
            "bug_class": "mask-offset",
            "evidence": f"the failures start at prefix {at}, as a window's would, but a step of 2 over "
            f"{VISIBILITY_OFFSET} cached tokens does not see the token before it"
            + (
                ""
                if stepwise is None
                else f", and the prefix fed one token per step is {'wrong' if stepwise else 'right'} at {at}"
            )
            + ": a chunk's causal mask starts at the chunk, not at the cache offset (the onset is where a chunk "
            "first runs over a cache: chunked prefill)",
            **found,
        }
    if stepwise is not False:
        return {
            "bug_class": "mask-window",
            "evidence": f"the failures start at prefix {at}; every step sees the token before it, and "
            + ("" if stepwise is None else f"the prefix fed one token per step is wrong at {at} too: ")
            + "the mask depends on distance, not on how the prefix was cut",
            **found,
        }
    decide = "offer LayerTracing to see which keys the failing step's attention reads"
    return {
        "bug_class": "mask-window",
        "evidence": f"the failures start at prefix {at} and vanish when the prefix is fed one token per step: "
        "what the mask hides changes with the length of a step of several tokens, and no such step is blind to "
        f"the token before it (not a chunk's mask origin); {decide}",
        "decide": decide,
        **found,
    }


def offset_or_map(
    reference: DecodePath, candidate: DecodePath, vocab: int, tol: Tolerance, seed: int, at: int
) -> dict[str, Any]:
    """Failures from the shortest prefixes on (what a mask offset predicts) put to the experiments that
    separate a mask offset (blind to the token before the step) from a KV-head map (wrong on one token
    repeated). Where neither shows, the profile's class stands, named as unconfirmed (a beam cache
    never reordered, examples/hf-beam-fault-not-reordered.yaml, is such a case)."""
    seen = {width: visibility(reference, candidate, vocab, tol, seed, width=width) for width in (1, 2)}
    blind = [width for width, v in seen.items() if v["blind"]]
    found = {"visibility": seen[blind[0] if blind else 1]}
    if blind:
        return {
            "bug_class": "mask-offset",
            "evidence": f"wrong from prefix {at} on; a step of {blind[0]} over {VISIBILITY_OFFSET} cached tokens "
            "does not see the token before it: its causal mask starts at the step, not at the cache offset",
            **found,
        }
    mapped = head_map(reference, candidate, vocab, tol, seed, cached=True)
    if mapped is not None:
        mapped["evidence"] = (
            f"wrong from prefix {at} on, yet every step sees the token before it (not a mask offset); "
            + mapped["evidence"]
        )
        return {**mapped, **found}
    decide = "offer LayerTracing to decide between mask-offset, kv-head-mapping, positional-index and foreign-state"
    return {
        "bug_class": "mask-offset",
        "evidence": f"the length profile's class (wrong from prefix {at} on, the first token on an empty cache "
        "right), which the experiments do not confirm: every step sees the token before it, and one token "
        f"repeated is right; {decide}",
        "decide": decide,
        **found,
    }


def model_level(
    reference: DecodePath,
    candidate: DecodePath,
    tokens: torch.Tensor,
    at: int,
    tol: Tolerance,
    seed: int,
    *,
    first_length: int | None,
    non_finite: bool,
    chunks: Sequence[tuple[int, int]],
    profile: str | None = None,
) -> dict[str, Any] | None:
    """What sessions alone tell about a failure at prefix `at` (`first_length`: the first deviating
    length overall, 0 for an empty cache) on a path with no layer trace: the class where an experiment
    supports one, else uncertain with the candidates and the capability that would decide; None when
    these experiments say nothing (the length profile stands)."""
    vocab = min(reference.vocab_size, candidate.vocab_size)
    if non_finite:
        if nan_only_on_cached_reads(candidate, tokens[:, :1]):
            return {
                "bug_class": "read-past-valid-length",
                "evidence": "NaN in the cached logits of one token on an empty cache, while the candidate's own "
                "full pass over it is finite: only the cache read differs, and it reads past the valid length",
            }
        return None
    if chunks and not one_shot_deviates(reference, candidate, tokens, at, tol):
        # the same length is right after a one-shot prefill: the failure depends on how the prefix was cut
        seen = visibility(reference, candidate, vocab, tol, seed, width=2)
        step = {"chunk": {"start": chunks[0][0], "tokens": chunks[0][1] - chunks[0][0]}, "visibility": seen}
        if seen["blind"]:
            return {
                "bug_class": "mask-offset",
                "evidence": f"prefix {at} is right after a one-shot prefill and wrong after the sweep's chunks; "
                f"a chunk of 2 over {VISIBILITY_OFFSET} cached tokens does not see the token before it (its "
                "first row moves by no more than its tolerance when that token changes): the chunk's causal mask "
                "starts at the chunk, not at the cache offset",
                **step,
            }
        return {
            **uncertain(
                CHUNK_CANDIDATES,
                f"prefix {at} is right after a one-shot prefill and wrong after the sweep's chunks: a multi-token "
                "step over a cache is wrong, and the chunk sees the token before it",
            ),
            **step,
        }
    if first_length == 0:
        return head_map(reference, candidate, vocab, tol, seed, cached=False) or uncertain(
            EMPTY_CACHE_CANDIDATES,
            "wrong from one token on an empty cache (one key, no cache offset, no prefix state): not a mask "
            "offset or a window; without a layer trace or a probe the KV-head map, the weights the cached "
            "path uses and an absolute position cannot be told apart",
        )
    if profile == "onset-at-length" and candidate.max_len >= VISIBILITY_OFFSET + 2:
        return window_or_chunk(reference, candidate, tokens, at, tol, seed)
    if profile == "short-prefix" and candidate.max_len >= UNIFORM_LENGTHS[-1] + 1:
        return offset_or_map(reference, candidate, vocab, tol, seed, at)
    return None
