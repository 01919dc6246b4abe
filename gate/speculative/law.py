"""Exact output distributions over a short horizon, by enumeration.

`target_law` is the target's own joint distribution over the next `horizon` tokens (what a correct
speculative sampler must reproduce). `sampler_law` is the distribution a speculative sampler with
given `VerifyRules` actually produces, computed by walking every draft proposal and accept/reject
branch; with a faulty rule it gives the alternative against which the test's power is computed.
Both need the sampling distribution to have small support (top-k), so the tree stays small.
"""

from __future__ import annotations

import functools
import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from gate.speculative.sampler import VerifyRules

Seq = tuple[int, ...]
Law = dict[Seq, float]
"""Continuation (horizon tokens) -> probability."""

NextProbsFn = Callable[[torch.Tensor], torch.Tensor]
"""Sampling distribution of the next token: contexts [N, T] (equal lengths) -> probs [N, V]."""


@dataclass
class NextTokenTable:
    """Memoised next-token distributions after `prompt + continuation`, float64.

    Continuations of different lengths are scored in separate equal-length batches, so engines
    need not support padding. `asked` keeps every batch in the order it was scored, with its answer:
    a law enumerated from this table depends on nothing else (see `answers_again`)."""

    probs_fn: NextProbsFn
    prompt: torch.Tensor
    """[T0] int64."""
    chunk: int = 1024
    asked: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    """(contexts [N, T], probs [N, V] float64 on CPU) per call of `probs_fn`, in order."""
    _cache: dict[Seq, torch.Tensor] = field(default_factory=dict)

    def __call__(self, conts: list[Seq]) -> torch.Tensor:
        """[len(conts), V] float64."""
        missing = sorted({c for c in conts if c not in self._cache}, key=len)
        for _, same_length in itertools.groupby(missing, key=len):
            group = list(same_length)
            for start in range(0, len(group), self.chunk):
                part = group[start : start + self.chunk]
                tail = torch.tensor(part, dtype=torch.long, device=self.prompt.device).reshape(len(part), -1)
                ctx = torch.cat([self.prompt.expand(len(part), -1), tail], 1)
                with torch.no_grad():
                    probs = self.probs_fn(ctx).double().cpu()
                self.asked.append((ctx, probs))
                for c, row in zip(part, probs, strict=True):
                    self._cache[c] = row
        return torch.stack([self._cache[c] for c in conts])


def answers_again(probs_fn: NextProbsFn, asked: list[tuple[torch.Tensor, torch.Tensor]]) -> bool:
    """Whether `probs_fn` gives, bit for bit, the answers a table recorded (`NextTokenTable.asked`),
    asked in the same batches in the same order (an engine's rounding may depend on the batch).

    Enumeration is deterministic given the answers: the contexts asked next follow from the answers
    to those before. So a law enumerated from the recorded table is exactly the law `probs_fn` would
    give, and one that answers differently anywhere (a fault in the model, not in the sampler's rule)
    gets its law enumerated afresh."""
    with torch.no_grad():
        return all(torch.equal(probs_fn(contexts).double().cpu(), probs) for contexts, probs in asked)


def _support(row: torch.Tensor) -> list[tuple[int, float]]:
    return [(t, float(row[t])) for t in (row > 0).nonzero().squeeze(1).tolist()]


def target_law(target: NextTokenTable, horizon: int) -> Law:
    """The target's joint distribution over `horizon` tokens (ancestral enumeration)."""
    layer: Law = {(): 1.0}
    for _ in range(horizon):
        conts = list(layer)
        layer = {(*c, t): layer[c] * p for c, row in zip(conts, target(conts), strict=True) for t, p in _support(row)}
    return layer


def sampler_law(target: NextTokenTable, draft: NextTokenTable, rules: VerifyRules, k: int, horizon: int) -> Law:
    """The exact distribution of the first `horizon` tokens from a k-token speculative sampler."""
    final: Law = defaultdict(float)
    pending: Law = {(): 1.0}

    while pending:
        arrived: Law = defaultdict(float)

        def land(seq: Seq, mass: float, arrived: Law = arrived) -> None:
            if mass <= 0:
                return
            if len(seq) >= horizon:
                final[seq[:horizon]] += mass
            else:
                arrived[seq] += mass

        # one round from every pending prefix; a node is (prefix + drafted so far, probability)
        nodes = list(pending.items())
        for depth in range(k + 1):
            live = []
            for seq, w in nodes:
                if len(seq) >= horizon:  # drafted past the horizon: the rest is truncated
                    final[seq[:horizon]] += w
                else:
                    live.append((seq, w))
            if not live:
                break
            conts = [s for s, _ in live]
            p = target(conts)  # [N, V]
            if depth == k:  # all k accepted
                if not rules.emit_bonus:
                    for seq, w in live:
                        land(seq, w)
                    break
                bonus = rules.bonus(p, functools.partial(draft, conts))
                bonus = bonus / bonus.sum(-1, keepdim=True)
                for (seq, w), row in zip(live, bonus, strict=True):
                    for t, b in _support(row):
                        land((*seq, t), w * b)
                break
            q = draft(conts)
            accept = torch.where(q > 0, rules.accept(p, q), torch.zeros_like(q)).nan_to_num(0.0)
            reject_mass = (q * (1 - accept)).sum(-1)  # [N]
            residual = rules.residual(p, q)
            residual = residual / residual.sum(-1, keepdim=True)
            children = []
            for i, (seq, w) in enumerate(live):
                if reject_mass[i] > 0:
                    for t, r in _support(residual[i]):
                        land((*seq, t), w * float(reject_mass[i]) * r)
                for t, qt in _support(q[i]):
                    a = float(accept[i, t])
                    if a > 0:
                        children.append(((*seq, t), w * qt * a))
            nodes = children
        pending = dict(arrived)
    return dict(final)
