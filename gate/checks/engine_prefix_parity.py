"""engine-prefix-parity: an engine's prefix cache gives what the same engine gives with it off.

Two server processes (never two request flags on one process, which may share allocator state and
hide the bug): the candidate with its prefix cache or new scheduling on, the reference with it off.
The lengths are planned on the candidate's cache geometry (gate.protocols.CacheGeometry: what the
engine states, vLLM's `cache_config_info`, else its launch flags, else a probe): on an engine that
reuses whole blocks of B tokens, B-1, B, B+1, 2B-1, 2B, 2B+1, then 4B, 8B, ... up to the context,
then the given lengths beyond 2B+1; on one that reuses any prefix (llama.cpp) the given lengths
(1, 17, 200, 2048, 8192 by default, clipped to the context; `dense` adds log-spaced lengths). A
length below the first block cannot hit by design: it is compared all the same and reported as
"not reusable by design" in the coverage, never a failure and never skipped. A warm-up request
with the prefix and another suffix forces the candidate to cache the prefix; then the request
itself (prefix + suffix) goes to both servers and the first 8 greedy tokens with their top-k
logprobs are compared under the claim (gate.checks._engine).

Proof of exercise is the candidate's own report of reused prompt tokens at each length. A run in
which the candidate never reports a reused token is an error ("the cache never hit"), never a pass;
a reusable length without a hit is reported as not exercised and fails the check. No request asks
for prompt logprobs (vLLM skips its prefix cache for such a request).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field

from gate.checks._engine import (
    NEW_TOKENS,
    clip_lengths,
    engine_pair,
    expected_hit,
    failure_words,
    geometry_lengths,
    judge,
    not_reusable,
    observation,
    probe_block,
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
    geometry: bool = True
    """Plan the lengths on the candidate's reuse block (its edges ±1 and multiples); false: `lengths` as given."""


def planned_lengths(params: EnginePrefixParams, limit: int, block: int | None) -> list[int]:
    """The lengths the check visits: `lengths` (and `dense`) planned on the reuse block, clipped to
    `limit`; the same rule `gate plan` states (gate.checks._coverage)."""
    lengths = list(params.lengths)
    if params.dense:
        top = max(2, min(max(lengths), limit))
        lengths += [round(math.exp(math.log(top) * (i + 1) / (params.dense + 1))) for i in range(params.dense)]
    if not params.geometry:
        return sorted(clip_lengths(lengths, limit))
    return geometry_lengths(block, limit, lengths)


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
        geometry = candidate.cache_geometry
        if params.geometry and geometry.block_size is None and geometry.prefix_caching is not False:
            measured, words = probe_block(cand, vocab, limit)
            geometry = geometry.model_copy(update={"block_size": measured, "source": words})
            cand.reset_cache()  # the probe's prefixes are not left for the sweep to hit
        block = geometry.block_size if params.geometry else None
        lengths = planned_lengths(params, limit, block)
        by_design = not_reusable(block, lengths)
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
                "reusable": length not in by_design,
                "expected_cached_tokens": expected_hit(block, length),
                "reference_cached_tokens": want.cached_tokens,
                **judged.row(),
                "candidate_s": round(got.seconds, 4),
                "reference_s": round(want.seconds, 4),
            }
            rows.append(row)
            if not got.cached_tokens and length not in by_design:
                no_hit.append(length)
            if judged.failed:
                failed_at.append(length)
                failures.append(f"length {length}: {failure_words(level, judged)}")
            elif judged.warn:
                warnings.append(f"length {length}: {failure_words(level, judged)}")
        servers = {"reference": ref.evidence(), "candidate": cand.evidence()}
    hits = [r for r in rows if r["cached_tokens"]]
    require_hits(
        [r["cached_tokens"] for r in rows if r["reusable"]],
        f"at any reusable prefix length ({', '.join(str(r['prefix_length']) for r in rows if r['reusable'])})",
    )
    coverage = {
        "lengths": lengths,
        "planned_on": geometry.model_dump(mode="json") if params.geometry else None,
        "not_reusable_by_design": by_design,
        "limit": limit,
    }
    ref_hits = [r["prefix_length"] for r in rows if r["reference_cached_tokens"]]
    evidence = {"lengths": rows, "coverage": coverage, "servers": servers, "claim": level, "top_k": top_k}
    metrics = {
        "lengths": len(rows),
        "lengths_with_hit": len(hits),
        "not_reusable_by_design": by_design,
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
    hit_words = ", ".join(f"{r['prefix_length']}:{r['cached_tokens']}" for r in rows if r["reusable"])
    design = (
        f"; not reusable by design (below the first {block}-token block, compared all the same): "
        f"{', '.join(map(str, by_design))}"
        if by_design
        else ""
    )
    planned = f" (lengths planned on {geometry.words()})" if block is not None and block > 1 else ""
    if warnings:
        outcome.status = "warn"
        outcome.message = f"greedy tokens agree at every length; logprobs over tolerance: {'; '.join(warnings)}"
        return outcome
    outcome.message = (
        f"{level} holds at {len(rows)} prefix lengths{planned}, {params.new_tokens} greedy tokens each, with a cache "
        f"hit at every reusable length (length:cached tokens {hit_words}){design}; "
        f"max |Δlogprob| {metrics['max_abs_dlogprob']:.3g}"
    )
    return outcome
