"""greedy-parity under a scheduling change runs the candidate's own schedule: the prompt goes in as a
prefill up to the first layout edge, then multi-token appends cut at every later edge and once
inside a chunk, so chunks start mid-cache and cross edges. A chunked-prefill mask bug (a chunk
appended after cached tokens masked as if it started at position 0) shows only there: a prefill at
position 0 and one-token appends are blind to it."""

from __future__ import annotations

import copy
from dataclasses import replace

import torch

from gate.checks.greedy_parity import GreedyParityParams, greedy_parity, prompt_cuts
from gate.core.check import CheckContext
from gate.models.reference import causal_mask
from tests.support.reference import manifest, path

PARAMS = GreedyParityParams(prompt_lengths=[40], tokens=[8, 16])


def scheduling_ctx(candidate: object) -> CheckContext:
    return CheckContext(
        manifest=manifest({"level": "greedy-tokens", "tokens": [8, 16]}, intervention="scheduling"),
        reference=path("full"),
        candidate=candidate,  # type: ignore[arg-type]
        seed=0,
        device="cpu",
        dtype="float32",
    )


def chunk_mask_bug(q_len: int, k_len: int, window: int | None, device: torch.device) -> torch.Tensor:
    """Right for one query (decode) and for a chunk at position 0; a multi-token chunk after cached
    tokens gets the mask of a chunk at position 0 (its origin reset)."""
    if q_len > 1 and k_len > q_len:
        return ~torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril()
    return causal_mask(q_len, k_len, window, device)


def with_chunk_mask_bug(kind: str) -> object:
    clean = path(kind)
    model = copy.deepcopy(clean.model)
    for block in model.blocks:
        block.attention.core.mask_fn = chunk_mask_bug
    return replace(clean, name=f"{clean.name}+chunk-mask-bug", model=model)


def test_the_prompt_is_cut_at_every_edge_and_inside_a_chunk() -> None:
    chunked = path("chunked", chunk_size=16)
    assert prompt_cuts(chunked, 40) == [8, 13, 16, 26, 32, 35]
    out = greedy_parity(scheduling_ctx(chunked), PARAMS)
    assert out.status == "pass", out.message
    (session,) = out.exercise["sessions"]
    # prefill of 8, then appends of 5, 3, 10, 6, 3 and 5 tokens: multi-token, mid-cache, across edges 16 and 32
    assert session["prompt_chunks"] == [8, 5, 3, 10, 6, 3, 5]
    assert session["cached_steps"] > len(session["prompt_chunks"])


def test_a_chunked_prefill_mask_bug_fails_only_under_the_candidates_schedule() -> None:
    buggy = with_chunk_mask_bug("dynamic")
    scheduled = greedy_parity(scheduling_ctx(buggy), PARAMS)
    assert scheduled.status == "fail", scheduled.message
    assert scheduled.exercise["sessions"][0]["prompt_chunks"][0] == 8
    # the same check without the schedule (one prefill at position 0, then one token at a time) is blind
    one_token = greedy_parity(scheduling_ctx(buggy), PARAMS.model_copy(update={"chunked_prompt": False}))
    assert one_token.status == "pass", one_token.message
