"""The candidate engine's measured noise floor (gate.checks._noise) and the judgement against it
(gate.checks._engine.judge), without a server: an in-process engine whose logprobs move with the
number of requests in flight beside them, as batched kernels round differently. The floor on real
llama.cpp builds is measured by the engine examples (tests/adapters/openai, benchmarks/engines.md)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from gate.checks._compare import DENY_ALLOWANCE
from gate.checks._engine import judge
from gate.checks._noise import NOISE_MARGIN, NoiseFloor, measure_noise, off_cache_fields
from tests.support.reference import ctx, path


@dataclass
class _Completion:
    tokens: list[int]
    logprobs: list[float]
    top: list[dict[int, float]]
    cached_tokens: int | None = 0


def _reply(shift: float = 0.0, tokens: tuple[int, ...] = (5, 6, 7), gap: float = 2.0) -> _Completion:
    """Greedy tokens with logprob -0.1 + shift, each with a runner-up `gap` below it."""
    top = [{t: -0.1 + shift, t + 1: -0.1 - gap} for t in tokens]
    return _Completion(list(tokens), [-0.1 + shift] * len(tokens), top)


@dataclass
class _Server:
    """Replies a function of the prompt, their logprobs moved by `per_neighbour` for every other request
    in flight at the same time (batched arithmetic) and by a constant `offset` (another dtype: the same
    in every batch); a cache that serves what it saw unless the request opts out of it."""

    per_neighbour: float = 1e-3
    offset: float = 0.0
    flavor: str = "llama.cpp"
    ignores_opt_out: bool = False
    flip_gap: float | None = None
    """Each greedy token's runner-up this far below it, and a batched reply takes the runner-up at token 0."""
    in_flight: int = 0
    seen: list[list[int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def complete(self, prompt: list[int], max_tokens: int, top_k: int, extra: Any = None) -> _Completion:
        with self.lock:
            self.in_flight += 1
            cached = 0 if (extra == {"cache_prompt": False} and not self.ignores_opt_out) else len(prompt) - 1
            cached = cached if any(s == prompt for s in self.seen) else 0
            self.seen.append(list(prompt))
        time.sleep(0.03)  # long enough for a group's requests to overlap
        with self.lock:
            neighbours = self.in_flight - 1
        time.sleep(0.03)
        with self.lock:
            self.in_flight -= 1
        tokens = tuple(range(10, 10 + max_tokens))
        reply = _reply(self.offset - self.per_neighbour * neighbours, tokens, gap=self.flip_gap or 2.0)
        if self.flip_gap is not None and neighbours:
            reply.tokens[0] += 1  # the runner-up, flip_gap below the greedy token
        reply.cached_tokens = cached
        return reply


def _measure(server: _Server, **kw: Any) -> NoiseFloor | None:
    args = {"vocab": 256, "lengths": [20, 40, 60, 80, 100, 120], "width": 3, "new_tokens": 2, "top_k": 2}
    context = ctx(path("dynamic"), path("dynamic"))  # tolerance claim, float32
    return measure_noise(context, server, None, **{**args, "limit": 200, **kw})  # type: ignore[arg-type]


def test_the_floor_is_the_margin_times_the_worst_move_between_batch_compositions() -> None:
    noise = _measure(_Server(per_neighbour=1e-3))
    assert noise is not None and noise.pairs == 60 and noise.flips == 0 and noise.excluded == 0 and not noise.defects
    assert noise.worst == pytest.approx(2e-3, abs=2e-4)  # alone vs two neighbours
    assert noise.floor == pytest.approx(NOISE_MARGIN * noise.worst)
    assert "cache_prompt=False, 0 cached tokens reported" in noise.words()


def test_a_deterministic_difference_is_not_noise() -> None:
    """Another KV dtype moves every reply the same way in every batch: the floor stays 0, the difference
    from the reference stays a finding."""
    noise = _measure(_Server(per_neighbour=0.0, offset=0.05))
    assert noise is not None and noise.worst == 0.0 and noise.floor == 0.0
    verdict = judge(ctx(path("dynamic"), path("dynamic")), _reply(), _reply(0.05), noise)
    assert verdict.failed


def test_a_batch_that_moves_an_answer_beyond_rounding_is_a_defect_not_noise() -> None:
    """float32 arithmetic in a batch rounds at worst like float16 (NOISE_CAP): a move of 0.05 per neighbour
    is the engine answering differently because of its neighbours, as llama.cpp's shared sliding-window
    cache does; it is reported and kept out of the floor."""
    noise = _measure(_Server(per_neighbour=0.05))
    assert noise is not None and len(noise.defects) == 24 and noise.worst == 0.0  # alone vs each of 4 batches
    first = "a 20-token prompt off the cache, alone vs among 2 others (batch 1): |Δlogprob| 0.1, beyond 0.01"
    assert first in noise.defects[0]
    assert "24 that are not noise" in noise.words()


def test_a_batch_that_flips_a_near_tie_is_noise_and_one_that_flips_a_clear_winner_is_a_defect() -> None:
    """Rounding the size of NOISE_CAP can flip tokens that far apart, not further."""
    near = _measure(_Server(per_neighbour=0.0, flip_gap=5e-3))  # under float32's cap (1e-2)
    assert near is not None and near.flips == 24 and not near.defects
    clear = _measure(_Server(per_neighbour=0.0, flip_gap=0.1))
    assert clear is not None and len(clear.defects) == 24 and clear.flips == 0
    assert "greedy tokens diverge at token 0 (gap 0.1)" in clear.defects[0]


def test_replies_the_cache_served_despite_the_opt_out_are_left_out() -> None:
    noise = _measure(_Server(ignores_opt_out=True))
    assert noise is not None and noise.excluded == 60 and noise.pairs == 0 and noise.floor == 0.0


def test_an_engine_without_an_opt_out_has_no_measurable_floor() -> None:
    server = _Server(flavor="generic")
    assert off_cache_fields(server, None, "x") is None and _measure(server) is None  # type: ignore[arg-type]
    assert off_cache_fields(server, "cache_salt", "7") == {"cache_salt": "gate-noise-7"}  # type: ignore[arg-type]


def _noise(worst: float) -> NoiseFloor:
    return NoiseFloor(pairs=36, worst=worst, median=worst / 10, flips=0, off_cache="measured")


def test_a_reply_within_the_floor_is_noise_beyond_it_a_warning_far_beyond_a_failure() -> None:
    context = ctx(path("dynamic"), path("dynamic"))  # tolerance claim, float32
    noise = _noise(1e-3)  # floor 2e-3
    plain = judge(context, _reply(), _reply(1.5e-3))
    assert plain.failed or plain.warn  # over the float32 constant: what failed on llama.cpp before
    within = judge(context, _reply(), _reply(1.5e-3), noise)
    assert not within.failed and not within.warn
    over = judge(context, _reply(), _reply(3e-3), noise)
    assert over.warn and not over.failed
    beyond = judge(context, _reply(), _reply(DENY_ALLOWANCE * 2e-3 * 1.5), noise)
    assert beyond.failed


def test_a_greedy_flip_outside_the_floor_fails_and_inside_it_is_a_tie() -> None:
    context = ctx(path("dynamic"), path("dynamic"))
    noise = _noise(1e-3)
    near = _reply(tokens=(5, 6, 7), gap=1e-3)  # the runner-up of 6 is 7, 1e-3 below
    flipped = _Completion([5, 7, 7], near.logprobs, near.top)
    assert judge(context, near, flipped, noise).comparison.tie
    far = _reply(tokens=(5, 6, 7), gap=0.5)
    assert judge(context, far, _Completion([5, 7, 7], far.logprobs, far.top), noise).failed


def test_an_exact_claim_stays_exact() -> None:
    context = ctx(path("dynamic"), path("dynamic"), claim={"level": "exact"})
    assert judge(context, _reply(), _reply(1e-6), _noise(1e-2)).failed
