"""The candidate engine's own noise: how much its replies move when nothing but the batch around them
changes, measured before an engine check judges replies served under load.

An engine batches concurrent requests, and a batched kernel need not round like the single-request
one (llama.cpp's float32 replies in a batch differ from the same request alone by about 1e-3 in
logprob): the engine's arithmetic, not a cache carrying state, which a constant tolerance calibrated
on single requests calls a failure on one run and not on the next. So gate sends fresh seeded prompts
of the check's own lengths off the cache (each request opts out of it; the reply's cached-token count
must say 0), each alone, then in groups as wide as the check's rounds, in several orders. The worst
|Δlogprob| among same-prompt pairs with equal greedy tokens is the noise seen, and the floor is
NOISE_MARGIN times it: by exchangeability the next correct reply exceeds the worst of `n` seen with
probability at most 1/(n+1), and the margin covers the tail beyond it. A reply is then judged against
the larger of the claim's tolerance and the floor (gate.checks._engine.judge).

A pair that moves beyond NOISE_CAP, or flips tokens further apart than that, is not noise but the
engine answering the same prompt differently because of its neighbours (llama.cpp b11549, slots
sharing a unified sliding-window KV cache: 0.15-0.4 and flipped tokens): a defect, left out of the
floor. Only the candidate's nondeterminism is measured, never its difference from the reference.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gate.checks._compare import DEFAULT_TOLERANCE, computing_dtype, tolerance_for
from gate.checks._topk import TopKObservation, compare_topk, worst

if TYPE_CHECKING:
    from gate.core.check import CheckContext
    from gate.protocols import EngineCompletion, EngineServer

NOISE_MARGIN = 2.0
"""The floor is this many times the worst difference seen between replies to the same prompt."""

NOISE_PROMPTS = 12
"""Fresh prompts measured at most."""

BATCH_COMPOSITIONS = 4
"""Batches each prompt is sent in besides alone, each a rotation of the order cut into groups of the
check's width: every pair of the five replies of a prompt is compared (ten pairs)."""

NOISE_CAP = {
    "float32": DEFAULT_TOLERANCE["float16"][0],
    "float16": DEFAULT_TOLERANCE["bfloat16"][0],
    "bfloat16": 2 * DEFAULT_TOLERANCE["bfloat16"][0],
}
"""What batched arithmetic may move a logprob by, per computing dtype: at worst the rounding of the next
coarser format gate knows. A same-prompt pair beyond it is a defect of the engine, not noise."""


def seeded_prompt(vocab: int, length: int, seed: int, low: int = 3) -> list[int]:
    """`length` token ids drawn uniformly from [low, vocab) (control tokens left out), reproducibly."""
    rng = random.Random(seed)
    return [rng.randrange(low, vocab) for _ in range(length)]


@dataclass(frozen=True)
class NoiseFloor:
    """What the candidate's replies did when only their batch changed."""

    pairs: int
    worst: float
    """Worst |Δlogprob| among the pairs with equal greedy tokens."""
    median: float
    flips: int
    """Pairs whose greedy tokens flipped between tokens within NOISE_CAP of each other (near-ties)."""
    off_cache: str
    excluded: int = 0
    """Pairs left out because a reply reported cached tokens (the opt-out did not hold for it)."""
    defects: list[str] = field(default_factory=list)
    """Pairs that are not noise (a flip outside a tie, or beyond NOISE_CAP): findings, left out of the floor."""

    @property
    def floor(self) -> float:
        return NOISE_MARGIN * self.worst

    def words(self) -> str:
        flips = f", {self.flips} with greedy tokens flipped within a tie" if self.flips else ""
        flips += f", {len(self.defects)} that are not noise" if self.defects else ""
        excluded = f", {self.excluded} left out (served from the cache)" if self.excluded else ""
        return (
            f"noise floor {self.floor:.3g} ({NOISE_MARGIN:g} x the worst |Δlogprob| {self.worst:.3g} of {self.pairs} "
            f"same-prompt pairs alone and in batches, median {self.median:.3g}{flips}{excluded}; {self.off_cache})"
        )

    def evidence(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "worst_abs_dlogprob": self.worst,
            "median_abs_dlogprob": self.median,
            "greedy_flips": self.flips,
            "margin": NOISE_MARGIN,
            "floor": self.floor,
            "off_cache": self.off_cache,
            "excluded": self.excluded,
            "defects": self.defects,
        }


def off_cache_fields(server: EngineServer, salt_field: str | None, nonce: str) -> dict[str, Any] | None:
    """The request fields that keep one request off the engine's prefix cache, or None where it has none."""
    if salt_field:
        return {salt_field: f"gate-noise-{nonce}"}
    if server.flavor == "llama.cpp":
        return {"cache_prompt": False}
    return None


def _spread(lengths: list[int], limit: int) -> list[int]:
    """At most NOISE_PROMPTS of the workload's prompt lengths, evenly over their sorted range."""
    ordered = sorted(lengths)
    if len(ordered) > NOISE_PROMPTS:
        step = (len(ordered) - 1) / (NOISE_PROMPTS - 1)
        ordered = [ordered[round(i * step)] for i in range(NOISE_PROMPTS)]
    return [max(2, min(limit, n)) for n in ordered]


def measure_noise(
    ctx: CheckContext,
    server: EngineServer,
    salt_field: str | None,
    *,
    vocab: int,
    lengths: list[int],
    width: int,
    new_tokens: int,
    top_k: int,
    limit: int,
) -> NoiseFloor | None:
    """The candidate's noise floor under the check's own load; None where requests cannot opt out of the cache."""
    if off_cache_fields(server, salt_field, "probe") is None or not lengths:
        return None
    prompts = [seeded_prompt(vocab, n, ctx.seed * 7919 + 31 * i + 3) for i, n in enumerate(_spread(lengths, limit))]
    counter = iter(range(1_000_000))

    def send(prompt: list[int]) -> EngineCompletion:
        return server.complete(prompt, new_tokens, top_k, off_cache_fields(server, salt_field, str(next(counter))))

    n, width = len(prompts), max(2, width)
    alone = [send(p) for p in prompts]
    batches, company = [], []
    for k in range(BATCH_COMPOSITIONS):  # the order rotated, then cut into groups of `width`
        order = [(i + k * -(-n // BATCH_COMPOSITIONS)) % n for i in range(n)]
        group = [order.index(i) // width for i in range(n)]
        batches.append(_grouped(send, prompts, group, order))
        company.append([sum(1 for g in group if g == group[i]) - 1 for i in range(n)])
    tol, cap = tolerance_for(ctx), NOISE_CAP.get(computing_dtype(ctx), NOISE_CAP["float32"])  # tol: ties, reported
    deltas: list[float] = []
    defects: list[str] = []
    flips = excluded = 0
    confirmed = all(r.cached_tokens is not None for r in (*alone, *(r for b in batches for r in b)))
    for i in range(n):
        replies = [alone[i], *(b[i] for b in batches)]
        names = ["alone", *(f"among {company[k][i]} others (batch {k + 1})" for k in range(len(batches)))]
        for a, b in itertools.combinations(range(len(replies)), 2):
            if (replies[a].cached_tokens or 0) > 0 or (replies[b].cached_tokens or 0) > 0:
                excluded += 1
                continue
            c = compare_topk(TopKObservation.of(replies[a]), TopKObservation.of(replies[b]), tol)
            where = f"a {len(prompts[i])}-token prompt off the cache, {names[a]} vs {names[b]}"
            if c.diverged and not (c.gap is not None and c.gap <= cap):  # a flip rounding cannot explain
                gap = f"{c.gap:.3g}" if c.gap is not None else f"> {c.gap_lower_bound}, the token outside the top-k"
                defects.append(f"{where}: greedy tokens diverge at token {c.first_divergence} (gap {gap})")
            elif c.max_abs_delta > cap:
                defects.append(f"{where}: |Δlogprob| {c.max_abs_delta:.3g}, beyond {cap:g} (more than rounding)")
            elif c.diverged:
                flips += 1
            else:
                deltas.append(c.max_abs_delta)
    opt_out = ", ".join(f"{k}={v!r}" for k, v in (off_cache_fields(server, salt_field, "N") or {}).items())
    how = f"off the cache by {opt_out}, " + ("0 cached tokens reported" if confirmed else "cached tokens not reported")
    ordered = sorted(deltas)
    return NoiseFloor(
        pairs=len(deltas) + flips + len(defects),
        worst=worst(ordered) if ordered else 0.0,
        median=ordered[len(ordered) // 2] if ordered else 0.0,
        flips=flips,
        off_cache=how,
        excluded=excluded,
        defects=defects,
    )


def _grouped(
    send: Callable[[list[int]], EngineCompletion], prompts: list[list[int]], group: list[int], order: list[int]
) -> list[EngineCompletion]:
    """Each group of prompts (`group[i]`) sent at once, its members in `order`; replies in prompt order."""
    replies: list[EngineCompletion | None] = [None] * len(prompts)
    for g in sorted(set(group)):
        members = [i for i in order if group[i] == g]
        for i, reply in zip(members, _together(send, [prompts[i] for i in members]), strict=True):
            replies[i] = reply
    return [r for r in replies if r is not None]


def _together(send: Callable[[list[int]], EngineCompletion], prompts: list[list[int]]) -> list[EngineCompletion]:
    """Every prompt sent at the same moment, one thread each; the replies in prompt order."""
    barrier = threading.Barrier(len(prompts))

    def one(prompt: list[int]) -> EngineCompletion:
        barrier.wait()
        return send(prompt)

    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        return list(pool.map(one, prompts))
