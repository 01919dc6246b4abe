"""Shared by the engine checks: both engines, seeded prompts, and the claim's comparison per request: exact
(identical as reported), tolerance (greedy tokens identical up to ties; |Δlogprob| over tolerance a
warning, beyond DENY_ALLOWANCE x tolerance a failure), greedy-tokens (logprobs reported only).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from gate.checks._compare import DENY_ALLOWANCE, Tolerance, tolerance_for
from gate.checks._diagnosis import BUG_CLASSES
from gate.checks._lengths import NEW_TOKENS as NEW_TOKENS
from gate.checks._lengths import PREFIX_BLOCKS as PREFIX_BLOCKS
from gate.checks._lengths import clip_lengths as clip_lengths
from gate.checks._lengths import geometry_lengths as geometry_lengths
from gate.checks._noise import NoiseFloor
from gate.checks._noise import seeded_prompt as seeded_prompt
from gate.checks._topk import TopKComparison, TopKObservation, compare_topk, exact_equal
from gate.core.check import CheckSpec, Outcome, P, check
from gate.errors import EngineCacheNeverHit, EngineVocabMismatch
from gate.protocols import EngineServing, offered

if TYPE_CHECKING:
    from gate.core.check import CheckContext
    from gate.protocols import EngineCompletion, EngineServer


class EnginePair(NamedTuple):
    """What every engine check starts from: both engines, the claim level, the top-k to request."""

    reference: EngineServing
    candidate: EngineServing
    level: str
    top_k: int


def engine_check(
    name: str, *, params: type[P]
) -> Callable[[Callable[[CheckContext, P, EnginePair], Outcome]], CheckSpec[P]]:
    """`check` for an engine check: its function also gets both engines; a subject that is not an engine skips."""

    def wrap(fn: Callable[[CheckContext, P, EnginePair], Outcome]) -> CheckSpec[P]:
        def run(ctx: CheckContext, p: P) -> Outcome:
            reference, candidate = offered(ctx.reference, EngineServing), offered(ctx.candidate, EngineServing)
            if reference is None or candidate is None:
                return Outcome("skip", f"{name} judges engines behind HTTP (adapter openai); this subject is not one")
            return fn(ctx, p, EnginePair(reference, candidate, ctx.manifest.claim.level, candidate.top_k))

        run.__doc__ = fn.__doc__
        return check(name, params=params)(run)

    return wrap


def same_vocabulary(reference: EngineServer, candidate: EngineServer) -> int:
    """The shared vocabulary size; EngineVocabMismatch when the servers disagree."""
    ref_v, cand_v = reference.info.get("vocab_size"), candidate.info.get("vocab_size")
    if ref_v is not None and cand_v is not None and ref_v != cand_v:
        raise EngineVocabMismatch(
            f"the reference server has a vocabulary of {ref_v} tokens and the candidate {cand_v}: "
            "the same token ids would mean different tokens, so nothing can be compared"
        )
    return int(ref_v or cand_v or 0)


def require_hits(reported: list[int | None], where: str) -> None:
    """Proof of exercise: EngineCacheNeverHit unless some request's cached-token count is positive."""
    if all(count is None for count in reported):
        raise EngineCacheNeverHit(
            "the cache never hit, as far as anyone can tell: the candidate reports no cached-token count "
            "(usage.prompt_tokens_details.cached_tokens, usage.cache_read_input_tokens or timings.cache_n), so its "
            "cached path cannot be shown to run; enable the engine's cache report (docs/engines.md)"
        )
    if not any(reported):
        raise EngineCacheNeverHit(
            f"the cache never hit: the candidate reported no reused prompt token {where}, so its cached path "
            "was not exercised"
        )


Ask = tuple[list[int], int, int, dict[str, Any] | None]
"""One request's arguments to `EngineServer.complete`."""


def send_together(server: EngineServer, requests: Sequence[Ask]) -> list[tuple[EngineCompletion, tuple[float, float]]]:
    """Send requests at the same moment, one thread each: each reply and its time window."""
    barrier = threading.Barrier(len(requests))

    def send(request: Ask) -> tuple[EngineCompletion, tuple[float, float]]:
        barrier.wait()
        start = time.perf_counter()
        reply = server.complete(*request)
        return reply, (start, time.perf_counter())

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(pool.map(send, requests))


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def reuse_block(path: EngineServing) -> int | None:
    """The engine's reuse block when it reuses whole blocks only (a block size above 1), else None."""
    block = path.cache_geometry.block_size
    return block if block is not None and block > 1 else None


PROBE_LENGTHS = (37, 113, 301, 400)
"""Prefix lengths of the block probe: the hits of whole blocks of 1, 2, 4, ..., 128 tokens have the block as gcd."""


def probe_block(server: EngineServer, vocab: int, limit: int) -> tuple[int | None, str]:
    """The granularity of an engine's reported hits (the gcd of positive hits; None: none), and the probe in words."""
    import math

    hits: dict[int, int | None] = {}
    for length in (x for x in PROBE_LENGTHS if x <= limit):
        prefix = seeded_prompt(vocab, length, 9_000_001 + length)
        server.complete(prefix + seeded_prompt(vocab, 4, 9_100_001 + length), 1, 1)
        hits[length] = server.complete(prefix + seeded_prompt(vocab, 4, 9_200_001 + length), 1, 1).cached_tokens
    words = "probe (length:cached tokens " + ", ".join(f"{k}:{v}" for k, v in hits.items()) + ")"
    positive = [v for v in hits.values() if v]
    return (math.gcd(*positive) if positive else None), words


def not_reusable(block: int | None, lengths: list[int]) -> list[int]:
    """Lengths shorter than one reuse block: the engine cannot serve any of them from its cache, by design."""
    return [] if block is None or block <= 1 else [x for x in lengths if x < block]


def expected_hit(block: int | None, length: int) -> int | None:
    """Prompt tokens a block-reusing engine can serve from a cached prefix of `length` tokens (whole blocks)."""
    return None if block is None else (length // block) * block


@dataclass
class Judged:
    """One request compared under the claim."""

    comparison: TopKComparison
    exact: bool
    failed: bool
    warn: bool

    def row(self) -> dict[str, Any]:
        c = self.comparison
        return {
            "tokens_match": not c.diverged,
            "first_divergence": c.first_divergence,
            "max_abs_dlogprob": c.max_abs_delta,
            "bit_equal": self.exact,
            "tie": c.tie,
            "close_vllm_rule": c.close,
            "gap": c.gap,
            "gap_lower_bound": c.gap_lower_bound,
        }


def judge(
    ctx: CheckContext, reference: EngineCompletion, candidate: EngineCompletion, noise: NoiseFloor | None = None
) -> Judged:
    """Compare two completions of one prompt under the claim (beyond exact, at least at the `noise` floor)."""
    ref, cand = TopKObservation.of(reference), TopKObservation.of(candidate)
    tol = tolerance_for(ctx)
    if noise is not None and ctx.manifest.claim.level != "exact" and noise.floor > tol.atol:
        tol = Tolerance(noise.floor, tol.rtol, f"the candidate's measured noise floor (over {tol.source})")
    comparison = compare_topk(ref, cand, tol)
    exact = exact_equal(ref, cand)
    level = ctx.manifest.claim.level
    if level == "exact":
        return Judged(comparison, exact, failed=not exact, warn=False)
    if level == "greedy-tokens":
        return Judged(comparison, exact, failed=comparison.diverged, warn=False)
    # the claim bounds the logprobs: beyond the allowance over tolerance it is broken, whatever the tokens do
    beyond = not comparison.max_abs_delta <= DENY_ALLOWANCE * comparison.tolerance  # NaN is beyond
    return Judged(
        comparison, exact, failed=comparison.failed or beyond, warn=comparison.over_tolerance or comparison.tie
    )


def unreported_logprobs(reference: EngineCompletion, candidate: EngineCompletion) -> list[int]:
    """Positions where the candidate, with the reference's greedy tokens, reports no top-k and the reference does."""
    if candidate.tokens != reference.tokens:
        return []
    return [i for i, (got, want) in enumerate(zip(candidate.top, reference.top, strict=False)) if want and not got]


def tolerated_change(level: str, widest: float) -> float | None:
    """What an engine check accepts of a correct reply's logprobs under a tolerance claim (else None)."""
    return DENY_ALLOWANCE * widest if level == "tolerance" and widest > 0 else None


def observation(completions: list[EngineCompletion]) -> Any:
    """The candidate's observations as one tensor, for the control engine's clean-vs-faulty difference."""
    import torch

    parts = [TopKObservation.of(c).tensor() for c in completions]
    return torch.cat(parts) if parts else None


def failure_words(level: str, judged: Judged) -> str:
    c = judged.comparison
    if level == "exact" and not c.diverged:
        return f"not bit-identical (max |Δlogprob| {c.max_abs_delta:.3g})"
    if c.first_divergence is not None:
        gap = (
            f"gap {c.gap:.3g}"
            if c.gap is not None
            else f"candidate token outside the top-k (gap > {c.gap_lower_bound})"
        )
        return f"greedy tokens diverge at token {c.first_divergence} ({gap})"
    if level == "tolerance" and judged.failed:
        return (
            f"max |Δlogprob| {c.max_abs_delta:.3g} beyond {DENY_ALLOWANCE:g} x the tolerance {c.tolerance:.3g} "
            "(the claim bounds the logprobs)"
        )
    return f"max |Δlogprob| {c.max_abs_delta:.3g}"


def bug_diagnosis(bug_class: str, problems: list[str]) -> dict[str, Any]:
    """An Outcome's diagnosis naming `bug_class`, what a manifest's `known_bugs` matches on."""
    return {"problems": problems, "bug_class": bug_class, "explanation": BUG_CLASSES[bug_class]}


def problems_outcome(
    problems: list[str], detected_at: int | None, bug_class: str | None = None, message: str | None = None, **seen: Any
) -> Outcome:
    """The failed Outcome of an engine check (its message: the problems, unless given)."""
    diagnosis = {"problems": problems} if bug_class is None else bug_diagnosis(bug_class, problems)
    return Outcome("fail", message or "; ".join(problems), **seen, detected_at=detected_at, diagnosis=diagnosis)
