"""A whole third-party gate check in one file: the candidate path never produces NaN or inf logits."""

from __future__ import annotations

import torch

from gate.plugin import CheckContext, Outcome, Params, check


class FiniteParams(Params):
    prompt_len: int = 32
    """Tokens per prompt."""
    append: int = 4
    """Tokens appended one at a time after the prompt."""


@check("finite-logits", params=FiniteParams)
def finite_logits(ctx: CheckContext, params: FiniteParams) -> Outcome:
    """Prefill and append through the candidate's cache; every logit must be finite."""
    gen = torch.Generator().manual_seed(ctx.seed)
    length = min(params.prompt_len + params.append, ctx.candidate.max_len)
    tokens = torch.randint(0, ctx.candidate.vocab_size, (2, length), generator=gen)
    session = ctx.candidate.new_session(batch_size=2)
    split = length - params.append
    rows = [session.prefill(tokens[:, :split])[:, -1]]
    rows += [session.append(tokens[:, i : i + 1])[:, -1] for i in range(split, length)]
    logits = torch.stack(rows, dim=1)
    bad = int((~torch.isfinite(logits)).sum())
    status = "pass" if bad == 0 else "fail"
    return Outcome(
        status=status,
        message=f"{bad} non-finite logits in {logits.numel()}",
        metrics={"non_finite": bad},
        exercise=session.exercise(),
        observation=logits,
    )
