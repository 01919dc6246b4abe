"""The generic `sampler:<rule>` stand-in: gate's reference speculative sampler with one verification
rule broken (accept-all, bonus-from-draft, ...), run over the candidate's own target and draft
distributions. This module imports no torch at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gate.engine.generic_sessions import GenericCarrier

if TYPE_CHECKING:
    import torch

    from gate.protocols import DecodePath


class _ProbsAsLogits:
    """A causal logits function over a next-token probability function: row t is log p(. | tokens
    up to t), computed from `first` on (earlier rows are never read by the sampler). Each distinct
    context is asked once (`seen`): a round re-reads the rows of the tokens it already accepted."""

    LIMIT = 65536
    """Contexts remembered before the memo starts over (bounds its memory)."""

    def __init__(self, probs: Callable[..., torch.Tensor], temperature: float, top_k: int | None, first: int) -> None:
        self.probs, self.temperature, self.top_k, self.first = probs, temperature, top_k, first
        self.seen: dict[tuple[int, ...], torch.Tensor] = {}

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        import torch

        if len(self.seen) > self.LIMIT:
            self.seen.clear()
        rows = tokens.tolist()
        columns = []
        for t in range(self.first, tokens.shape[1]):
            keys = [tuple(row[: t + 1]) for row in rows]
            missing = sorted({i for i, key in enumerate(keys) if key not in self.seen})
            if missing:
                at = torch.tensor(missing, device=tokens.device)
                fresh = self.probs(tokens[at, : t + 1], temperature=self.temperature, top_k=self.top_k)
                for i, p in zip(missing, fresh.double().to(tokens.device), strict=True):
                    self.seen.setdefault(keys[i], p)
            columns.append(torch.stack([self.seen[key] for key in keys]))
        out = torch.zeros(*tokens.shape[:2], columns[0].shape[-1], dtype=torch.float64, device=tokens.device)
        out[:, self.first :] = torch.stack(columns, 1).clamp_min(0.0).log()
        return out


class FaultySampler(GenericCarrier):
    """The candidate as a SpeculativePath whose `sample` is gate's reference sampler with one rule of
    gate.speculative.sampler.FAULTS broken, over the candidate's own target and draft probabilities."""

    def __init__(self, inner: Any, rule: str) -> None:
        self.inner, self.rule, self.carried = inner, rule, f"sampler:{rule}"
        self.name = f"{inner.name}+generic:sampler:{rule}"
        self.num_draft_tokens = int(inner.num_draft_tokens)
        self.vocab_size, self.max_len = inner.vocab_size, inner.max_len
        self.uses_cache, self.dtype = getattr(inner, "uses_cache", False), getattr(inner, "dtype", "float32")
        self.models: dict[tuple[Any, ...], tuple[_ProbsAsLogits, _ProbsAsLogits]] = {}

    def identity(self) -> dict[str, Any]:
        return {**self.inner.identity(), "generic_fault": self.carried}

    def full_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner.full_logits(tokens)
        return out

    def new_session(self, batch_size: int) -> Any:
        return self.inner.new_session(batch_size)

    def target_next_token_probs(self, contexts: torch.Tensor, *, temperature: float, top_k: int | None) -> Any:
        return self.inner.target_next_token_probs(contexts, temperature=temperature, top_k=top_k)

    def draft_next_token_probs(self, contexts: torch.Tensor, *, temperature: float, top_k: int | None) -> Any:
        return self.inner.draft_next_token_probs(contexts, temperature=temperature, top_k=top_k)

    def sample(
        self, prompts: torch.Tensor, n_tokens: int, *, temperature: float, top_k: int | None, generator: torch.Generator
    ) -> Any:
        from gate.speculative.sampler import CORRECT, SpeculativeSampler, apply_fault

        first = prompts.shape[1] - 1
        key = (temperature, top_k, first)
        if key not in self.models:  # one memo per warp and prompt length, kept across calls
            self.models[key] = (
                _ProbsAsLogits(self.target_next_token_probs, temperature, top_k, first),
                _ProbsAsLogits(self.draft_next_token_probs, temperature, top_k, first),
            )
        target, draft = self.models[key]
        sampler = SpeculativeSampler(target, draft, self.num_draft_tokens, apply_fault(CORRECT, self.rule))
        # the distributions are already warped: temperature 1 and no top-k give them back unchanged
        return sampler.sample(prompts, n_tokens, temperature=1.0, top_k=None, generator=generator)


def sampler_needs(path: DecodePath) -> str | None:
    """None when the path is a speculative sampler whose draft gives probabilities, else why not."""
    from gate.protocols import SpeculativePath, offered

    sampler = offered(path, SpeculativePath)
    if sampler is None:
        return f"path {path.name} samples no drafts (no gate.plugin.SpeculativePath)"
    import torch

    try:
        sampler.draft_next_token_probs(torch.zeros(1, 1, dtype=torch.long), temperature=1.0, top_k=None)
    except NotImplementedError:
        return f"the draft of {path.name} gives no probabilities (draft_next_token_probs), so no sampler can be wrapped"
    return None
