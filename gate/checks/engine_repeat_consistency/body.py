"""engine-repeat-consistency's body: measure cold replies and repeats, judge each prompt, explain."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gate.checks._engine import (
    EnginePair,
    clip_lengths,
    engine_check,
    failure_words,
    judge,
    observation,
    problems_outcome,
    require_hits,
    seeded_prompt,
    tolerated_change,
)
from gate.checks._topk import worst
from gate.checks.engine_repeat_consistency import EngineRepeatParams
from gate.core.check import CheckContext, Outcome

if TYPE_CHECKING:
    from gate.protocols import EngineCompletion, EngineServing


@dataclass(frozen=True)
class Observations:
    """Per fresh prompt its cold reply and its repeats (after the distractors), and the server."""

    length: int
    head: int
    replies: list[tuple[EngineCompletion, list[EngineCompletion]]]
    server: dict[str, Any]


@dataclass
class Judgement:
    """Each prompt's evidence row, the cache-read replies, and what broke, warned or went unjudged."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    hit_replies: list[EngineCompletion] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warned: list[str] = field(default_factory=list)
    unjudged: list[str] = field(default_factory=list)
    widest: float = 0.0
    """The widest logprob tolerance a cache-read repeat was judged with."""


def measure(ctx: CheckContext, params: EngineRepeatParams, candidate: EngineServing, top_k: int) -> Observations:
    """Per fresh prompt: cold, the distractors that share its first part, then the repeats."""
    [length] = clip_lengths([params.length], candidate.max_len - params.inserted - params.new_tokens - 1)
    head = max(1, min(length - 1, round(length * params.shared)))
    replies: list[tuple[EngineCompletion, list[EngineCompletion]]] = []
    with candidate.serve(label="candidate") as served:
        vocab = int(served.info.get("vocab_size") or candidate.vocab_size)
        for p in range(params.prompts):
            base = ctx.seed * 7_368_787 + 1009 * p + 17
            prompt = seeded_prompt(vocab, length, base)
            cold = served.complete(prompt, params.new_tokens, top_k)
            for d in range(params.distractors):
                inserted = seeded_prompt(vocab, params.inserted, base + 1 + d)
                served.complete(prompt[:head] + inserted + prompt[head:], params.new_tokens, top_k)
            replies.append((cold, [served.complete(prompt, params.new_tokens, top_k) for _ in range(params.repeats)]))
        server = served.evidence()
    return Observations(length, head, replies, server)


def judge_prompts(ctx: CheckContext, obs: Observations) -> Judgement:
    """Every prompt's cache-read repeats against its clean cold reply, under the claim (pure)."""
    level, out = ctx.manifest.claim.level, Judgement()
    for p, (cold, repeats) in enumerate(obs.replies):
        judged = [judge(ctx, cold, r) for r in repeats]
        reported = [r.cached_tokens for r in repeats]
        uncached = [j for j, r in zip(judged, repeats, strict=True) if not r.cached_tokens]
        disagree = sum(1 for j in uncached if j.failed)
        out.rows.append(
            {
                "prompt": p,
                "cold_cached_tokens": cold.cached_tokens,
                "repeat_cached_tokens": reported,
                "hit_repeats": None if all(c is None for c in reported) else sum(1 for c in reported if c),
                "uncached_repeats": len(uncached),
                "uncached_disagree": disagree,
                "max_abs_dlogprob": worst(j.comparison.max_abs_delta for j in judged),
                "repeats": [
                    {"repeat": i, "cached_tokens": r.cached_tokens, **j.row()}
                    for i, (j, r) in enumerate(zip(judged, repeats, strict=True))
                ],
            }
        )
        out.hit_replies += [r for r in repeats if r.cached_tokens]
        where = f"prompt {p}"
        if cold.cached_tokens:
            out.unjudged.append(f"{where}: its first request already read {cold.cached_tokens} tokens from a cache")
        elif disagree:
            out.unjudged.append(
                f"{where}: {disagree} of {len(uncached)} uncached repeats disagree with "
                "the cold reply (the engine is not deterministic at temperature 0)"
            )
        if cold.cached_tokens or disagree:
            continue  # no clean cold reply to judge this prompt's cached replies against
        for index, (verdict, r) in enumerate(zip(judged, repeats, strict=True)):
            if not r.cached_tokens:
                continue
            out.widest = max(out.widest, verdict.comparison.tolerance)
            if verdict.failed:
                out.problems.append(f"{where}, repeat {index} (cache-read): {failure_words(level, verdict)}")
            elif verdict.warn:
                out.warned.append(f"{where}, repeat {index}: {failure_words(level, verdict)}")
    return out


def explain(ctx: CheckContext, params: EngineRepeatParams, obs: Observations, j: Judgement) -> Outcome:
    """The Outcome of the judgement: fail, unproven (nothing judged), warn or pass, built once."""
    length, hits = obs.length, sum(int(row["hit_repeats"] or 0) for row in j.rows)
    metrics = {
        "prompt_length": length,
        "prompts": params.prompts,
        "cache_read_repeats": hits,
        "max_abs_dlogprob": worst(float(row["max_abs_dlogprob"]) for row in j.rows),
    }
    exercise = {"cache_read_repeats": hits, "cache_read_tokens": sum(int(r.cached_tokens or 0) for r in j.hit_replies)}
    evidence = {
        "weaker_test": (
            "behavioural: cold and cached replies come from one deployment whose cache cannot be switched off; "
            "a bug in the cold path is invisible and nondeterminism makes the check unproven"
        ),
        "schedule": {
            "distractors": params.distractors,
            "inserted": params.inserted,
            "repeats": params.repeats,
            "shared_prefix": obs.head,
        },
        "prompts": j.rows,
        "server": obs.server,
    }
    seen: dict[str, Any] = {"metrics": metrics, "evidence": evidence, "exercise": exercise}
    seen["observation"] = observation(j.hit_replies)
    seen["tolerated_change"] = tolerated_change(ctx.manifest.claim.level, j.widest)
    if j.problems:
        return problems_outcome(j.problems, length, **seen)
    if len(j.unjudged) == len(j.rows):
        return Outcome("unproven", "no prompt could be judged: " + "; ".join(j.unjudged), **seen)
    if j.warned:
        return Outcome("warn", "greedy replies agree; " + "; ".join(j.warned), **seen)
    skipped = f"; not judged: {'; '.join(j.unjudged)}" if j.unjudged else ""
    message = (
        f"{ctx.manifest.claim.level} holds between the cold reply and {hits} cache-read repeats of "
        f"{len(j.rows) - len(j.unjudged)} fresh {length}-token prompts, after {params.distractors} distractors "
        f"that insert {params.inserted} tokens after their first {obs.head} "
        f"(a behavioural test: the cold reply comes from the same deployment){skipped}"
    )
    return Outcome("pass", message, **seen)


@engine_check("engine-repeat-consistency", params=EngineRepeatParams)
def engine_repeat_consistency(ctx: CheckContext, params: EngineRepeatParams, pair: EnginePair) -> Outcome:
    """The same greedy request, cold and served from the engine's cache, gives the same reply."""
    obs = measure(ctx, params, pair.candidate, pair.top_k)
    judgement = judge_prompts(ctx, obs)
    require_hits(
        [c for row in judgement.rows for c in row["repeat_cached_tokens"]],
        f"on any of the {params.prompts * params.repeats} repeats",
    )
    return explain(ctx, params, obs, judgement)
