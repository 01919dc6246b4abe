"""The uncached computations a prefix-reuse check compares each served request with (`Oracle`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from gate.core.check import CheckContext
from gate.protocols import PrefixServing

Oracle = Callable[[Sequence[int]], torch.Tensor]
"""token ids -> [T, V] float32 logits of an uncached computation under the request's identity."""


def reference_oracle(ctx: CheckContext) -> Oracle:
    """One full pass of the reference path (the base identity: no adapter, the worker's model)."""

    def compute(tokens: tuple[int, ...]) -> torch.Tensor:
        return ctx.reference.full_logits(torch.tensor([list(tokens)], device=ctx.device))[0].float()

    def oracle(tokens: Sequence[int]) -> torch.Tensor:
        key = tuple(int(t) for t in tokens)  # the same prompts come back in every control: computed once a run
        return ctx.cache.get(("prefix-oracle", ctx.reference, key), lambda: compute(key))

    return oracle


def recompute_oracle(worker: PrefixServing, adapter: str | None = None) -> Oracle:
    """The worker's own uncached pass under an identity the reference path cannot express (an adapter)."""

    def oracle(tokens: Sequence[int]) -> torch.Tensor:
        return worker.recompute(tokens, adapter=adapter).logits

    return oracle


def memoized(oracle: Oracle) -> Oracle:
    """`oracle` computed once per token sequence: never across a change of model or identity."""
    seen: dict[tuple[int, ...], torch.Tensor] = {}

    def once(tokens: Sequence[int]) -> torch.Tensor:
        key = tuple(int(t) for t in tokens)
        if key not in seen:
            seen[key] = oracle(key)
        return seen[key]

    return once
