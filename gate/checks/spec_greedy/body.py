"""spec-greedy's body: measure a greedy speculative run beside the target's own, judge, explain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from gate.checks._spec import efficiency_note, sampling_generator, seeded_prompts, speculative_candidate
from gate.checks.spec_greedy import SpecGreedyParams
from gate.checks.spec_greedy.evidence import SpecGreedyEvidence, TokenPair
from gate.core.check import CheckContext, Outcome, check
from gate.core.manifest import GreedyTokensClaim
from gate.protocols import DecodePath, SpeculativePath
from gate.speculative.sampler import SpecStats


@dataclass(frozen=True)
class Observations:
    """One speculative run of n = expected.shape[1] tokens beside the target's own continuation."""

    k: int
    expected: torch.Tensor
    """[B, n] the target's own greedy continuation (CPU)."""
    got: torch.Tensor
    """[B, n] the speculative continuation (CPU)."""
    produced: list[int] | None
    """Tokens each row produced up to its EOS token (stop token included); None: all n."""
    stats: SpecStats
    lengths: list[int]
    """The lengths whose matching sequences are counted (each at most n)."""


@dataclass(frozen=True)
class Judgement:
    """Where each sequence first differs, how many match at each length, and what is wrong."""

    first: list[int | None]
    """Per sequence, the first differing token (None: equal throughout)."""
    by_length: dict[str, int]
    """Length -> sequences equal to the target's own up to it."""
    problems: list[str]
    detected_at: int | None
    """The earliest divergence over all sequences."""


def probe_tokens(k: int) -> int:
    """Tokens a control decodes first: k + 1, so every prompt's first round (k drafts verified, a
    rejection's replacement or the bonus token) lies inside, where a verification fault shows first;
    a greedy divergence there already fails the check."""
    return k + 1


def target_greedy(reference: DecodePath, prompts: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """The target's own greedy continuation by full passes: [B, T0] -> [B, n_tokens]."""
    tokens = prompts
    with torch.no_grad():
        for _ in range(n_tokens):
            tokens = torch.cat([tokens, reference.full_logits(tokens)[:, -1].argmax(-1, keepdim=True)], 1)
    return tokens[:, prompts.shape[1] :]


def measure(ctx: CheckContext, p: SpecGreedyParams, spec: SpeculativePath) -> Observations:
    """The target's own continuation (once per run) and the candidate's greedy speculative one; a
    control decodes the first rounds first and stops there if they already differ."""
    # the continuation length n and the claim's lengths up to it (or just n)
    claim = ctx.manifest.claim
    lengths = sorted(claim.tokens) if isinstance(claim, GreedyTokensClaim) else []
    n = p.n_tokens or (lengths[-1] if lengths else 32)
    lengths = [m for m in lengths if m <= n] or [n]
    prompts = seeded_prompts(ctx.reference.vocab_size, p.prompts, p.prompt_len, ctx.seed, ctx.device)

    # the target's own continuation does not depend on the candidate: once per run, shared by controls
    expected = ctx.cache.get(
        ("target-greedy", ctx.reference, prompts, n), lambda: target_greedy(ctx.reference, prompts, n).cpu()
    )

    def run(tokens: int, counted: list[int]) -> Observations:
        out = spec.sample(
            prompts, tokens, temperature=0.0, top_k=None, generator=sampling_generator(ctx.seed, ctx.device)
        )
        return Observations(
            spec.num_draft_tokens, expected[:, :tokens], out.tokens.cpu(), out.produced, out.stats, counted
        )

    short = probe_tokens(spec.num_draft_tokens)
    if ctx.stop_at_first_failure and n > short:
        # a control: a greedy continuation that already differs in its first rounds fails the check
        # whatever follows, so a short run goes first and the full one only if it agrees (the cost of
        # the faults greedy decoding cannot see: benchmarks/spec_controls.md)
        first_rounds = run(short, [m for m in lengths if m <= short] or [short])
        if bool((first_rounds.got != first_rounds.expected).any()):
            return first_rounds
    return run(n, lengths)


def judge(p: SpecGreedyParams, obs: Observations) -> Judgement:
    """The first divergence of each sequence, the matches per length, and the problems (pure)."""
    expected, got, stats = obs.expected, obs.got, obs.stats
    n = int(expected.shape[1])
    differs = got != expected  # [B, n]
    if obs.produced is not None:
        # a continuation that stopped at its EOS token is compared up to it (stop token included):
        # after it neither side gave the user anything (the target's own would have stopped there too)
        differs &= torch.arange(n)[None, :] < torch.tensor(obs.produced)[:, None].clamp(max=n)
    first = [int(row.nonzero()[0]) if bool(row.any()) else None for row in differs]
    diverged = [f for f in first if f is not None]
    by_length = {str(m): int((~differs[:, :m].any(1)).sum()) for m in obs.lengths}
    problems = []
    if diverged:
        row = first.index(min(diverged))
        problems.append(
            f"{len(diverged)}/{p.prompts} greedy continuations differ from the target's own; first at "
            f"token {min(diverged)} of sequence {row} (target {int(expected[row, min(diverged)])}, "
            f"speculative {int(got[row, min(diverged)])})"
        )
    if stats.proposed == 0 or stats.rejections < p.min_rejections:
        problems.append(
            f"exercises nothing: {stats.proposed} drafts proposed, {stats.rejections} rejected "
            f"(acceptance {stats.acceptance_rate:.4f}); verification never had to correct the draft"
        )
    return Judgement(first, by_length, problems, min(diverged) if diverged else None)


def explain(ctx: CheckContext, p: SpecGreedyParams, obs: Observations, j: Judgement) -> Outcome:
    """The Outcome of the judgement, built once: the problems, or the equal continuations."""
    n, stats = int(obs.expected.shape[1]), obs.stats
    metrics: dict[str, Any] = {
        "sequences": p.prompts,
        "n_tokens": n,
        "k": obs.k,
        "matching_sequences": j.by_length[str(n)],
        "acceptance_rate": round(stats.acceptance_rate, 6),
        "tokens_per_target_pass": round(stats.tokens_per_target_pass, 6),
        "rejections": stats.rejections,
    }
    if obs.produced is not None:
        metrics["stopped_at_eos"] = sum(made < n for made in obs.produced)
    evidence = SpecGreedyEvidence(
        matching_by_length=j.by_length,
        first_divergence=j.first,
        efficiency=stats.as_dict(),
        example=TokenPair(target=obs.expected[0].tolist()[:64], candidate=obs.got[0].tolist()[:64]),
    ).dump()
    passed = (
        f"{p.prompts} greedy continuations of {n} tokens equal the target's own (k={obs.k}; {stats.proposed} drafts "
        f"proposed, {stats.accepted} accepted, {stats.rejections} rounds corrected){efficiency_note(stats)}"
    )
    return Outcome(
        "fail" if j.problems else "pass",
        "; ".join(j.problems) if j.problems else passed,
        metrics,
        evidence,
        {**stats.as_dict(), "path": ctx.candidate.name},
        detected_at=j.detected_at,
        observation=obs.got.to(torch.float64),
    )


@check("spec-greedy", params=SpecGreedyParams)
def spec_greedy(ctx: CheckContext, p: SpecGreedyParams) -> Outcome:
    """Greedy speculative continuations equal the target's own, with drafts proposed and some rejected."""
    spec = speculative_candidate(ctx)
    obs = measure(ctx, p, spec)
    return explain(ctx, p, obs, judge(p, obs))
