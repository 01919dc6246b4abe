"""engine-prefix-parity's body: measure every planned prefix length, judge each reply, explain."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gate.checks._engine import (
    EnginePair,
    engine_check,
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
from gate.checks._eos import EosSelection, eos_fields, select_eos_prompts, stop_problem
from gate.checks._topk import worst
from gate.checks.engine_prefix_parity import EOS_PROMPT, SUFFIX, EnginePrefixParams, planned_lengths
from gate.core.check import CheckContext, Outcome

if TYPE_CHECKING:
    from gate.protocols import CacheGeometry, EngineCompletion, EngineServer


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
    eos: EosSelection | None = None
    """The prompts tried for an end at end-of-sequence on the reference (None: not tried)."""
    eos_replies: list[tuple[EngineCompletion, EngineCompletion, EngineCompletion]] = field(default_factory=list)
    """Per prompt that ended there: the reference's reply, the candidate's first, and its second (cached)."""


@dataclass
class Judgement:
    """Per length its evidence row; what failed, warned and went without a hit."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    no_hit: list[int] = field(default_factory=list)
    failed_at: list[int] = field(default_factory=list)
    eos_rows: list[dict[str, Any]] = field(default_factory=list)
    eos_failed: list[tuple[EngineCompletion, EngineCompletion]] = field(default_factory=list)
    """The failing end-of-sequence replies, each with the reference's."""


def measure(ctx: CheckContext, params: EnginePrefixParams, pair: EnginePair) -> Observations:
    """Plan the lengths on the candidate's reuse block (probed when unstated), then per length warm up and compare."""
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
        eos, eos_replies = _measure_eos(ctx, params, (ref, cand), vocab, top_k)
        servers = {"reference": ref.evidence(), "candidate": cand.evidence()}
    by_design = not_reusable(block, lengths)
    return Observations(limit, geometry, block, lengths, by_design, replies, servers, eos, eos_replies)


def _measure_eos(
    ctx: CheckContext, params: EnginePrefixParams, servers: tuple[EngineServer, EngineServer], vocab: int, top_k: int
) -> tuple[EosSelection | None, list[tuple[EngineCompletion, EngineCompletion, EngineCompletion]]]:
    """Seeded prompts the reference ends at end-of-sequence (gate.checks._eos), each sent to the candidate twice."""
    if not params.eos_candidates:
        return None, []
    ref, cand = servers
    fields = eos_fields(cand.flavor)
    prompts = [seeded_prompt(vocab, EOS_PROMPT, ctx.seed * 7919 + 5_000_003 + i) for i in range(params.eos_candidates)]
    selection = select_eos_prompts(
        lambda prompt, budget, extra: ref.complete(prompt, budget, top_k, extra),
        prompts,
        fields,
        budget=params.eos_budget,
    )
    replies = []
    for prompt, want in selection.chosen:
        first = cand.complete(prompt, params.eos_budget, top_k, fields)
        replies.append((want, first, cand.complete(prompt, params.eos_budget, top_k, fields)))
    return selection, replies


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
    for i, (want, *pair) in enumerate(obs.eos_replies):
        for request, got in zip(("first", "again"), pair, strict=True):
            _judge_eos(ctx, out, (i, request), want, got)
    return out


def _judge_eos(
    ctx: CheckContext, out: Judgement, at: tuple[int, str], want: EngineCompletion, got: EngineCompletion
) -> None:
    """One reply to a prompt the reference ends at end-of-sequence: it must stop where the reference does."""
    judged, stop = judge(ctx, want, got), stop_problem(want, got)
    failed = judged.failed or (stop is not None and stop.certain)
    out.eos_rows.append(
        {
            "eos_prompt": at[0],
            "request": at[1],
            "prompt_length": EOS_PROMPT,
            "cached_tokens": got.cached_tokens,
            "reference_tokens": len(want.tokens),
            "candidate_tokens": len(got.tokens),
            "finish_reason": got.finish_reason,
            "stop": None if stop is None else stop.words,
            "failed": failed,
            **judged.row(),
        }
    )
    words = failure_words(ctx.manifest.claim.level, judged)
    if stop is not None:
        words = stop.words if stop.certain else f"{stop.words}; {words}"
    name = f"end-of-sequence prompt {at[0]} ({'its first reply' if at[1] == 'first' else 'asked again'}, "
    name += f"{got.cached_tokens} cached tokens)"
    if failed:
        out.eos_failed.append((want, got))
        out.failed_at.append(EOS_PROMPT)
        out.failures.append(f"{name}: {words}")
    elif judged.warn:
        out.warnings.append(f"{name}: {words}")


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
        "eos_stop_requests": len(j.eos_rows),
    }
    exercise = {
        "cached_tokens_by_length": {str(r["prefix_length"]): r["cached_tokens"] for r in rows},
        "requests": 3 * len(rows) + len(j.eos_rows) + (obs.eos.tried if obs.eos else 0),
    }
    seen: dict[str, Any] = {"metrics": metrics, "evidence": _evidence(params, pair, obs, j), "exercise": exercise}
    seen["observation"] = observation([got for _, _, got in obs.replies])
    problems = list(j.failures)
    if j.no_hit:
        problems.append(f"no cache hit at length(s) {', '.join(map(str, j.no_hit))}: not exercised there")
    ref_hits = [r["prefix_length"] for r in j.rows if r["reference_cached_tokens"]]
    if ref_hits:
        problems.append(
            f"the reference server reused cached tokens at length(s) {', '.join(map(str, ref_hits))}: "
            "it must run with its cache off to be the oracle"
        )
    if problems:
        return problems_outcome(problems, j.failed_at[0] if j.failed_at else None, failure_class(obs, j), **seen)
    if j.warnings:
        message = f"greedy tokens agree at every length; logprobs over tolerance: {'; '.join(j.warnings)}"
        message += _eos_words(obs)
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
        f"max |Δlogprob| {metrics['max_abs_dlogprob']:.3g}" + _eos_words(obs)
    )
    return Outcome("pass", message, **seen)


def _eos_words(obs: Observations) -> str:
    if obs.eos is None:
        return ""
    if not obs.eos_replies:
        return f"; {obs.eos.words()}"
    return f"; {obs.eos.words()}: each ended by the candidate where the reference ends it, asked twice (then cached)"


def failure_class(obs: Observations, j: Judgement) -> str | None:
    """cached-reply for a reply that differs, unreported-logprobs when every failing one only leaves out
    top-k the reference reports (llama.cpp b8672 with speculative decoding), missed-reuse for a length
    without a hit."""
    failing = [(want, got) for length, want, got in obs.replies if length in j.failed_at]
    failing += j.eos_failed
    if failing and all(unreported_logprobs(want, got) for want, got in failing):
        return "unreported-logprobs"
    return "cached-reply" if j.failures else "missed-reuse" if j.no_hit else None


def _evidence(params: EnginePrefixParams, pair: EnginePair, obs: Observations, j: Judgement) -> dict[str, Any]:
    coverage = {
        "lengths": obs.lengths,
        "planned_on": obs.geometry.model_dump(mode="json") if params.geometry else None,
        "not_reusable_by_design": obs.by_design,
        "limit": obs.limit,
    }
    out = {"lengths": j.rows, "coverage": coverage, "servers": obs.servers, "claim": pair.level, "top_k": pair.top_k}
    if obs.eos is not None:
        out["eos_stop"] = {"reached": bool(obs.eos_replies), "words": obs.eos.words(), "requests": j.eos_rows}
    return out


@engine_check("engine-prefix-parity", params=EnginePrefixParams)
def engine_prefix_parity(ctx: CheckContext, params: EnginePrefixParams, pair: EnginePair) -> Outcome:
    """A prefix hit in the engine gives the greedy tokens and logprobs of the same engine with no cache."""
    obs = measure(ctx, params, pair)
    judgement = judge_lengths(ctx, obs)
    reusable = [r for r in judgement.rows if r["reusable"]]
    require_hits(
        [r["cached_tokens"] for r in reusable],
        f"at any reusable prefix length ({', '.join(str(r['prefix_length']) for r in reusable)})",
    )
    return explain(params, pair, obs, judgement)
