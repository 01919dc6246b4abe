"""hash-collision: with a deliberately weak hash, colliding blocks are detected and not served.

A hash picks a bucket; it is not a proof that two contexts are equal (background: cache identity). The candidate is
rebuilt with a hash of `bits` bits (2**bits buckets), so distinct blocks are bound to collide, and
serves a family of prompts twice over. A correct cache compares the stored key material (tokens,
parent, position, identity) before serving: every request reuses exactly what it is entitled to
and matches the reference path. The run must show collisions happened, or it proves nothing.
"""

from __future__ import annotations

from gate.checks._compare import tolerance_for
from gate.checks._params import HashCollisionParams
from gate.checks._prefix_support import (
    RequestLog,
    ReuseTally,
    broken_rules,
    describe_excess,
    prefix_candidate,
    reference_oracle,
    seeded_ids,
)
from gate.core.check import CheckContext, Outcome, check
from gate.prefix.cache import weak_hash


@check("hash-collision", params=HashCollisionParams)
def hash_collision(ctx: CheckContext, params: HashCollisionParams) -> Outcome:
    """Under a weak injected hash, colliding blocks are verified against stored tokens, not served."""
    candidate = prefix_candidate(ctx)
    worker = candidate.fresh(hash_fn=weak_hash(params.bits))
    bs, vocab = worker.block_size, ctx.candidate.vocab_size
    log = RequestLog(ReuseTally(bs), tolerance_for(ctx))
    oracle = reference_oracle(ctx)
    length = params.prompt_blocks * bs + 1
    prompts: list[list[int]] = []
    for n in range(params.prompts):
        prompt = seeded_ids(vocab, length, ctx.seed * 1000 + 71 * n)
        if n % 2 and bs < length - 1:  # share block 0 with the previous prompt, diverge after it
            prompt[:bs] = prompts[-1][:bs]
        prompts.append(prompt)
    for round_ in range(2):
        for n, prompt in enumerate(prompts):
            log.issue(worker, f"p{n} round {round_}", prompt, "base", oracle, new_tokens=2)

    collisions = sum(s.reply.stats.collisions_detected for s in log.served)
    served_wrongly = [s for s in log.served if s.excess]
    wrong = log.wrong_outputs()
    reused = sum(s.reused for s in log.served)
    metrics = {
        "hash_bits": params.bits,
        "collisions_detected": collisions,
        "requests": len(log.served),
        "reused_tokens": reused,
        "served_beyond_entitlement": len(served_wrongly),
        "wrong_outputs": len(wrong),
    }
    exercise = {**log.exercise(worker), "collisions_detected": collisions, "hash_bits": params.bits}
    outcome = Outcome(
        "pass",
        "",
        metrics,
        {"requests": log.table(), "cache": worker.cache_state()},
        exercise,
        observation=log.observation(),
    )
    problems = []
    if served_wrongly or wrong:
        first = (served_wrongly or wrong)[0]
        rules = sorted({r for s in served_wrongly for r in broken_rules(s)})
        problems.append(
            f"{len(served_wrongly)} requests were served colliding blocks and {len(wrong)} differ from "
            f"the reference; first: {first.label}: {describe_excess(first)}: a hash match was trusted without "
            "comparing the stored tokens" + (f" ({'; '.join(rules)})" if rules else "")
        )
    if collisions == 0 and not problems:
        problems.append(
            f"the {params.bits}-bit hash produced no detected collision over {len(log.served)} requests: "
            "either verification does not report them or the workload never collided; the check "
            "proves nothing"
        )
    if reused == 0:
        problems.append("no request reused any block under the weak hash: the cache refused everything")
    if problems:
        outcome.status, outcome.message = "fail", "; ".join(problems)
        return outcome
    outcome.message = (
        f"{collisions} hash collisions under a {params.bits}-bit hash were detected and refused; "
        f"{reused} tokens reused, each request exactly within entitlement and matching the reference"
    )
    return outcome
