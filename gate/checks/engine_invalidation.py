"""engine-invalidation: after a cache reset, or a restart with changed weights, no stale hit is served.

1. reset: a prompt is served twice by the candidate (the repeat must hit, or the reset proves
   nothing), the engine's own reset runs (llama.cpp: erase every slot; vLLM: /reset_prefix_cache;
   SGLang: /flush_cache), and the same prompt must then reuse nothing and equal the reference's; the
   cache tiers that reset cannot reach (llama.cpp's host-memory prompt cache) are named in the
   evidence and the message, and the reset is then not called complete;
2. restart with changed weights (when gate launches the servers): both servers restart on other
   weights (a perturbed tiny model, or `changed_model_file`); the first request must reuse nothing,
   must equal the no-cache server's output under the new weights, and the weights must really have
   changed the output (or the step tests nothing). A repeat must hit again: the cache still works.

A part the engine cannot run (no reset endpoint, a server gate does not launch) is reported as not
exercised; a run where no part could run is an error, never a pass.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gate.checks._engine import (
    NEW_TOKENS,
    engine_pair,
    failure_words,
    judge,
    observation,
    same_vocabulary,
    seeded_prompt,
)
from gate.core.check import CheckContext, Outcome, Params, check


class NothingExercised(Exception):
    """Neither the reset nor the restart could run against this engine."""


class EngineInvalidationParams(Params):
    """Prompt size and the changed weights."""

    length: int = Field(default=256, ge=2)
    """Prompt length (clipped to the context)."""
    perturb_seed: int = Field(default=101, ge=0)
    """Seed of the weight change for a tiny model."""
    changed_model_file: str | None = None
    """Another model file for the restart (when the servers load model files)."""
    new_tokens: int = Field(default=NEW_TOKENS, ge=1, le=64)
    """Greedy tokens compared."""


@check("engine-invalidation", params=EngineInvalidationParams)
def engine_invalidation(ctx: CheckContext, params: EngineInvalidationParams) -> Outcome:
    """After the engine's cache reset or a restart on changed weights, nothing stale is reused."""
    pair = engine_pair(ctx, "engine-invalidation")
    if isinstance(pair, Outcome):
        return pair
    reference, candidate, level, top_k = pair
    problems: list[str] = []
    evidence: dict[str, Any] = {}
    observed = []
    exercised: dict[str, Any] = {}
    length = max(2, min(params.length, reference.max_len, candidate.max_len) - params.new_tokens - 1)

    # 1. reset ----------------------------------------------------------------------------------
    with reference.serve(label="reference") as ref, candidate.serve(label="candidate") as cand:
        vocab = same_vocabulary(ref, cand) or candidate.vocab_size
        prompt = seeded_prompt(vocab, length, ctx.seed * 32452843 + 3)
        want = ref.complete(prompt, params.new_tokens, top_k)
        cand.complete(prompt, params.new_tokens, top_k)
        warm = cand.complete(prompt, params.new_tokens, top_k)
        endpoint = cand.reset_cache()
        if endpoint is None:
            evidence["reset"] = f"not exercised: the {cand.flavor} server has no cache-reset endpoint gate knows"
        else:
            after = cand.complete(prompt, params.new_tokens, top_k)
            observed.append(after)
            judged = judge(ctx, want, after)
            evidence["reset"] = {
                "endpoint": endpoint,
                "hit_before_reset": warm.cached_tokens,
                "reused_after_reset": after.cached_tokens,
                "tiers_not_reset": cand.unreset_tiers(),
                "complete": not cand.unreset_tiers(),
                **judged.row(),
            }
            if not warm.cached_tokens:
                problems.append("reset: the repeat before the reset did not hit, so a miss after it proves nothing")
            else:
                exercised["hit_before_reset"] = warm.cached_tokens
            if after.cached_tokens:
                problems.append(
                    f"reset: after {endpoint} the same prompt still reused {after.cached_tokens} cached tokens"
                )
            if judged.failed:
                problems.append(
                    f"reset: the output after the reset differs from the reference: {failure_words(level, judged)}"
                )
        evidence["servers"] = {"reference": ref.evidence(), "candidate": cand.evidence()}

    # 2. restart with changed weights ------------------------------------------------------------
    changed: Any = params.changed_model_file
    if changed is None and reference.changed_model(params.perturb_seed) is not None:
        changed = candidate.changed_model(params.perturb_seed)  # both restart on the same new weights
    if changed is None:
        evidence["restart"] = "not exercised: gate does not launch these servers on a model it can change"
    else:
        with (
            reference.serve(label="reference, changed weights", model=changed) as ref2,
            candidate.serve(label="candidate, restarted on changed weights", model=changed, fresh=True) as cand2,
        ):
            want2 = ref2.complete(prompt, params.new_tokens, top_k)
            first = cand2.complete(prompt, params.new_tokens, top_k)
            repeat = cand2.complete(prompt, params.new_tokens, top_k)
            evidence["restart_servers"] = {"reference": ref2.evidence(), "candidate": cand2.evidence()}
        observed += [first, repeat]
        judged = judge(ctx, want2, first)
        weights_changed = want2.tokens != want.tokens or want2.logprobs != want.logprobs
        evidence["restart"] = {
            "changed_model": changed.model_dump() if hasattr(changed, "model_dump") else str(changed),
            "reused_after_restart": first.cached_tokens,
            "hit_on_repeat": repeat.cached_tokens,
            "weights_changed_output": weights_changed,
            **judged.row(),
        }
        if not weights_changed:
            problems.append(
                "restart: the changed weights did not change the reference's output, so the step tests nothing"
            )
        if first.cached_tokens:
            problems.append(
                f"restart: the first request after a restart on changed weights reused {first.cached_tokens} "
                "stale tokens"
            )
        if judged.failed:
            problems.append(
                "restart: the output differs from the no-cache server on the new weights: "
                + failure_words(level, judged)
            )
        if not repeat.cached_tokens:
            problems.append("restart: a repeat after the restart did not hit: the restarted cache is not exercised")
        else:
            exercised["hit_after_restart"] = repeat.cached_tokens
    if isinstance(evidence.get("reset"), str) and isinstance(evidence.get("restart"), str):
        raise NothingExercised(f"{evidence['reset']}; {evidence['restart']}")
    metrics = {"prompt_length": length, "problems": len(problems)}
    outcome = Outcome("pass", "", metrics, evidence, exercised, observation=observation(observed))
    if problems:
        outcome.status, outcome.message = "fail", "; ".join(problems)
        outcome.detected_at = length
        outcome.diagnosis = {"problems": problems}
        return outcome
    parts = []
    if isinstance(evidence["reset"], dict):
        hit = exercised.get("hit_before_reset")
        parts.append(f"after {evidence['reset']['endpoint']} nothing was reused (hit before: {hit})")
        if evidence["reset"]["tiers_not_reset"]:
            parts.append(
                "the reset is not complete: it cannot reach " + "; ".join(evidence["reset"]["tiers_not_reset"])
            )
    if isinstance(evidence["restart"], dict):
        hit = exercised.get("hit_after_restart")
        parts.append(
            "after a restart on changed weights nothing stale was reused and the output equals the "
            f"no-cache server's (repeat hit: {hit})"
        )
    outcome.message = "; ".join(parts)
    return outcome
