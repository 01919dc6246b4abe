"""engine-prefix-parity's body: measure every planned prefix length, judge each reply, explain."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gate.checks._engine import (
    EnginePair,
    engine_pair,
    expected_hit,
    failure_words,
    judge,
    not_reusable,
    observation,
    probe_block,
    problems_outcome,
    require_hits,
    same_vocabulary,
    seeded_prompt,
    unreported_logprobs,
)
from gate.checks._topk import worst
from gate.checks.engine_prefix_parity import SUFFIX, EnginePrefixParams, planned_lengths
from gate.core.check import CheckContext, Outcome, check

if TYPE_CHECKING:
    from gate.protocols import CacheGeometry, EngineCompletion


@dataclass(frozen=True)
class Observations:
    """The lengths as planned on the geometry, and per length the reference's and candidate's reply."""

    limit: int
    geometry: CacheGeometry
    block: int | None
    lengths: list[int]
    by_design: list[int]
    replies: list[tuple[int, EngineCompletion, EngineCompletion]]
    servers: dict[str, Any]


@dataclass
class Judgement:
    """Per length its evidence row; what failed, warned and went without a hit."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    no_hit: list[int] = field(default_factory=list)
    failed_at: list[int] = field(default_factory=list)


def measure(ctx: CheckContext, params: EnginePrefixParams, pair: EnginePair) -> Observations:
    """Plan the lengths on the candidate's reuse block (probed when unstated), then per length warm the
    candidate's cache with the prefix and send prefix + suffix to both servers."""
    reference, candidate, top_k = pair.reference, pair.candidate, pair.top_k
    replies: list[tuple[int, EngineCompletion, EngineCompletion]] = []
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
        for length in lengths:
            ctx.log(f"  prefix length {length}")
            prefix = seeded_prompt(vocab, length, ctx.seed * 7919 + length)
            suffix = seeded_prompt(vocab, SUFFIX, ctx.seed * 7919 + length + 1_000_003)
            other = seeded_prompt(vocab, SUFFIX, ctx.seed * 7919 + length + 2_000_003)
            cand.complete(prefix + other, 1, top_k)  # warm-up: the prefix is now cached
            got = cand.complete(prefix + suffix, params.new_tokens, top_k)
            replies.append((length, ref.complete(prefix + suffix, params.new_tokens, top_k), got))
        servers = {"reference": ref.evidence(), "candidate": cand.evidence()}
    return Observations(limit, geometry, block, lengths, not_reusable(block, lengths), replies, servers)


def judge_lengths(ctx: CheckContext, obs: Observations) -> Judgement:
    """Each length's reply against the reference's under the claim, and whether it hit (pure)."""
    level, out = ctx.manifest.claim.level, Judgement()
    for length, want, got in obs.replies:
        judged = judge(ctx, want, got)
        out.rows.append(
            {
                "prefix_length": length,
                "prompt_length": length + SUFFIX,
                "cached_tokens": got.cached_tokens,
                "reusable": length not in obs.by_design,
                "expected_cached_tokens": expected_hit(obs.block, length),
                "reference_cached_tokens": want.cached_tokens,
                **judged.row(),
                "candidate_s": round(got.seconds, 4),
                "reference_s": round(want.seconds, 4),
            }
        )
        if not got.cached_tokens and length not in obs.by_design:
            out.no_hit.append(length)
        if judged.failed:
            out.failed_at.append(length)
            out.failures.append(f"length {length}: {failure_words(level, judged)}")
        elif judged.warn:
            out.warnings.append(f"length {length}: {failure_words(level, judged)}")
    return out


def explain(params: EnginePrefixParams, pair: EnginePair, obs: Observations, j: Judgement) -> Outcome:
    """The Outcome of the judgement, built once: fail, warn or pass."""
    rows, by_design, block = j.rows, obs.by_design, obs.block
    metrics = {
        "lengths": len(rows),
        "lengths_with_hit": len([r for r in rows if r["cached_tokens"]]),
        "not_reusable_by_design": by_design,
        "diverging_lengths": [r["prefix_length"] for r in rows if not r["tokens_match"]],
        "max_abs_dlogprob": worst(r["max_abs_dlogprob"] for r in rows),
        "max_cached_tokens": max(int(r["cached_tokens"] or 0) for r in rows),
    }
    exercise = {
        "cached_tokens_by_length": {str(r["prefix_length"]): r["cached_tokens"] for r in rows},
        "requests": 3 * len(rows),
    }
    seen: dict[str, Any] = {"metrics": metrics, "evidence": _evidence(params, pair, obs, j), "exercise": exercise}
    seen["observation"] = observation([got for _, _, got in obs.replies])
    problems = _problems(j)
    if problems:
        return problems_outcome(problems, j.failed_at[0] if j.failed_at else None, failure_class(obs, j), **seen)
    if j.warnings:
        message = f"greedy tokens agree at every length; logprobs over tolerance: {'; '.join(j.warnings)}"
        return Outcome("warn", message, **seen)
    hit_words = ", ".join(f"{r['prefix_length']}:{r['cached_tokens']}" for r in rows if r["reusable"])
    design = (
        f"; not reusable by design (below the first {block}-token block, compared all the same): "
        f"{', '.join(map(str, by_design))}"
        if by_design
        else ""
    )
    planned = f" (lengths planned on {obs.geometry.words()})" if block is not None and block > 1 else ""
    message = (
        f"{pair.level} holds at {len(rows)} prefix lengths{planned}, {params.new_tokens} greedy tokens each, with a "
        f"cache hit at every reusable length (length:cached tokens {hit_words}){design}; "
        f"max |Δlogprob| {metrics['max_abs_dlogprob']:.3g}"
    )
    return Outcome("pass", message, **seen)


def failure_class(obs: Observations, j: Judgement) -> str | None:
    """cached-reply for a reply that differs, unreported-logprobs when every failing reply has the
    reference's tokens and leaves out top-k the reference reports (the engine left out the probabilities,
    e.g. llama.cpp b8672 with speculative decoding on), missed-reuse when nothing failed but a length
    went without a hit."""
    failing = [(want, got) for length, want, got in obs.replies if length in j.failed_at]
    if failing and all(unreported_logprobs(want, got) for want, got in failing):
        return "unreported-logprobs"
    return "cached-reply" if j.failures else "missed-reuse" if j.no_hit else None


def _problems(j: Judgement) -> list[str]:
    problems = list(j.failures)
    if j.no_hit:
        problems.append(f"no cache hit at length(s) {', '.join(map(str, j.no_hit))}: not exercised there")
    ref_hits = [r["prefix_length"] for r in j.rows if r["reference_cached_tokens"]]
    if ref_hits:
        problems.append(
            f"the reference server reused cached tokens at length(s) {', '.join(map(str, ref_hits))}: "
            "it must run with its cache off to be the oracle"
        )
    return problems


def _evidence(params: EnginePrefixParams, pair: EnginePair, obs: Observations, j: Judgement) -> dict[str, Any]:
    coverage = {
        "lengths": obs.lengths,
        "planned_on": obs.geometry.model_dump(mode="json") if params.geometry else None,
        "not_reusable_by_design": obs.by_design,
        "limit": obs.limit,
    }
    return {"lengths": j.rows, "coverage": coverage, "servers": obs.servers, "claim": pair.level, "top_k": pair.top_k}


@check("engine-prefix-parity", params=EnginePrefixParams)
def engine_prefix_parity(ctx: CheckContext, params: EnginePrefixParams) -> Outcome:
    """A prefix hit in the engine gives the greedy tokens and logprobs of the same engine with no cache."""
    pair = engine_pair(ctx, "engine-prefix-parity")
    if isinstance(pair, Outcome):
        return pair
    obs = measure(ctx, params, pair)
    judgement = judge_lengths(ctx, obs)
    reusable = [r for r in judgement.rows if r["reusable"]]
    require_hits(
        [r["cached_tokens"] for r in reusable],
        f"at any reusable prefix length ({', '.join(str(r['prefix_length']) for r in reusable)})",
    )
    return explain(params, pair, obs, judgement)
