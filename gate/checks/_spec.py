"""Shared by the speculative-decoding checks."""

from __future__ import annotations

import torch

from gate.checks._compare import random_tokens
from gate.core.check import CheckContext
from gate.protocols import SpeculativePath, offered
from gate.speculative.sampler import SpecStats


class NotSpeculative(TypeError):
    """The candidate path cannot sample speculatively."""


def speculative_candidate(ctx: CheckContext) -> SpeculativePath:
    """The candidate as a SpeculativePath, or a clear error naming the capability it lacks."""
    sampler = offered(ctx.candidate, SpeculativePath)
    if sampler is None:
        raise NotSpeculative(
            f"candidate path {ctx.candidate.name!r} offers no speculative sampling (gate.protocols.SpeculativePath: "
            "sample, target_next_token_probs, draft_next_token_probs, num_draft_tokens)"
        )
    return sampler


def seeded_prompts(vocab: int, batch: int, length: int, seed: int, device: str) -> torch.Tensor:
    """[batch, length] int64 seeded prompts (drawn on CPU, then moved)."""
    return random_tokens(vocab, batch, length, seed).to(device)


def sampling_generator(seed: int, device: str) -> torch.Generator:
    return torch.Generator(device=torch.device(device)).manual_seed(seed)


def efficiency_note(stats: SpecStats) -> str:
    """A sentence naming wasted target passes (a lost bonus token keeps the distribution, costs speed)."""
    if not stats.missing_bonus or stats.missing_bonus <= 0:
        return ""
    return (
        f"; efficiency loss: {stats.missing_bonus} of {stats.full_accepts} rounds accepted all "
        f"{stats.k} drafts but emitted no bonus token, a target pass wasted each "
        f"({stats.tokens_per_target_pass:.2f} tokens per target pass)"
    )
