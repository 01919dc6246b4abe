"""`reuse_after: paged`: the candidate's model object serves a batch through continuous batching
first, and every forward the path runs afterwards goes through that same object, so whatever the batch
leaves on it reaches the ordinary forward (docs/hf-adapter.md, "Reused models and stop tokens").
"""

from __future__ import annotations

from typing import Any

import torch

from gate.adapters.hf import compat
from gate.adapters.hf.view import SessionPath
from gate.protocols import subject_call

PAGED_KERNEL = "paged|eager"
"""The attention implementation continuous batching switches an eager model to (what the fault leaves)."""

BATCH_LENGTHS = (12, 20)
"""Prompt lengths of the batch served before reuse (two requests packed into each forward)."""

BATCH_PAGE = 16
"""Tokens per page, and per forward, of that batch (the second prompt takes two chunks)."""

BATCH_NEW_TOKENS = 4
"""Greedy tokens each request of the batch generates (decode steps on the paged cache)."""


def attn_implementation(model: Any) -> str | None:
    value = getattr(model.config, "_attn_implementation", None)
    return None if value is None else str(value)


def serve_batch(path: SessionPath, *, leave_paged: bool) -> dict[str, Any]:
    """Run a seeded batch through the release's continuous batching on `path.model`; with `leave_paged`,
    leave the model on the paged kernel afterwards (the fault). What ran, for the exercise record."""
    compat.require_continuous_batching()
    model = path.model
    generator = torch.Generator().manual_seed(path.seed + 7)
    requests = [torch.randint(0, path.vocab_size, (n,), generator=generator).tolist() for n in BATCH_LENGTHS]
    before = attn_implementation(model)
    forwards = [0]

    def count(*_args: Any) -> None:
        forwards[0] += 1

    with (
        model.register_forward_hook(count),
        torch.no_grad(),
        subject_call("generate_batch (before reuse)", requests=len(requests)),
    ):
        out = compat.generate_batch(model, requests, BATCH_PAGE, path.max_len, BATCH_NEW_TOKENS)
    compat.failed_request(out, {"requests": len(requests)})
    if leave_paged:
        model.set_attn_implementation(PAGED_KERNEL)
    return {
        "reused_after": "paged",
        "batch_requests": len(requests),
        "batch_prompt_tokens": list(BATCH_LENGTHS),
        "batch_generated_tokens": sum(len(result.generated_tokens) for result in out.values()),
        "batch_forwards": forwards[0],
        "attn_implementation_before_batch": before,
        "attn_implementation_after_batch": attn_implementation(model),
    }
