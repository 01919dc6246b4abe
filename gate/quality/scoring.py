"""Paired per-sample scoring of a candidate path against the exact reference path.

For each sample the reference decodes k tokens greedily; the candidate is teacher-forced along
that continuation, so both are compared on identical prefixes. From one candidate pass:

* top-1 agreement per token and KL(reference ‖ candidate) per token;
* greedy continuation match over k tokens: by induction, the candidate's own greedy decode equals
  the reference's for k tokens exactly when its argmax agrees at every teacher-forced step, and
  the first disagreement is where the two greedy decodes part;
* task accuracy against the ground truth: the reference is right when its greedy tokens are the
  answer; the candidate likewise, which on samples the reference gets wrong needs one more pass
  forced along the answer (same induction argument).

Only `DecodePath.new_session`, `prefill`, `append` and `reset` are used, so every adapter can be scored.

The candidate's requests go through a `SessionPool`: one session per batch size, reset between
requests as a server reuses its cache, so every request after the first of its size runs through
a reused session and a reset that leaves state behind (stale codes, kept tokens, a position
counter) degrades the very samples being judged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gate.protocols import DecodePath, Session


@dataclass
class Clock:
    """Wall time inside model calls (prefill/append), to separate it from the evaluator's own."""

    forward_s: float = 0.0
    calls: int = 0

    def run(self, fn: Callable[[torch.Tensor], torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        out = fn(tokens)
        if out.is_cuda:
            torch.cuda.synchronize(out.device)
        self.forward_s += time.perf_counter() - start
        self.calls += 1
        return out


@dataclass
class SampleScores:
    """Per-sample results of one batch (length B lists)."""

    greedy_match: list[float] = field(default_factory=list)
    first_divergence: list[int | None] = field(default_factory=list)
    top1: list[float] = field(default_factory=list)
    kl: list[float] = field(default_factory=list)
    kl_max: list[float] = field(default_factory=list)
    ref_correct: list[float] = field(default_factory=list)
    cand_correct: list[float] = field(default_factory=list)
    ref_tokens: list[list[int]] = field(default_factory=list)
    cand_tokens: list[list[int]] = field(default_factory=list)

    def extend(self, other: SampleScores) -> None:
        for name in self.__dataclass_fields__:
            getattr(self, name).extend(getattr(other, name))

    def column(self, name: str) -> list[float]:
        return [float(x) for x in getattr(self, name)]


SUMMED = ("cached_steps", "model_steps", "tokens_processed", "full_passes")
"""Exercise counters that add up over requests (the others are a state: the largest is kept)."""


@dataclass
class SessionPool:
    """The candidate's sessions, one per batch size, reused across requests: reset, never rebuilt."""

    path: DecodePath
    sessions: dict[int, Session] = field(default_factory=dict)
    fresh: int = 0
    """Requests that ran on a new session."""
    reused: int = 0
    """Requests that ran on a session reset after an earlier request."""

    def take(self, batch: int) -> Session:
        session = self.sessions.get(batch)
        if session is None:
            session = self.sessions[batch] = self.path.new_session(batch)
            self.fresh += 1
        else:
            session.reset()
            self.reused += 1
        return session


def _decode_greedy(path: DecodePath, prompts: torch.Tensor, k: int, clock: Clock) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decode k tokens -> (tokens [B, k], logits [B, k, V] predicting each of them)."""
    session = path.new_session(prompts.shape[0])
    logits = clock.run(session.prefill, prompts)[:, -1]
    steps, tokens = [logits], [logits.argmax(-1)]
    for _ in range(k - 1):
        logits = clock.run(session.append, tokens[-1][:, None])[:, -1]
        steps.append(logits)
        tokens.append(logits.argmax(-1))
    return torch.stack(tokens, dim=1), torch.stack(steps, dim=1).float()


def _forced(
    path: DecodePath | SessionPool, prompts: torch.Tensor, forced: torch.Tensor, clock: Clock
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Logits [B, k, V] of `path` teacher-forced along `forced` [B, k], one token per append (the
    decode phase as served), and the session's exercise record for this request (a pool's session
    is reset and reused; its counters count this request only)."""
    batch = prompts.shape[0]
    session = path.take(batch) if isinstance(path, SessionPool) else path.new_session(batch)
    before = dict(session.exercise())
    logits = clock.run(session.prefill, prompts)[:, -1]
    steps = [logits]
    for j in range(forced.shape[1] - 1):
        steps.append(clock.run(session.append, forced[:, j : j + 1])[:, -1])
    exercise = dict(session.exercise())
    for key in SUMMED:
        if isinstance(exercise.get(key), (int, float)) and isinstance(before.get(key), (int, float)):
            exercise[key] -= before[key]
    return torch.stack(steps, dim=1).float(), exercise


def kl_per_token(ref_logits: torch.Tensor, cand_logits: torch.Tensor) -> torch.Tensor:
    """KL(reference ‖ candidate) in nats per position: [B, k, V] x2 -> [B, k] (float64)."""
    p = torch.log_softmax(ref_logits.double(), dim=-1)
    q = torch.log_softmax(cand_logits.double(), dim=-1)
    return (p.exp() * (p - q)).sum(-1).clamp_min(0.0)


@torch.no_grad()
def score_batch(
    reference: DecodePath,
    candidate: DecodePath | SessionPool,
    prompts: torch.Tensor,
    k: int,
    answers: Sequence[Sequence[int]] | None,
    clock: Clock,
    device: str,
) -> tuple[SampleScores, dict[str, Any]]:
    """Score one batch of equal-length prompts [B, T]. Returns scores and the candidate's exercise.
    `candidate`: a path (a fresh session per request) or a pool of reused sessions."""
    prompts = prompts.to(device)
    ref_tokens, ref_logits = _decode_greedy(reference, prompts, k, clock)
    cand_logits, exercise = _forced(candidate, prompts, ref_tokens, clock)
    agree = cand_logits.argmax(-1) == ref_tokens  # [B, k]
    kl = kl_per_token(ref_logits, cand_logits)  # [B, k]
    out = SampleScores()
    all_agree = agree.all(dim=1)
    first = torch.where(all_agree, torch.full((len(prompts),), k, device=agree.device), (~agree).int().argmax(dim=1))
    out.greedy_match = all_agree.float().tolist()
    out.first_divergence = [None if bool(m) else int(f) for m, f in zip(all_agree, first, strict=True)]
    out.top1 = agree.float().mean(dim=1).tolist()
    out.kl = kl.mean(dim=1).tolist()
    out.kl_max = kl.max(dim=1).values.tolist()
    out.ref_tokens = ref_tokens.tolist()
    cand_greedy = torch.where(agree, ref_tokens, cand_logits.argmax(-1))
    # the candidate's own greedy tokens are known up to and including its first divergence
    out.cand_tokens = [
        row[: (f + 1 if f < k else k)] for row, f in zip(cand_greedy.tolist(), first.tolist(), strict=True)
    ]
    if answers is not None:
        wanted = [list(answer)[:k] for answer in answers]
        right = [bool(a) and out.ref_tokens[i][: len(a)] == a for i, a in enumerate(wanted)]
        cand_ok = [float(r and int(first[i]) >= len(a)) for i, (r, a) in enumerate(zip(right, wanted, strict=True))]
        retry = [i for i, (r, a) in enumerate(zip(right, wanted, strict=True)) if a and not r]
        if retry:
            # forced along the answer (padded to k with the reference's tokens; padding unjudged)
            forced = ref_tokens[retry].clone()
            for row, i in enumerate(retry):
                forced[row, : len(wanted[i])] = torch.tensor(wanted[i], device=forced.device)
            logits, _ = _forced(candidate, prompts[retry], forced, clock)
            hits = logits.argmax(-1) == forced
            for row, i in enumerate(retry):
                cand_ok[i] = float(bool(hits[row, : len(wanted[i])].all()))
        out.ref_correct, out.cand_correct = [float(r) for r in right], cand_ok
    return out, exercise
