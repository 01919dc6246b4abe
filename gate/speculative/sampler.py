"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023), batched and seeded.

A draft model proposes `k` tokens one at a time from q; the target scores all of them in one pass
and gives p at each of the k + 1 positions. Drafted token x_j is accepted with probability
min(1, p_j(x_j) / q_j(x_j)); at the first rejection a replacement is drawn from
norm(max(0, p_j - q_j)) and the round ends; when all k are accepted a bonus token is drawn from
p_{k+1}. The output then follows the target's distribution exactly, whatever the draft.

The verification rule is data (`VerifyRules`), so the faults the gate must detect are wrappers
applied from outside (`apply_fault(rules, "inverted-ratio")`), never flags inside the sampler.
The models are plain logits functions: `f(tokens [B, T]) -> logits [B, T, V]`, causal, so a
row's logits at position t depend only on its tokens up to t. Rows advance by different amounts
each round; they share one right-padded buffer, which a causal model reads correctly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

LogitsFn = Callable[[torch.Tensor], torch.Tensor]
"""A causal model: tokens [B, T] int64 -> logits [B, T, V]."""


def warp(logits: torch.Tensor, temperature: float, top_k: int | None) -> torch.Tensor:
    """Sampling distribution from logits [..., V]: temperature (0: greedy, one-hot), then top-k, then softmax."""
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    scaled = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return torch.softmax(scaled, dim=-1)


def _renormalise(weights: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """weights / sum, rows that sum to zero (p == q exactly) replaced by `fallback`. [N, V]."""
    total = weights.sum(-1, keepdim=True)
    return torch.where(total > 0, weights / total.clamp_min(torch.finfo(weights.dtype).tiny), fallback)


# --- the verification rule, and the faults as replacements of one of its parts -------------------

AcceptFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(p(x), q(x)) [...] -> probability of accepting drafted x [...]."""
ResidualFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(p, q) [N, V] -> the distribution to sample from after a rejection [N, V]."""
BonusFn = Callable[[torch.Tensor, Callable[[], torch.Tensor]], torch.Tensor]
"""(p_{k+1} [N, V], thunk giving q_{k+1} [N, V]) -> bonus distribution [N, V]."""


def accept_ratio(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """min(1, p/q): q(x) > 0 for a drafted x."""
    return (p_x / q_x).clamp(max=1.0)


def residual_positive_part(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q))."""
    return _renormalise((p - q).clamp_min(0.0), p)


def bonus_from_target(p_next: torch.Tensor, _draft_next: Callable[[], torch.Tensor]) -> torch.Tensor:
    return p_next


@dataclass(frozen=True)
class VerifyRules:
    """How drafted tokens are verified. `CORRECT` is the published algorithm."""

    name: str
    accept: AcceptFn = accept_ratio
    residual: ResidualFn = residual_positive_part
    bonus: BonusFn = bonus_from_target
    emit_bonus: bool = True
    """Whether an all-accepted round ends with a bonus token."""


CORRECT = VerifyRules("correct")


FAULTS: dict[str, Callable[[VerifyRules], VerifyRules]] = {
    "accept-all": lambda r: replace(r, accept=lambda p_x, q_x: torch.ones_like(p_x)),
    # p(x) = 0 gives inf, clamped: always accepted
    "inverted-ratio": lambda r: replace(r, accept=lambda p_x, q_x: (q_x / p_x).clamp(max=1.0)),
    "residual-from-target": lambda r: replace(r, residual=lambda p, q: p),
    "residual-abs": lambda r: replace(r, residual=lambda p, q: _renormalise((p - q).abs(), p)),
    "bonus-from-draft": lambda r: replace(r, bonus=lambda p_next, draft_next: draft_next()),
    "drop-bonus": lambda r: replace(r, emit_bonus=False),
}
"""Sampler faults, each replacing one part of the rule. drop-bonus keeps the distribution (the next
round samples that position from the target) and only wastes a target pass."""


def apply_fault(rules: VerifyRules, fault: str) -> VerifyRules:
    """`rules` with one fault applied; names compose (`"correct+drop-bonus"`)."""
    if fault not in FAULTS:
        from gate.errors import UnknownFault

        raise UnknownFault(f"unknown speculative-sampler fault {fault!r} (known: {', '.join(FAULTS)})")
    return replace(FAULTS[fault](rules), name=f"{rules.name}+{fault}" if rules.name != "correct" else fault)


# --- the sampler -----------------------------------------------------------------------------------


@dataclass
class SpecStats:
    """Work done by one call to `sample`: proof of exercise and efficiency."""

    k: int
    """Drafted tokens per round."""
    sequences: int = 0
    target_calls: int = 0
    """Batched target forward calls (one per round)."""
    draft_calls: int = 0
    """Batched draft forward calls."""
    target_passes: int = 0
    """Per-sequence target passes: rounds summed over the sequences active in them."""
    draft_passes: int = 0
    """Per-sequence draft passes."""
    proposed: int = 0
    """Drafted tokens offered to the target."""
    accepted: int = 0
    """Drafted tokens the target accepted."""
    rejections: int = 0
    """Rounds that ended in a rejection (and a residual sample)."""
    full_accepts: int | None = None
    """Rounds in which all k drafts were accepted (each should end with a bonus token); None when the
    sampler does not count them."""
    bonus: int = 0
    """Bonus tokens drawn after k acceptances."""
    emitted: int = 0
    """Tokens produced by all rounds (before truncation to the requested length)."""
    eos_stops: int | None = None
    """Continuations that stopped at an end-of-sequence token before their length (a path run with an
    EOS token); None when the path runs without one."""

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_target_pass(self) -> float:
        return self.emitted / self.target_passes if self.target_passes else 0.0

    @property
    def missing_bonus(self) -> int | None:
        """All-accepted rounds that ended without a bonus token: a target pass wasted each."""
        return None if self.full_accepts is None else self.full_accepts - self.bonus

    def add(self, other: SpecStats) -> SpecStats:
        """Sum of two tallies with the same k."""
        total = SpecStats(k=self.k)
        for name in asdict(self):
            a, b = getattr(self, name), getattr(other, name)
            if name != "k":  # None (not counted) only where neither side counted
                setattr(total, name, None if a is None and b is None else (a or 0) + (b or 0))
        return total

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "acceptance_rate": round(self.acceptance_rate, 6),
            "tokens_per_target_pass": round(self.tokens_per_target_pass, 6),
            "missing_bonus": self.missing_bonus,
        }


@dataclass
class SpeculativeSample:
    tokens: torch.Tensor
    """[B, n_tokens] int64, the continuations (prompts excluded)."""
    stats: SpecStats
    produced: list[int] | None = None
    """Tokens each continuation produced before it stopped at an end-of-sequence token (stop token
    included; the rest of its row repeats that token); None: every row produced all n_tokens."""


def _at(logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """logits [A, T, V] at per-row positions [A] or [A, m] -> [A, V] or [A, m, V]."""
    rows = torch.arange(logits.shape[0], device=logits.device)
    return logits[rows, positions] if positions.dim() == 1 else logits[rows[:, None], positions]


@dataclass
class SpeculativeSampler:
    """Draft-then-verify sampling over batches of equal-length prompts."""

    target: LogitsFn
    draft: LogitsFn
    k: int
    rules: VerifyRules = field(default=CORRECT)

    def with_fault(self, fault: str) -> SpeculativeSampler:
        return replace(self, rules=apply_fault(self.rules, fault))

    def sample(
        self, prompts: torch.Tensor, n_tokens: int, *, temperature: float, top_k: int | None, generator: torch.Generator
    ) -> SpeculativeSample:
        """Continue each prompt [B, T0] by `n_tokens` tokens. Seeded by `generator` alone."""
        batch, t0 = prompts.shape
        stats = SpecStats(k=self.k, sequences=batch)
        # buffer: [B, T0 + n + k + 1]; a round writes at most k + 1 tokens past a row's length
        buf = torch.zeros(batch, t0 + n_tokens + self.k + 1, dtype=torch.long, device=prompts.device)
        buf[:, :t0] = prompts
        lengths = torch.full((batch,), t0, dtype=torch.long, device=prompts.device)
        with torch.no_grad():
            while True:
                active = (lengths < t0 + n_tokens).nonzero().squeeze(1)
                if active.numel() == 0:
                    break
                rows, grown = self._round(buf[active], lengths[active], temperature, top_k, generator, stats)
                buf[active] = rows
                lengths[active] = grown
        return SpeculativeSample(tokens=buf[:, t0 : t0 + n_tokens].clone(), stats=stats)

    def _draft_probs(
        self, buf: torch.Tensor, pos: torch.Tensor, temperature: float, top_k: int | None, stats: SpecStats
    ) -> torch.Tensor:
        """Draft distribution for the token after position pos [A] -> [A, V]."""
        stats.draft_calls += 1
        stats.draft_passes += buf.shape[0]
        logits = self.draft(buf[:, : int(pos.max()) + 1])
        return warp(_at(logits, pos).float(), temperature, top_k)

    def _round(
        self,
        buf: torch.Tensor,
        lengths: torch.Tensor,
        temperature: float,
        top_k: int | None,
        gen: torch.Generator,
        stats: SpecStats,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One draft-and-verify round for A active rows. buf: [A, W], lengths: [A]."""
        k, rules = self.k, self.rules
        rows = torch.arange(buf.shape[0], device=buf.device)
        steps = torch.arange(k + 1, device=buf.device)
        qs = []
        for j in range(k):  # draft k tokens autoregressively; q_j: [A, V]
            q = self._draft_probs(buf, lengths - 1 + j, temperature, top_k, stats)
            buf[rows, lengths + j] = torch.multinomial(q, 1, generator=gen).squeeze(1)
            qs.append(q)
        q_all = torch.stack(qs, 1)  # [A, k, V]
        drafts = buf[rows[:, None], lengths[:, None] + steps[:k]]  # [A, k]
        stats.target_calls += 1
        stats.target_passes += buf.shape[0]
        logits = self.target(buf[:, : int(lengths.max()) + k])
        p_all = warp(_at(logits, lengths[:, None] - 1 + steps).float(), temperature, top_k)  # [A, k+1, V]
        p_x = p_all[:, :k].gather(2, drafts[..., None]).squeeze(2)  # [A, k]
        q_x = q_all.gather(2, drafts[..., None]).squeeze(2)
        uniform = torch.rand(drafts.shape, generator=gen, device=buf.device)
        n_acc = (uniform < rules.accept(p_x, q_x)).long().cumprod(1).sum(1)  # [A] leading accepts
        stats.proposed += k * buf.shape[0]
        stats.accepted += int(n_acc.sum())
        grown = lengths + n_acc

        rejected = (n_acc < k).nonzero().squeeze(1)
        if rejected.numel():
            at = n_acc[rejected]  # index of the first rejected draft
            dist = rules.residual(p_all[rejected, at], q_all[rejected, at])
            buf[rejected, lengths[rejected] + at] = torch.multinomial(dist, 1, generator=gen).squeeze(1)
            grown[rejected] += 1
            stats.rejections += rejected.numel()

        full = (n_acc == k).nonzero().squeeze(1)
        stats.full_accepts = (stats.full_accepts or 0) + full.numel()
        if full.numel() and rules.emit_bonus:

            def draft_next() -> torch.Tensor:
                return self._draft_probs(buf[full], lengths[full] - 1 + k, temperature, top_k, stats)

            dist = rules.bonus(p_all[full, k], draft_next)
            buf[full, lengths[full] + k] = torch.multinomial(dist, 1, generator=gen).squeeze(1)
            grown[full] += 1
            stats.bonus += full.numel()
        stats.emitted += int((grown - lengths).sum())
        return buf, grown


def target_only_sample(
    target: LogitsFn,
    prompts: torch.Tensor,
    n_tokens: int,
    *,
    temperature: float,
    top_k: int | None,
    generator: torch.Generator,
) -> torch.Tensor:
    """Plain ancestral sampling from the target alone: [B, T0] -> [B, n_tokens]. The baseline."""
    tokens = prompts
    with torch.no_grad():
        for _ in range(n_tokens):
            p = warp(target(tokens)[:, -1].float(), temperature, top_k)
            tokens = torch.cat([tokens, torch.multinomial(p, 1, generator=generator)], 1)
    return tokens[:, prompts.shape[1] :]
