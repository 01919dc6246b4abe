"""engine-invalidation's body: measure the reset and the restart, judge both, explain the judgement."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gate.checks._engine import (
    EnginePair,
    engine_check,
    failure_words,
    judge,
    observation,
    problems_outcome,
    same_vocabulary,
    seeded_prompt,
)
from gate.checks.engine_invalidation import EngineInvalidationParams
from gate.core.check import CheckContext, Outcome

if TYPE_CHECKING:
    from gate.protocols import EngineCompletion


class NothingExercised(Exception):
    """Neither the reset nor the restart could run against this engine."""


@dataclass(frozen=True)
class Reset:
    """Part 1: the reference's reply, the candidate's warm repeat, and its replies after the reset and restart."""

    prompt: list[int]
    want: EngineCompletion
    warm: EngineCompletion
    flavor: str
    endpoint: str | None
    after: EngineCompletion | None
    tiers_not_reset: list[str]
    servers: dict[str, Any]
    restarted: EngineCompletion | None = None
    """The reply after a restart that emptied `tiers_not_reset` (None: none needed, or gate cannot restart it)."""


@dataclass(frozen=True)
class Restart:
    """Part 2: both servers restarted on changed weights; the reference's reply, the candidate's two."""

    changed: Any
    want: EngineCompletion
    first: EngineCompletion
    repeat: EngineCompletion
    servers: dict[str, Any]


@dataclass
class Judgement:
    """What broke, the evidence of each part, what proves the cache ran, the replies observed."""

    problems: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    exercised: dict[str, Any] = field(default_factory=dict)
    observed: list[EngineCompletion] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    """Why the reset part proves nothing about some tier: the engine's reset cannot reach it."""


def measure_reset(ctx: CheckContext, params: EngineInvalidationParams, pair: EnginePair, length: int) -> Reset:
    """Serve a prompt twice, reset the candidate's cache, serve it again; restart where the reset falls short."""
    top_k = pair.top_k
    with pair.reference.serve(label="reference") as ref, pair.candidate.serve(label="candidate") as cand:
        vocab = same_vocabulary(ref, cand) or pair.candidate.vocab_size
        prompt = seeded_prompt(vocab, length, ctx.seed * 32452843 + 3)
        want = ref.complete(prompt, params.new_tokens, top_k)
        cand.complete(prompt, params.new_tokens, top_k)
        warm = cand.complete(prompt, params.new_tokens, top_k)
        endpoint = cand.reset_cache()
        after = None if endpoint is None else cand.complete(prompt, params.new_tokens, top_k)
        tiers = list(cand.unreset_tiers())
        # no endpoint empties these tiers: a restart does (a new process, handed over to later checks)
        restarted = cand.complete(prompt, params.new_tokens, top_k) if tiers and cand.restart() else None
        servers = {"reference": ref.evidence(), "candidate": cand.evidence()}
    return Reset(prompt, want, warm, cand.flavor, endpoint, after, tiers, servers, restarted)


def measure_restart(
    ctx: CheckContext, params: EngineInvalidationParams, pair: EnginePair, prompt: list[int]
) -> Restart | None:
    """The prompt on the same changed weights from the reference (asked once a run, cached for the controls)
    and from a restarted candidate started after it (None: gate cannot)."""
    reference, candidate, top_k = pair.reference, pair.candidate, pair.top_k
    changed: Any = params.changed_model_file
    if changed is None and reference.changed_model(params.perturb_seed) is not None:
        changed = candidate.changed_model(params.perturb_seed)  # both restart on the same new weights
    if changed is None:
        return None

    def reference_reply() -> tuple[EngineCompletion, dict[str, Any]]:
        with reference.serve(label="reference, changed weights", model=changed, fresh=True) as ref2:
            return ref2.complete(prompt, params.new_tokens, top_k), ref2.evidence()

    weights = changed if isinstance(changed, str) else changed.model_dump_json()
    key = ("engine-invalidation: reference on changed weights", reference, weights, prompt, params.new_tokens, top_k)
    want2, reference_servers = ctx.cache.get(key, reference_reply)
    with candidate.serve(label="candidate, restarted on changed weights", model=changed, fresh=True) as cand2:
        first = cand2.complete(prompt, params.new_tokens, top_k)
        repeat = cand2.complete(prompt, params.new_tokens, top_k)
        servers = {"reference": reference_servers, "candidate": cand2.evidence()}
    return Restart(changed, want2, first, repeat, servers)


def judge_reset(ctx: CheckContext, reset: Reset, out: Judgement) -> None:
    """Part 1 under the claim: the warm repeat hit, nothing was reused after the reset, the output held."""
    level = ctx.manifest.claim.level
    after, warm, tiers = reset.after, reset.warm, reset.tiers_not_reset
    last = reset.restarted or after  # judged on: after the restart where one ran, else after the endpoint
    if last is None:
        out.evidence["reset"] = (
            f"not exercised: the {reset.flavor} server has no cache-reset endpoint gate knows, and gate did not "
            "launch it, so it cannot restart it"
        )
        out.evidence["servers"] = reset.servers
        return
    out.observed += [r for r in (after, reset.restarted) if r is not None]
    judged = judge(ctx, reset.want, last)
    out.evidence["reset"] = {
        "endpoint": reset.endpoint,
        "hit_before_reset": warm.cached_tokens,
        "reused_after_reset": None if after is None else after.cached_tokens,
        "tiers_not_reset": tiers,
        "restarted": reset.restarted is not None,
        "reused_after_restart": None if reset.restarted is None else reset.restarted.cached_tokens,
        "complete": not tiers or reset.restarted is not None,
        **judged.row(),
    }
    if not warm.cached_tokens:
        out.problems.append("reset: the repeat before the reset did not hit, so a miss after it proves nothing")
    else:
        out.exercised["hit_before_reset"] = warm.cached_tokens
    if after is not None:
        _judge_after_endpoint(ctx, reset, after, out)
    if reset.restarted is not None and reset.restarted.cached_tokens:
        out.problems.append(
            f"reset: after a restart of the server the same prompt reused {reset.restarted.cached_tokens} cached "
            "tokens: a tier outlives the process"
        )
    if tiers and reset.restarted is None:  # neither the reset nor a restart empties them
        out.incomplete.append("the reset cannot reach " + "; ".join(tiers) + ", and gate cannot restart the server")
    if judged.failed:
        when = "the restart" if reset.restarted is not None else "the reset"
        out.problems.append(
            f"reset: the output after {when} differs from the reference: {failure_words(level, judged)}"
        )
    out.evidence["servers"] = reset.servers


def _judge_after_endpoint(ctx: CheckContext, reset: Reset, after: EngineCompletion, out: Judgement) -> None:
    """The reply right after the reset endpoint: reuse from a tier it cannot reach is named, never failed."""
    if after.cached_tokens and reset.tiers_not_reset:
        out.evidence["reset"]["served_from_tiers_not_reset"] = after.cached_tokens
        if reset.restarted is None:
            out.incomplete.append(f"after {reset.endpoint} the same prompt reused {after.cached_tokens} cached tokens")
    elif after.cached_tokens:
        out.problems.append(
            f"reset: after {reset.endpoint} the same prompt still reused {after.cached_tokens} cached tokens"
        )
    if reset.restarted is not None:  # the last reply is the restart's: the endpoint's is judged here
        judged = judge(ctx, reset.want, after)
        out.evidence["reset"]["after_endpoint"] = judged.row()
        if judged.failed:
            out.problems.append(
                f"reset: the output after {reset.endpoint} differs from the reference: "
                + failure_words(ctx.manifest.claim.level, judged)
            )


def judge_restart(ctx: CheckContext, reset: Reset, restart: Restart | None, out: Judgement) -> None:
    """Part 2 under the claim: the weights changed the output, nothing stale was reused, a repeat hit."""
    if restart is None:
        out.evidence["restart"] = "not exercised: gate does not launch these servers on a model it can change"
        return
    first, repeat, changed = restart.first, restart.repeat, restart.changed
    out.evidence["restart_servers"] = restart.servers
    out.observed += [first, repeat]
    judged = judge(ctx, restart.want, first)
    weights_changed = restart.want.tokens != reset.want.tokens or restart.want.logprobs != reset.want.logprobs
    out.evidence["restart"] = {
        "changed_model": changed.model_dump() if hasattr(changed, "model_dump") else str(changed),
        "reused_after_restart": first.cached_tokens,
        "hit_on_repeat": repeat.cached_tokens,
        "weights_changed_output": weights_changed,
        **judged.row(),
    }
    if not weights_changed:
        out.problems.append(
            "restart: the changed weights did not change the reference's output, so the step tests nothing"
        )
    if first.cached_tokens:
        out.problems.append(
            f"restart: the first request after a restart on changed weights reused {first.cached_tokens} stale tokens"
        )
    if judged.failed:
        out.problems.append(
            "restart: the output differs from the no-cache server on the new weights: "
            + failure_words(ctx.manifest.claim.level, judged)
        )
    if not repeat.cached_tokens:
        out.problems.append("restart: a repeat after the restart did not hit: the restarted cache is not exercised")
    else:
        out.exercised["hit_after_restart"] = repeat.cached_tokens


def explain(j: Judgement, length: int) -> Outcome:
    """The Outcome of the judgement, built once: fail with the problems, else pass saying what held."""
    evidence, exercised = j.evidence, j.exercised
    if isinstance(evidence.get("reset"), str) and isinstance(evidence.get("restart"), str):
        raise NothingExercised(f"{evidence['reset']}; {evidence['restart']}")
    metrics = {"prompt_length": length, "problems": len(j.problems)}
    seen: dict[str, Any] = {"metrics": metrics, "evidence": evidence, "exercise": exercised}
    seen["observation"] = observation(j.observed)
    if j.problems:
        return problems_outcome(j.problems, length, **seen)
    parts = []
    if isinstance(evidence["reset"], dict) and not j.incomplete:
        parts.append(_reset_words(evidence["reset"], exercised.get("hit_before_reset")))
    if isinstance(evidence["restart"], dict):
        hit = exercised.get("hit_after_restart")
        parts.append(
            "after a restart on changed weights nothing stale was reused and the output equals the "
            f"no-cache server's (repeat hit: {hit})"
        )
    if j.incomplete:  # a tier no reset reaches: whether a reset invalidates it is not shown, never a pass
        where = "; ".join(parts) or "the restart part did not run"
        return Outcome("unproven", f"the engine's reset is incomplete: {'; '.join(j.incomplete)}; {where}", **seen)
    return Outcome("pass", "; ".join(parts), **seen)


def _reset_words(reset: dict[str, Any], hit: int | None) -> str:
    """What the passing reset part showed: the endpoint's reset, and the restart where it could not reach a tier."""
    if not reset["restarted"]:
        return f"after {reset['endpoint']} nothing was reused (hit before: {hit})"
    served = reset.get("served_from_tiers_not_reset")
    tiers = "; ".join(reset["tiers_not_reset"])
    first = (
        f"{reset['endpoint']} cannot reach {tiers}"
        + (f" (the same prompt then reused {served} tokens from it)" if served else "")
        if reset["endpoint"]
        else f"no reset endpoint reaches {tiers}"
    )
    return (
        f"{first}; so gate restarted the server: after the restart nothing was reused and the output equals "
        f"the reference's (hit before: {hit})"
    )


@engine_check("engine-invalidation", params=EngineInvalidationParams)
def engine_invalidation(ctx: CheckContext, params: EngineInvalidationParams, pair: EnginePair) -> Outcome:
    """After the engine's cache reset or a restart on changed weights, nothing stale is reused."""
    length = max(2, min(params.length, pair.reference.max_len, pair.candidate.max_len) - params.new_tokens - 1)
    reset = measure_reset(ctx, params, pair, length)
    restart = measure_restart(ctx, params, pair, reset.prompt)
    judgement = Judgement()
    judge_reset(ctx, reset, judgement)
    judge_restart(ctx, reset, restart, judgement)
    return explain(judgement, length)
