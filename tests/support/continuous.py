"""One schedule through a continuously batched session (gate.protocols.ContinuousSession) that
mixes prefill and decode in every forward and reuses a slot, for the reference and hf tests."""

from __future__ import annotations

from typing import Any

import torch


def join_decode_leave(session: Any, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> dict[int, torch.Tensor]:
    """Request a prefills all but its last 5 tokens; b joins with 5 tokens beside a's decode step; a
    feeds a 4-token chunk beside b's decode step; a leaves and c joins its slot with its whole prompt
    beside b's remaining tokens. Per request (0: a, 1: b, 2: c), its logits over the tokens fed."""
    first = session.join()
    rows = {first: [session.step({first: a[:-5]})[first]]}
    second = session.join()
    out = session.step({first: a[-5:-4], second: b[:5]})  # a decode step beside a prefill
    rows[first].append(out[first])
    rows[second] = [out[second]]
    out = session.step({first: a[-4:], second: b[5:6]})  # a prefill chunk beside a decode step
    rows[first].append(out[first])
    rows[second].append(out[second])
    session.leave(first)
    third = session.join()  # the slot `first` left
    out = session.step({third: c, second: b[6:]})
    rows[third] = [out[third]]
    rows[second].append(out[second])
    return {0: torch.cat(rows[first]), 1: torch.cat(rows[second]), 2: torch.cat(rows[third])}


def assert_matches_full_pass(reference: Any, session: Any, lengths: tuple[int, int, int], seed: int) -> None:
    """Seeded prompts of `lengths` through `join_decode_leave`: every request's logits equal the
    reference's full pass over its tokens."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, 256, (n,), generator=g) for n in lengths]
    got = join_decode_leave(session, *prompts)
    for request, tokens in enumerate(prompts):
        want = reference.full_logits(tokens[None, : got[request].shape[0]])[0]
        assert torch.allclose(got[request], want, atol=1e-4, rtol=1e-4), request
