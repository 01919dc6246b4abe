"""engine-prefix-parity: an engine's prefix cache gives what the same engine gives with it off.

Two server processes (never two request flags on one process, which may share allocator state and
hide the bug): the candidate with its prefix cache or new scheduling on, the reference with it off.
For each prefix length (1, 17, 200, 2048, 8192 by default, clipped to the context; `dense` adds
log-spaced lengths) a warm-up request with the prefix and another suffix forces the candidate to
cache the prefix; then the request itself (prefix + suffix) goes to both servers and the first 8
greedy tokens with their top-k logprobs are compared under the claim (gate.checks._engine).

Proof of exercise is the candidate's own report of reused prompt tokens at each length. A run in
which the candidate never reports a reused token is an error ("the cache never hit"), never a pass;
a length without a hit is reported as not exercised and fails the check.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field

from gate.checks._engine import (
    NEW_TOKENS,
    clip_lengths,
    engine_pair,
    failure_words,
    judge,
    observation,
    require_hits,
    same_vocabulary,
    seeded_prompt,
)
from gate.checks._topk import worst
from gate.core.check import CheckContext, Outcome, Params, check

DEFAULT_LENGTHS = [1, 17, 200, 2048, 8192]
SUFFIX = 4


class EnginePrefixParams(Params):
    """Prefix lengths and the continuation compared."""

    lengths: list[int] = Field(default_factory=lambda: list(DEFAULT_LENGTHS), min_length=1)
    """Prefix lengths (clipped to the context)."""
    dense: int = Field(default=0, ge=0, le=64)
    """Extra log-spaced lengths between 1 and the longest (denser sweep on request)."""
    new_tokens: int = Field(default=NEW_TOKENS, ge=1, le=64)
    """Greedy tokens compared after each prompt."""


def _lengths(params: EnginePrefixParams, limit: int) -> list[int]:
    lengths = list(params.lengths)
    if params.dense:
        top = max(2, min(max(lengths), limit))
        lengths += [round(math.exp(math.log(top) * (i + 1) / (params.dense + 1))) for i in range(params.dense)]
    return sorted(clip_lengths(lengths, limit))


@check("engine-prefix-parity", params=EnginePrefixParams)
def engine_prefix_parity(ctx: CheckContext, params: EnginePrefixParams) -> Outcome:
    """A prefix hit in the engine gives the greedy tokens and logprobs of the same engine with no cache."""
    pair = engine_pair(ctx, "engine-prefix-parity")
    if isinstance(pair, Outcome):
        return pair
    reference, candidate, level, top_k = pair
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    warnings: list[str] = []
    no_hit: list[int] = []
    failed_at: list[int] = []
    completions = []
    with reference.serve(label="reference") as ref, candidate.serve(label="candidate") as cand:
        vocab = same_vocabulary(ref, cand) or candidate.vocab_size
        limit = min(reference.max_len, candidate.max_len) - SUFFIX - params.new_tokens - 1
        lengths = _lengths(params, limit)
        for length in lengths:
            ctx.log(f"  prefix length {length}")
            prefix = seeded_prompt(vocab, length, ctx.seed * 7919 + length)
            suffix = seeded_prompt(vocab, SUFFIX, ctx.seed * 7919 + length + 1_000_003)
            other = seeded_prompt(vocab, SUFFIX, ctx.seed * 7919 + length + 2_000_003)
            cand.complete(prefix + other, 1, top_k)  # warm-up: the prefix is now cached
            got = cand.complete(prefix + suffix, params.new_tokens, top_k)
            want = ref.complete(prefix + suffix, params.new_tokens, top_k)
            completions.append(got)
            judged = judge(ctx, want, got)
            row = {
                "prefix_length": length,
                "prompt_length": length + SUFFIX,
                "cached_tokens": got.cached_tokens,
                "reference_cached_tokens": want.cached_tokens,
                **judged.row(),
                "candidate_s": round(got.seconds, 4),
                "reference_s": round(want.seconds, 4),
            }
            rows.append(row)
            if not got.cached_tokens:
                no_hit.append(length)
            if judged.failed:
                failed_at.append(length)
                failures.append(f"length {length}: {failure_words(level, judged)}")
            elif judged.warn:
                warnings.append(f"length {length}: {failure_words(level, judged)}")
        servers = {"reference": ref.evidence(), "candidate": cand.evidence()}
    hits = [r for r in rows if r["cached_tokens"]]
    require_hits(
        [r["cached_tokens"] for r in rows],
        f"at any prefix length ({', '.join(str(r['prefix_length']) for r in rows)})",
    )
    ref_hits = [r["prefix_length"] for r in rows if r["reference_cached_tokens"]]
    evidence = {"lengths": rows, "servers": servers, "claim": level, "top_k": top_k}
    metrics = {
        "lengths": len(rows),
        "lengths_with_hit": len(hits),
        "diverging_lengths": [r["prefix_length"] for r in rows if not r["tokens_match"]],
        "max_abs_dlogprob": worst(r["max_abs_dlogprob"] for r in rows),
        "max_cached_tokens": max(int(r["cached_tokens"] or 0) for r in rows),
    }
    exercise = {
        "cached_tokens_by_length": {str(r["prefix_length"]): r["cached_tokens"] for r in rows},
        "requests": 3 * len(rows),
    }
    outcome = Outcome("pass", "", metrics, evidence, exercise, observation=observation(completions))
    problems = list(failures)
    if no_hit:
        problems.append(f"no cache hit at length(s) {', '.join(map(str, no_hit))}: not exercised there")
    if ref_hits:
        problems.append(
            f"the reference server reused cached tokens at length(s) {', '.join(map(str, ref_hits))}: "
            "it must run with its cache off to be the oracle"
        )
    if problems:
        outcome.status = "fail"
        outcome.detected_at = failed_at[0] if failed_at else None
        outcome.message = "; ".join(problems)
        outcome.diagnosis = {"problems": problems}
        return outcome
    hit_words = ", ".join(f"{r['prefix_length']}:{r['cached_tokens']}" for r in rows)
    if warnings:
        outcome.status = "warn"
        outcome.message = f"greedy tokens agree at every length; logprobs over tolerance: {'; '.join(warnings)}"
        return outcome
    outcome.message = (
        f"{level} holds at {len(rows)} prefix lengths, {params.new_tokens} greedy tokens each, with a cache hit at "
        f"every length (length:cached tokens {hit_words}); max |Δlogprob| {metrics['max_abs_dlogprob']:.3g}"
    )
    return outcome
