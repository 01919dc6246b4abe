"""engine-repeat-consistency: a hosted API whose cache cannot be switched off, judged by behaviour.

A hosted API keeps its prompt cache on and offers no second deployment without it, so there is no
no-cache server to compare with. What is left is behavioural. For each of `prompts` fresh prompts
(seeded token ids never sent before, so the first request must be cold; the reply's reported
cache-read tokens must say 0), the check sends the prompt cold, then `distractors` requests that
share its first part, insert fresh tokens and then continue with the rest of the prompt (they leave
neighbouring state in the cache: a cache that keys on too little serves their state, and one that
reuses chunks found after a mismatch, shifted to new positions, serves K/V computed in another
context), then the prompt again `repeats` times. Every reply is compared with the cold one under the claim; the replies
are split by the cache-read tokens they report, and a reply served from the cache that disagrees
fails the check.

It is weaker than engine-prefix-parity, and the dossier says so: the cold reply comes from the same
deployment (a bug in the cold path is invisible), and an engine that is not deterministic at
temperature 0 cannot be judged at all (disagreement among uncached replies makes the check
unproven, never a failure blamed on the cache). Proof of exercise is the engine's own report of
cache-read tokens on the repeats; an engine that never reports a hit is an error ("the cache never
hit"). Only the candidate is sent requests; the reference is not used.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gate.checks._engine import (
    NEW_TOKENS,
    Judged,
    clip_lengths,
    engine_pair,
    failure_words,
    judge,
    observation,
    require_hits,
    seeded_prompt,
)
from gate.checks._topk import worst
from gate.core.check import CheckContext, Outcome, Params, check
from gate.protocols import EngineCompletion


class EngineRepeatParams(Params):
    """The schedule of requests: fresh prompts, their distractors and repeats."""

    prompts: int = Field(default=3, ge=1, le=32)
    """Fresh prompts, each judged on its own."""
    length: int = Field(default=1088, ge=2)
    """Prompt length (hosted caches often start at 1,024 tokens); clipped to the context."""
    shared: float = Field(default=0.5, gt=0, lt=1)
    """Share of the prompt a distractor has in common with it (its first part)."""
    distractors: int = Field(default=2, ge=0, le=16)
    """Requests between the cold reply and the repeats: the prompt's first part, fresh tokens, the rest."""
    inserted: int = Field(default=64, ge=1, le=4096)
    """Fresh tokens a distractor inserts after the shared first part."""
    repeats: int = Field(default=3, ge=1, le=64)
    """Repeats of the prompt after the distractors."""
    new_tokens: int = Field(default=NEW_TOKENS, ge=1, le=64)
    """Greedy tokens compared."""


@check("engine-repeat-consistency", params=EngineRepeatParams)
def engine_repeat_consistency(ctx: CheckContext, params: EngineRepeatParams) -> Outcome:
    """The same greedy request, cold and served from the engine's cache, gives the same reply."""
    pair = engine_pair(ctx, "engine-repeat-consistency")
    if isinstance(pair, Outcome):
        return pair
    candidate, level, top_k = pair.candidate, pair.level, pair.top_k
    [length] = clip_lengths([params.length], candidate.max_len - params.inserted - params.new_tokens - 1)
    head = max(1, min(length - 1, round(length * params.shared)))
    rows: list[dict[str, Any]] = []
    hit_replies: list[EngineCompletion] = []
    problems: list[str] = []
    warned: list[str] = []
    unjudged: list[str] = []
    with candidate.serve(label="candidate") as served:
        vocab = int(served.info.get("vocab_size") or candidate.vocab_size)
        for p in range(params.prompts):
            base = ctx.seed * 7_368_787 + 1009 * p + 17
            prompt = seeded_prompt(vocab, length, base)
            cold = served.complete(prompt, params.new_tokens, top_k)
            for d in range(params.distractors):
                inserted = seeded_prompt(vocab, params.inserted, base + 1 + d)
                served.complete(prompt[:head] + inserted + prompt[head:], params.new_tokens, top_k)
            repeats = [served.complete(prompt, params.new_tokens, top_k) for _ in range(params.repeats)]
            row, judged = _judge_prompt(ctx, p, cold, repeats)
            rows.append(row)
            hit_replies += [r for r in repeats if r.cached_tokens]
            where = f"prompt {p}"
            if row["cold_cached_tokens"]:
                unjudged.append(
                    f"{where}: its first request already read {row['cold_cached_tokens']} tokens from a cache"
                )
            elif row["uncached_disagree"]:
                unjudged.append(
                    f"{where}: {row['uncached_disagree']} of {row['uncached_repeats']} uncached repeats disagree with "
                    "the cold reply (the engine is not deterministic at temperature 0)"
                )
            if row["cold_cached_tokens"] or row["uncached_disagree"]:
                continue  # no clean cold reply to judge this prompt's cached replies against
            for index, verdict in judged:
                if verdict.failed:
                    problems.append(f"{where}, repeat {index} (cache-read): {failure_words(level, verdict)}")
                elif verdict.warn:
                    warned.append(f"{where}, repeat {index}: {failure_words(level, verdict)}")
        server = served.evidence()
    require_hits(
        [c for row in rows for c in row["repeat_cached_tokens"]],
        f"on any of the {params.prompts * params.repeats} repeats",
    )
    hits = sum(int(row["hit_repeats"] or 0) for row in rows)
    metrics = {
        "prompt_length": length,
        "prompts": params.prompts,
        "cache_read_repeats": hits,
        "max_abs_dlogprob": worst(float(row["max_abs_dlogprob"]) for row in rows),
    }
    evidence = {
        "weaker_test": (
            "behavioural: cold and cached replies come from one deployment whose cache cannot be switched off; "
            "a bug in the cold path is invisible and nondeterminism makes the check unproven"
        ),
        "schedule": {
            "distractors": params.distractors,
            "inserted": params.inserted,
            "repeats": params.repeats,
            "shared_prefix": head,
        },
        "prompts": rows,
        "server": server,
    }
    exercise = {
        "cache_read_repeats": hits,
        "cache_read_tokens": sum(int(r.cached_tokens or 0) for r in hit_replies),
    }
    outcome = Outcome("pass", "", metrics, evidence, exercise, observation=observation(hit_replies))
    if problems:
        outcome.status, outcome.message = "fail", "; ".join(problems)
        outcome.detected_at = length
        outcome.diagnosis = {"problems": problems}
        return outcome
    if len(unjudged) == len(rows):
        outcome.status, outcome.message = "unproven", "no prompt could be judged: " + "; ".join(unjudged)
        return outcome
    if warned:
        outcome.status, outcome.message = "warn", "greedy replies agree; " + "; ".join(warned)
        return outcome
    skipped = f"; not judged: {'; '.join(unjudged)}" if unjudged else ""
    outcome.message = (
        f"{level} holds between the cold reply and {hits} cache-read repeats of {len(rows) - len(unjudged)} "
        f"fresh {length}-token prompts, after {params.distractors} distractors that insert {params.inserted} tokens "
        f"after their first {head} "
        f"(a behavioural test: the cold reply comes from the same deployment){skipped}"
    )
    return outcome


def _judge_prompt(
    ctx: CheckContext, index: int, cold: EngineCompletion, repeats: list[EngineCompletion]
) -> tuple[dict[str, Any], list[tuple[int, Judged]]]:
    """One prompt's repeats against its cold reply: the evidence row and each cache-read repeat's judgement."""
    judged = [(i, judge(ctx, cold, r)) for i, r in enumerate(repeats)]
    reported = [r.cached_tokens for r in repeats]
    uncached = [j for (i, j), r in zip(judged, repeats, strict=True) if not r.cached_tokens]
    row = {
        "prompt": index,
        "cold_cached_tokens": cold.cached_tokens,
        "repeat_cached_tokens": reported,
        "hit_repeats": None if all(c is None for c in reported) else sum(1 for c in reported if c),
        "uncached_repeats": len(uncached),
        "uncached_disagree": sum(1 for j in uncached if j.failed),
        "max_abs_dlogprob": worst(j.comparison.max_abs_delta for _, j in judged),
        "repeats": [
            {"repeat": i, "cached_tokens": r.cached_tokens, **j.row()}
            for (i, j), r in zip(judged, repeats, strict=True)
        ],
    }
    hit = [(i, j) for (i, j), r in zip(judged, repeats, strict=True) if r.cached_tokens]
    return row, hit
