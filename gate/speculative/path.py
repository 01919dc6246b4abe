"""A speculative decoding path built from any two DecodePaths: a target and a draft.

As a `DecodePath` it is the target (full passes, sessions and identity are the target's), so the
parity checks still apply; as a `SpeculativePath` it samples with `SpeculativeSampler` over the
two paths' full causal passes. Its faults are the sampler faults of `gate.speculative.sampler`, applied by
replacing one part of the verification rule.
"""

from __future__ import annotations

from typing import Any

import torch

from gate.protocols import DecodePath, Session, subject_call
from gate.speculative.sampler import (
    CORRECT,
    FAULTS,
    SpeculativeSample,
    SpeculativeSampler,
    VerifyRules,
    apply_fault,
    warp,
)


class SpeculativeDecodePath:
    """Target + draft + k, sampling with the published algorithm (or a faulty rule)."""

    uses_cache = False

    def __init__(
        self, target: DecodePath, draft: DecodePath, k: int, rules: VerifyRules = CORRECT, draft_kind: str = ""
    ) -> None:
        if draft.vocab_size != target.vocab_size:
            raise ValueError(f"draft vocabulary {draft.vocab_size} differs from the target's {target.vocab_size}")
        if k < 1:
            raise ValueError("the draft must propose at least one token per round")
        self.target, self.draft, self.rules, self.draft_kind = target, draft, rules, draft_kind
        self.num_draft_tokens = k
        self.sampler = SpeculativeSampler(target.full_logits, draft.full_logits, k, rules)
        suffix = "" if rules is CORRECT else f"[{rules.name}]"
        self.name = f"{target.name}+speculative(k={k}, draft={draft_kind or draft.name}){suffix}"
        self.vocab_size = target.vocab_size
        self.max_len = min(target.max_len, draft.max_len)
        self.dtype = target.dtype

    def identity(self) -> dict[str, Any]:
        return {
            **self.target.identity(),
            "speculative": {
                "k": self.num_draft_tokens,
                "rules": self.rules.name,
                "draft_kind": self.draft_kind,
                "draft": self.draft.identity(),
            },
        }

    def full_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.target.full_logits(tokens)

    def new_session(self, batch_size: int) -> Session:
        return self.target.new_session(batch_size)

    def faults(self) -> tuple[str, ...]:
        return tuple(FAULTS)

    def with_fault(self, fault: str) -> SpeculativeDecodePath:
        return SpeculativeDecodePath(
            self.target, self.draft, self.num_draft_tokens, apply_fault(self.rules, fault), self.draft_kind
        )

    def sample(
        self, prompts: torch.Tensor, n_tokens: int, *, temperature: float, top_k: int | None, generator: torch.Generator
    ) -> SpeculativeSample:
        if prompts.shape[1] + n_tokens + self.num_draft_tokens + 1 > self.max_len:
            raise ValueError(f"prompt + {n_tokens} tokens + k + 1 exceeds max_len {self.max_len}")
        # the sampler (drafting, verification, residual draws) is the subject's code and its crashes
        with subject_call(f"{type(self.sampler).__name__}.sample", length=int(prompts.shape[1]), new_tokens=n_tokens):
            return self.sampler.sample(prompts, n_tokens, temperature=temperature, top_k=top_k, generator=generator)

    def target_next_token_probs(self, contexts: torch.Tensor, *, temperature: float, top_k: int | None) -> torch.Tensor:
        with torch.no_grad():
            return warp(self.target.full_logits(contexts)[:, -1].double(), temperature, top_k)

    def draft_next_token_probs(self, contexts: torch.Tensor, *, temperature: float, top_k: int | None) -> torch.Tensor:
        with torch.no_grad():
            return warp(self.draft.full_logits(contexts)[:, -1].double(), temperature, top_k)
