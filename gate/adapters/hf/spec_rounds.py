"""What transformers' assisted generation did, read from outside the model: a pre-hook on the target
records the cache length and input length of each verify pass (`verify_log`, which also plants the
`accept-all` fault), from which proposals, acceptances, rejections and bonus tokens follow exactly
(`rounds`); `count_passes` counts a draft model's forwards."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from gate.adapters.hf import compat
from gate.speculative.sampler import SpecStats


def rounds(calls: list[tuple[int, int]], prompt_len: int, final_len: int, k: int) -> SpecStats:
    """Per-round accounting from the target's verify passes.

    calls: (cache length before the pass, input length) per target forward. Round r scores the
    uncached tokens plus k_r drafts; after it the sequence has grown by m_r + 1 (m_r accepted drafts
    and one token from the target: a correction, or a bonus when all k_r were accepted), and the cache
    holds all but the newest token, so the next pass starts at length L_{r+1} - 1.
    """
    stats = SpecStats(k=k, sequences=1, full_accepts=0)
    lengths = [prompt_len] + [start + 1 for start, _ in calls[1:]] + [final_len]  # L_r before each round
    for r, (start, n_input) in enumerate(calls):
        uncached = lengths[r] - start
        drafted = max(n_input - uncached, 0)
        grown = lengths[r + 1] - lengths[r]
        accepted = min(max(grown - 1, 0), drafted)
        stats.target_calls += 1
        stats.target_passes += 1
        stats.proposed += drafted
        stats.accepted += accepted
        stats.emitted += grown
        if drafted and accepted == drafted:
            # every round of transformers' loop ends with one target token: after k acceptances, a bonus
            stats.full_accepts = (stats.full_accepts or 0) + 1
            stats.bonus += 1
        elif drafted:
            stats.rejections += 1
    return stats


@contextmanager
def verify_log(model: Any, calls: list[tuple[int, int]], accept_all: bool, prompt_len: int) -> Iterator[None]:
    """Record (cache length, input length) of each target pass; with accept_all, make each drafted
    token the target's top choice in that pass's output (verification removed from outside)."""
    api = compat.cache_api(model)

    def pre(_module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        ids: torch.Tensor = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
        cache = kwargs.get(api.cache_kwarg)
        calls.append((compat.seq_length(cache) if cache is not None else 0, int(ids.shape[1])))
        kwargs_seen.append(ids)

    def post(_module: Any, _args: Any, _kwargs: dict[str, Any], output: Any) -> Any:
        ids = kwargs_seen.pop()
        _start, n_input = calls[-1]
        drafted = n_input - (prompt_len if len(calls) == 1 else 1)
        if accept_all and drafted > 0:
            # output rows are the last input rows; row -(drafted + 1) + j predicts ids[:, -drafted + j]
            rows = output.logits[:, -(drafted + 1) : -1]
            rows.scatter_(-1, ids[:, -drafted:, None], rows.amax(-1, keepdim=True) + 100.0)
        return output

    kwargs_seen: list[torch.Tensor] = []
    with model.register_forward_pre_hook(pre, with_kwargs=True), model.register_forward_hook(post, with_kwargs=True):
        yield


@contextmanager
def count_passes(model: Any | None, counter: list[int]) -> Iterator[None]:
    if model is None:
        yield
        return

    def hook(*_args: Any) -> None:
        counter[0] += 1

    with model.register_forward_hook(hook):
        yield
