"""engine-isolation: a request under another cache salt (tenant) reuses nothing of a shared prefix.

Where the engine keys its prefix cache on a salt or tenant key (vLLM's `cache_salt`), a prompt is
sent twice under salt A (the repeat must hit, or the test proves nothing) and then under salt B,
which must report zero reused tokens. A salt the server accepts and ignores fails.

Where the engine offers no salt (llama.cpp, TGI, SGLang today) the check cannot show anything
either way: it says so, unproven, and never passes.
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._engine import engine_pair, seeded_prompt
from gate.core.check import CheckContext, Outcome, Params, check


class EngineIsolationParams(Params):
    """The shared prefix."""

    length: int = Field(default=256, ge=2)
    """Prompt length (clipped to the context)."""


@check("engine-isolation", params=EngineIsolationParams)
def engine_isolation(ctx: CheckContext, params: EngineIsolationParams) -> Outcome:
    """Requests under different cache salts never share cached prefix state."""
    pair = engine_pair(ctx, "engine-isolation")
    if isinstance(pair, Outcome):
        return pair
    candidate = pair.candidate
    field = candidate.salt_field
    if field is None:
        return Outcome(
            "skip",
            f"unproven: the {candidate.flavor} server offers no cache salt or tenant key, so isolation "
            "between tenants cannot be shown through its API (set cache_salt_field if it has one)",
            evidence={"flavor": candidate.flavor, "salt_field": None},
        )
    top_k = pair.top_k
    with candidate.serve(label="candidate") as cand:
        length = max(2, min(params.length, candidate.max_len - 2))
        prompt = seeded_prompt(candidate.vocab_size, length, ctx.seed * 15485863 + 5)
        first = cand.complete(prompt, 1, top_k, {field: "gate-tenant-a"})
        again = cand.complete(prompt, 1, top_k, {field: "gate-tenant-a"})
        other = cand.complete(prompt, 1, top_k, {field: "gate-tenant-b"})
        servers = {"candidate": cand.evidence()}
    evidence = {
        "salt_field": field,
        "requests": {"tenant a": first.summary(), "tenant a again": again.summary(), "tenant b": other.summary()},
        "servers": servers,
    }
    metrics = {"same_salt_cached": again.cached_tokens, "other_salt_cached": other.cached_tokens}
    if again.cached_tokens is None or other.cached_tokens is None:
        return Outcome("fail", "the server reports no cached-token count: isolation cannot be shown", metrics, evidence)
    if not again.cached_tokens:
        return Outcome(
            "fail",
            "not exercised: the repeat under the same salt reused no token, so a miss under another salt "
            "proves nothing",
            metrics,
            evidence,
        )
    if other.cached_tokens:
        return Outcome(
            "fail",
            f"a request under another {field} reused {other.cached_tokens} cached tokens of another tenant's prefix: "
            "the salt is ignored",
            metrics,
            evidence,
            detected_at=length,
        )
    return Outcome(
        "pass",
        f"the same {field} reused {again.cached_tokens} tokens; another {field} reused none",
        metrics,
        evidence,
        exercise={"same_salt_cached_tokens": again.cached_tokens},
    )
