"""engine-isolation's body: measure three requests, judge their reused tokens, explain the judgement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gate.checks._engine import EnginePair, engine_check, seeded_prompt
from gate.checks.engine_isolation import EngineIsolationParams
from gate.core.check import CheckContext, Outcome

if TYPE_CHECKING:
    from gate.protocols import EngineCompletion, EngineServing


@dataclass(frozen=True)
class Observations:
    """A prompt sent under salt A, again under A, then under B."""

    field: str
    length: int
    first: EngineCompletion
    again: EngineCompletion
    other: EngineCompletion
    servers: dict[str, Any]


Finding = Literal["unreported", "not-exercised", "leaked", "isolated"]


def measure(
    ctx: CheckContext, params: EngineIsolationParams, candidate: EngineServing, field: str, top_k: int
) -> Observations:
    """Drive the candidate: the same prompt twice under the salt `field` A, once under B."""
    with candidate.serve(label="candidate") as cand:
        length = max(2, min(params.length, candidate.max_len - 2))
        prompt = seeded_prompt(candidate.vocab_size, length, ctx.seed * 15485863 + 5)
        first = cand.complete(prompt, 1, top_k, {field: "gate-tenant-a"})
        again = cand.complete(prompt, 1, top_k, {field: "gate-tenant-a"})
        other = cand.complete(prompt, 1, top_k, {field: "gate-tenant-b"})
        servers = {"candidate": cand.evidence()}
    return Observations(field, length, first, again, other, servers)


def judge(obs: Observations) -> Finding:
    """What the reused-token counts show (pure)."""
    if obs.again.cached_tokens is None or obs.other.cached_tokens is None:
        return "unreported"
    if not obs.again.cached_tokens:
        return "not-exercised"
    return "leaked" if obs.other.cached_tokens else "isolated"


def explain(finding: Finding, obs: Observations) -> Outcome:
    field, again, other = obs.field, obs.again.cached_tokens, obs.other.cached_tokens
    evidence = {
        "salt_field": field,
        "requests": {
            "tenant a": obs.first.summary(),
            "tenant a again": obs.again.summary(),
            "tenant b": obs.other.summary(),
        },
        "servers": obs.servers,
    }
    metrics = {"same_salt_cached": again, "other_salt_cached": other}
    if finding == "unreported":
        return Outcome("fail", "the server reports no cached-token count: isolation cannot be shown", metrics, evidence)
    if finding == "not-exercised":
        message = (
            "not exercised: the repeat under the same salt reused no token, so a miss under another salt proves nothing"
        )
        return Outcome("fail", message, metrics, evidence)
    if finding == "leaked":
        message = (
            f"a request under another {field} reused {other} cached tokens of another tenant's prefix: "
            "the salt is ignored"
        )
        return Outcome("fail", message, metrics, evidence, detected_at=obs.length)
    message = f"the same {field} reused {again} tokens; another {field} reused none"
    return Outcome("pass", message, metrics, evidence, exercise={"same_salt_cached_tokens": again})


@engine_check("engine-isolation", params=EngineIsolationParams)
def engine_isolation(ctx: CheckContext, params: EngineIsolationParams, pair: EnginePair) -> Outcome:
    """Requests under different cache salts never share cached prefix state."""
    field = pair.candidate.salt_field  # set exactly when the engine offers Capability.ENGINE_SALT
    if field is None:  # no salt, no per-tenant cache to judge
        flavor = pair.candidate.flavor
        return Outcome(
            "skip",
            f"the {flavor} server offers no cache salt or tenant key, so isolation "
            "between tenants cannot be shown through its API (set cache_salt_field if it has one)",
            evidence={"flavor": flavor, "salt_field": None},
            absent="cache-salt",
        )
    obs = measure(ctx, params, pair.candidate, field, pair.top_k)
    return explain(judge(obs), obs)
