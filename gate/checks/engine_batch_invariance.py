"""engine-batch-invariance: a request among concurrent requests gives what it gives alone.

Continuous batching packs requests of other lengths into the same forward passes. The target
request is sent to the reference server alone, to the candidate alone, and to the candidate again
while `concurrent` other requests of other lengths are in flight (sent at the same moment from as
many threads). Greedy tokens must match under the claim, both against the candidate alone (batch
invariance within one process) and against the reference (no batching at all); logprob differences
within tolerance are warnings.

Proof of exercise: the in-flight requests overlapped the target in time, and the candidate has more
than one slot (a server that serves one request at a time never batches: not exercised, a failure).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import Field

from gate.checks._engine import (
    NEW_TOKENS,
    clip_lengths,
    engine_pair,
    failure_words,
    judge,
    observation,
    same_vocabulary,
    seeded_prompt,
)
from gate.checks._topk import worst
from gate.core.check import CheckContext, Outcome, Params, check


class EngineBatchParams(Params):
    """The target request and its concurrent neighbours."""

    length: int = Field(default=200, ge=1)
    """Prompt length of the target request (clipped to the context)."""
    concurrent: int = Field(default=4, ge=1, le=64)
    """Other requests in flight with it."""
    other_lengths: list[int] = Field(default_factory=lambda: [37, 300, 1000, 2500], min_length=1)
    """Prompt lengths of the others (cycled)."""
    new_tokens: int = Field(default=NEW_TOKENS, ge=1, le=64)
    """Greedy tokens compared."""
    other_new_tokens: int = Field(default=32, ge=1, le=256)
    """Tokens each neighbour generates (long enough to overlap the target's decode)."""


@check("engine-batch-invariance", params=EngineBatchParams)
def engine_batch_invariance(ctx: CheckContext, params: EngineBatchParams) -> Outcome:
    """A request batched with concurrent requests of other lengths gives the greedy tokens it gives alone."""
    pair = engine_pair(ctx, "engine-batch-invariance")
    if isinstance(pair, Outcome):
        return pair
    reference, candidate, level, top_k = pair
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
        windows: list[tuple[float, float]] = [(0.0, 0.0)] * (len(prompts) + 1)
        barrier = threading.Barrier(len(prompts) + 1)

        def send(i: int) -> Any:
            barrier.wait()
            start = time.perf_counter()
            if i == 0:
                reply = cand.complete(target, params.new_tokens, top_k)
            else:
                reply = cand.complete(prompts[i - 1], params.other_new_tokens, top_k)
            windows[i] = (start, time.perf_counter())
            return reply

        with ThreadPoolExecutor(max_workers=len(prompts) + 1) as pool:
            replies = list(pool.map(send, range(len(prompts) + 1)))
        batched = replies[0]
        servers = {"reference": ref.evidence(), "candidate": cand.evidence()}
    t0, t1 = windows[0]
    overlapping = sum(1 for s, e in windows[1:] if s < t1 and e > t0)
    vs_alone = judge(ctx, alone, batched)
    vs_reference = judge(ctx, want, batched)
    alone_vs_reference = judge(ctx, want, alone)
    rows = [
        {"comparison": "candidate batched vs candidate alone", **vs_alone.row()},
        {"comparison": "candidate batched vs reference alone", **vs_reference.row()},
        {"comparison": "candidate alone vs reference alone", **alone_vs_reference.row()},
    ]
    metrics = {
        "target_length": length,
        "concurrent": len(prompts),
        "overlapping": overlapping,
        "candidate_slots": slots,
        "max_abs_dlogprob": worst(r["max_abs_dlogprob"] for r in rows),
    }
    evidence = {
        "comparisons": rows,
        "other_lengths": others,
        "requests": {
            "reference": want.summary(),
            "candidate_alone": alone.summary(),
            "candidate_batched": batched.summary(),
        },
        "servers": servers,
    }
    exercise = {"overlapping_requests": overlapping, "candidate_slots": slots, "concurrent": len(prompts)}
    outcome = Outcome("pass", "", metrics, evidence, exercise, observation=observation([alone, batched]))
    problems = [
        f"{row['comparison']}: {failure_words(level, judged)}"
        for row, judged in zip(rows, (vs_alone, vs_reference, alone_vs_reference), strict=True)
        if judged.failed
    ]
    if overlapping == 0 or (slots is not None and int(slots) < 2):
        problems.append(
            f"not exercised: {overlapping} of {len(prompts)} concurrent requests overlapped the target and the "
            f"candidate has {slots} slot(s); batching never happened (launch it with more parallel slots)"
        )
    if problems:
        outcome.status, outcome.message = "fail", "; ".join(problems)
        outcome.detected_at = length
        outcome.diagnosis = {"problems": problems}
        return outcome
    warned = [
        f"{row['comparison']}: {failure_words(level, judged)}"
        for row, judged in zip(rows, (vs_alone, vs_reference, alone_vs_reference), strict=True)
        if judged.warn
    ]
    if warned:
        outcome.status, outcome.message = "warn", "greedy tokens agree; " + "; ".join(warned)
        return outcome
    outcome.message = (
        f"{level} holds for a {length}-token request alone and among {len(prompts)} concurrent requests "
        f"({overlapping} overlapping, {'slots not stated' if slots is None else f'{slots} slots'}), "
        "and against the reference alone"
    )
    return outcome
