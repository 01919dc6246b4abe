"""phase-performance: what an approximation saves, measured side by side (release-gate step 6).

An approximate cache is justified by what it saves. For the reference and candidate paths on the
same prompts this measures time to prefill, time per decoded token and live cache bytes, and
their candidate/reference ratios. Runs alternate (reference, candidate, reference, ...) so a busy
machine slows both alike; each headline figure is the fastest of `repeats` runs (a shared machine
only ever adds time, so the minimum is the steadiest estimate of a path's own cost), with the
median and every run kept in the evidence. Fewer operations are a
mechanism, not a wall-clock guarantee (background: the release gate): the check reports what it measured, and says
`warn` when the candidate saves nothing it set out to save. The policy runs it at severity warn.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from gate.checks._params import PhasePerformanceParams
from gate.core.check import CheckContext, Outcome, check
from gate.protocols import DecodePath


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@torch.no_grad()
def _run(path: DecodePath, prompts: torch.Tensor, n: int, device: str) -> dict[str, Any]:
    """Prefill, then decode n tokens greedily; times and the session's exercise record."""
    session = path.new_session(prompts.shape[0])
    _sync(device)
    start = time.perf_counter()
    logits = session.prefill(prompts)
    _sync(device)
    prefill_s = time.perf_counter() - start
    token = logits[:, -1].argmax(-1, keepdim=True)
    start = time.perf_counter()
    for _ in range(n):
        token = session.append(token)[:, -1].argmax(-1, keepdim=True)
    _sync(device)
    decode_s = time.perf_counter() - start
    return {"prefill_s": prefill_s, "decode_s_per_token": decode_s / n, "exercise": session.exercise()}


def _ratio(a: float | int | None, b: float | int | None) -> float | None:
    if a is None or b is None or not b:
        return None
    return round(float(a) / float(b), 4)


@check("phase-performance", params=PhasePerformanceParams)
def phase_performance(ctx: CheckContext, params: PhasePerformanceParams) -> Outcome:
    """Prefill time, per-token decode time and live cache bytes, reference vs candidate."""
    max_len = min(ctx.reference.max_len, ctx.candidate.max_len)
    n = min(params.decode_tokens, max_len // 2)
    length = min(params.prompt_len, max_len - n)
    vocab = min(ctx.reference.vocab_size, ctx.candidate.vocab_size)
    gen = torch.Generator().manual_seed(ctx.seed)
    prompts = torch.randint(0, vocab, (params.batch_size, length), generator=gen).to(ctx.device)
    paths = {"reference": ctx.reference, "candidate": ctx.candidate}
    runs: dict[str, list[dict[str, Any]]] = {"reference": [], "candidate": []}
    for path in paths.values():  # warm-up: allocator, kernels, lazy imports
        _run(path, prompts, min(n, 2), ctx.device)
    for i in range(params.repeats):
        order = ("reference", "candidate") if i % 2 == 0 else ("candidate", "reference")
        for role in order:
            runs[role].append(_run(paths[role], prompts, n, ctx.device))
    table: dict[str, dict[str, Any]] = {}
    for role, rs in runs.items():
        ex = rs[-1]["exercise"]
        table[role] = {
            "path": paths[role].name,
            "prefill_s": min(r["prefill_s"] for r in rs),
            "decode_s_per_token": min(r["decode_s_per_token"] for r in rs),
            "prefill_s_median": statistics.median(r["prefill_s"] for r in rs),
            "decode_s_per_token_median": statistics.median(r["decode_s_per_token"] for r in rs),
            "cache_bytes": ex.get("cache_bytes"),
            "cache_len": ex.get("cache_len"),
            "runs_prefill_s": [round(r["prefill_s"], 6) for r in rs],
            "runs_decode_s_per_token": [round(r["decode_s_per_token"], 6) for r in rs],
        }
    ref, cand = table["reference"], table["candidate"]
    ratios = {
        "prefill": _ratio(cand["prefill_s"], ref["prefill_s"]),
        "decode_per_token": _ratio(cand["decode_s_per_token"], ref["decode_s_per_token"]),
        "cache_bytes": _ratio(cand["cache_bytes"], ref["cache_bytes"]),
    }
    metrics = {
        "prefill_ratio": ratios["prefill"],
        "decode_ratio": ratios["decode_per_token"],
        "bytes_ratio": ratios["cache_bytes"],
        "prompt_len": length,
        "decode_tokens": n,
        "candidate_cache_bytes": cand["cache_bytes"],
        "reference_cache_bytes": ref["cache_bytes"],
    }
    evidence = {
        "table": table,
        "ratios": ratios,
        "prompt_len": length,
        "decode_tokens": n,
        "batch_size": params.batch_size,
        "repeats": params.repeats,
        "device": ctx.device,
    }
    exercise = dict(runs["candidate"][-1]["exercise"])
    problems = []
    if params.max_decode_ratio is not None and (ratios["decode_per_token"] or 0) > params.max_decode_ratio:
        problems.append(f"decode ratio {ratios['decode_per_token']} > {params.max_decode_ratio}")
    if params.max_bytes_ratio is not None and (ratios["cache_bytes"] or 0) > params.max_bytes_ratio:
        problems.append(f"bytes ratio {ratios['cache_bytes']} > {params.max_bytes_ratio}")
    saves_bytes = ratios["cache_bytes"] is not None and ratios["cache_bytes"] < 1
    saves_time = (ratios["decode_per_token"] or 1) < 1 or (ratios["prefill"] or 1) < 1
    summary = (
        f"candidate/reference: prefill x{ratios['prefill']}, decode x{ratios['decode_per_token']}/token, "
        f"live cache bytes x{ratios['cache_bytes']} ({cand['cache_bytes']} vs {ref['cache_bytes']}) "
        f"at {length} prompt + {n} decoded tokens"
    )
    if problems:
        return Outcome("fail", f"{'; '.join(problems)}; {summary}", metrics, evidence, exercise)
    if not (saves_bytes or saves_time):
        return Outcome(
            "warn", f"the candidate saves neither memory nor time here: {summary}", metrics, evidence, exercise
        )
    return Outcome("pass", summary, metrics, evidence, exercise)
