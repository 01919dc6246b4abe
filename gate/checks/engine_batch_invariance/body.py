"""engine-batch-invariance's body: measure the target alone and among others, judge, explain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gate.checks._engine import (
    EnginePair,
    Judged,
    clip_lengths,
    engine_check,
    failure_words,
    judge,
    observation,
    problems_outcome,
    same_vocabulary,
    seeded_prompt,
    send_together,
    tolerated_change,
)
from gate.checks._noise import NoiseFloor, measure_noise
from gate.checks._topk import worst
from gate.checks.engine_batch_invariance import EngineBatchParams
from gate.core.check import CheckContext, Outcome

if TYPE_CHECKING:
    from gate.protocols import EngineCompletion, EngineServer

COMPARISONS = (
    "candidate batched vs candidate alone",
    "candidate batched vs reference alone",
    "candidate alone vs reference alone",
)
"""The three comparisons, in the order the evidence lists them."""
SENDS = 3
"""Sends of the batch before batching counts as never happened: whether they overlap is timing, not the engine's."""


@dataclass(frozen=True)
class Observations:
    """The target's replies (reference alone, candidate alone, candidate batched) and the overlap."""

    length: int
    others: list[int]
    want: EngineCompletion
    alone: EngineCompletion
    batched: EngineCompletion
    slots: Any
    overlapping: int
    servers: dict[str, Any]
    noise: NoiseFloor | None
    sends: int = 1
    """How often the batch was sent: again while no other request overlapped the target, up to SENDS."""


@dataclass(frozen=True)
class Judgement:
    """Each comparison judged under the claim, with what failed and what warned."""

    judged: tuple[Judged, Judged, Judged]
    problems: list[str]
    warned: list[str]
    unexercised: str | None = None
    """Why nothing was batched (one slot, or no request overlapped the target): unproven, not a failure."""


def measure(ctx: CheckContext, params: EngineBatchParams, pair: EnginePair) -> Observations:
    """The target to the reference alone, to the candidate alone, then among concurrent others."""
    reference, candidate, top_k = pair.reference, pair.candidate, pair.top_k
    with reference.serve(label="reference") as ref, candidate.serve(label="candidate") as cand:
        vocab = same_vocabulary(ref, cand) or candidate.vocab_size
        limit = min(reference.max_len, candidate.max_len) - max(params.new_tokens, params.other_new_tokens) - 1
        [length] = clip_lengths([params.length], limit)
        others = [
            clip_lengths([params.other_lengths[i % len(params.other_lengths)]], limit)[0]
            for i in range(params.concurrent)
        ]
        target = seeded_prompt(vocab, length, ctx.seed * 104729 + 11)
        prompts = [seeded_prompt(vocab, n, ctx.seed * 104729 + 101 + i) for i, n in enumerate(others)]
        want = ref.complete(target, params.new_tokens, top_k)
        alone = cand.complete(target, params.new_tokens, top_k)
        slots = cand.info.get("total_slots")
        noise = measure_noise(
            ctx,
            cand,
            candidate.salt_field,
            vocab=vocab,
            lengths=[length, *others],
            width=len(others) + 1,
            new_tokens=params.new_tokens,
            top_k=top_k,
            limit=limit,
        )
        batched, overlapping = _batched(cand, params, target, prompts, top_k)
        sends = 1
        while not overlapping and sends < SENDS:  # no overlap is timing: the batch is sent again
            batched, overlapping = _batched(cand, params, target, prompts, top_k)
            sends += 1
        servers = {"reference": ref.evidence(), "candidate": cand.evidence()}
    return Observations(length, others, want, alone, batched, slots, overlapping, servers, noise, sends)


def _batched(
    cand: EngineServer, params: EngineBatchParams, target: list[int], prompts: list[list[int]], top_k: int
) -> tuple[EngineCompletion, int]:
    """The target sent at the same moment as the others: its reply, and how many others overlapped it."""
    jobs = [(target, params.new_tokens, top_k, None), *((p, params.other_new_tokens, top_k, None) for p in prompts)]
    (reply, (t0, t1)), *others = send_together(cand, jobs)
    return reply, sum(1 for _, (s, e) in others if s < t1 and e > t0)


def judge_replies(ctx: CheckContext, obs: Observations) -> Judgement:
    """The three comparisons under the claim, and whether batching happened at all (pure)."""
    level = ctx.manifest.claim.level
    noise = obs.noise
    judged = (
        judge(ctx, obs.alone, obs.batched, noise),
        judge(ctx, obs.want, obs.batched, noise),
        judge(ctx, obs.want, obs.alone),
    )
    problems = [f"{name}: {failure_words(level, j)}" for name, j in zip(COMPARISONS, judged, strict=True) if j.failed]
    problems += [f"not noise: {d}" for d in (noise.defects if noise is not None else [])]
    unexercised = None
    if obs.slots is not None and int(obs.slots) < 2:
        unexercised = (
            f"the candidate states {obs.slots} slot: it serves one request at a time, so nothing was batched to "
            "judge (launch it with more parallel slots to judge its batching)"
        )
    elif obs.overlapping == 0:
        unexercised = (
            f"none of the {len(obs.others)} concurrent requests overlapped the target in {obs.sends} sends: "
            "batching never happened"
        )
    warned = [f"{name}: {failure_words(level, j)}" for name, j in zip(COMPARISONS, judged, strict=True) if j.warn]
    return Judgement(judged, problems, warned, unexercised)


def explain(ctx: CheckContext, obs: Observations, j: Judgement) -> Outcome:
    """The Outcome of the judgement, built once: fail, unproven (nothing batched), warn or pass."""
    rows = [{"comparison": name, **judged.row()} for name, judged in zip(COMPARISONS, j.judged, strict=True)]
    length, slots, overlapping, concurrent = obs.length, obs.slots, obs.overlapping, len(obs.others)
    metrics = {
        "target_length": length,
        "concurrent": concurrent,
        "overlapping": overlapping,
        "candidate_slots": slots,
        "max_abs_dlogprob": worst(r["max_abs_dlogprob"] for r in rows),
    }
    requests = {"reference": obs.want, "candidate_alone": obs.alone, "candidate_batched": obs.batched}
    evidence = {
        "comparisons": rows,
        "other_lengths": obs.others,
        "requests": {name: reply.summary() for name, reply in requests.items()},
        "noise_floor": None if obs.noise is None else obs.noise.evidence(),
        "servers": obs.servers,
    }
    exercise = {"overlapping_requests": overlapping, "candidate_slots": slots, "concurrent": concurrent}
    seen: dict[str, Any] = {
        "metrics": metrics,
        "evidence": evidence,
        "exercise": {**exercise, "batch_sends": obs.sends},
        "observation": observation([obs.alone, obs.batched]),
        "tolerated_change": tolerated_change(ctx.manifest.claim.level, max(x.comparison.tolerance for x in j.judged)),
    }
    if j.problems:
        return problems_outcome(j.problems, length, _bug_class(j), **seen)
    if j.unexercised:
        return Outcome("unproven", f"not exercised: {j.unexercised}", **seen)
    if j.warned:
        return Outcome("warn", "greedy tokens agree; " + "; ".join(j.warned), **seen)
    message = (
        f"{ctx.manifest.claim.level} holds for a {length}-token request alone and among {concurrent} concurrent "
        f"requests ({overlapping} overlapping, {'slots not stated' if slots is None else f'{slots} slots'}), "
        "and against the reference alone"
    )
    message += f"; the batched reply against the {obs.noise.words()}" if obs.noise else ""
    return Outcome("pass", message, **seen)


@engine_check("engine-batch-invariance", params=EngineBatchParams)
def engine_batch_invariance(ctx: CheckContext, params: EngineBatchParams, pair: EnginePair) -> Outcome:
    """A request batched with concurrent requests of other lengths gives the greedy tokens it gives alone."""
    obs = measure(ctx, params, pair)
    return explain(ctx, obs, judge_replies(ctx, obs))


def _bug_class(j: Judgement) -> str | None:
    """continuous-batching when the batched reply differs from the reply alone (or a noise batch changed an
    answer); cached-reply when only the reply alone differs from the reference."""
    batched_alone, _, want_alone = j.judged
    if batched_alone.failed or any(p.startswith("not noise: ") for p in j.problems):
        return "continuous-batching"
    return "cached-reply" if want_alone.failed else None
