"""`greedy-parity`: N-token greedy continuations identical on the reference and the candidate.

Each path continues the same prompts by greedy decoding on its own (prefill, then one append per
token). Tokens are compared at aligned absolute positions (prompt length + step); the first
diverging step keeps both paths' logit rows (top-k) as evidence (background: mask oracle; preserve the first
diverging logit row). A divergence where the reference's top-2 margin is within tolerance and
the candidate picked the runner-up is a tie: a warning, not a failure.

For a scheduling change the candidate's prompt goes in under the candidate's own schedule: a
prefill up to its first layout boundary (chunk edge), then multi-token appends cut at every
following boundary and once more inside a chunk, so the continuation depends on chunks that start
mid-cache and cross chunk edges (a single-token loop would never exercise a chunk's mask origin).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

import torch

from gate.checks._compare import DENY_ALLOWANCE, Tolerance, random_tokens, tolerance_for, top_k_rows
from gate.checks._diagnosis import BUG_CLASSES, classify, traced_divergence, traced_reference
from gate.checks._params import GreedyParityParams
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import GreedyEvidence, GreedyRun, ToleranceRecord
from gate.core.manifest import GreedyTokensClaim
from gate.protocols import DecodePath, LayoutBoundaries


def prompt_cuts(path: DecodePath, prompt_len: int) -> list[int]:
    """Where the candidate's prompt is cut into chunks: its layout boundaries inside the prompt
    (chunk edges), plus a cut inside the first and the last chunk so chunks start mid-cache and
    cross edges; without boundaries, thirds of the prompt."""
    bounds = sorted({b for b in (path.layout_boundaries() if isinstance(path, LayoutBoundaries) else ()) if b > 0})
    inside = [b for b in bounds if b < prompt_len]
    cuts = set(inside) | {max(prompt_len // 3, 1), max(2 * prompt_len // 3, 1)}
    if inside:
        cuts |= {max(inside[0] // 2, 1), min(inside[-1] + 3, prompt_len - 1)}
    return sorted(c for c in cuts if 0 < c < prompt_len)


def greedy(
    path: DecodePath,
    prompt: torch.Tensor,
    steps: int,
    cuts: list[int] | None = None,
    until: Callable[[int, torch.Tensor, torch.Tensor], bool] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Greedy continuation: tokens [B, n], the logits that chose them [B, n, V], exercise; n is
    `steps`, or fewer when `until(step, token, logits)` answers True (stop after that step).
    `cuts`: feed the prompt as a prefill up to the first cut, then one append per following chunk."""
    session = path.new_session(prompt.shape[0])
    edges = [0, *(cuts or []), prompt.shape[1]]
    logits = session.prefill(prompt[:, : edges[1]])[:, -1].float().cpu()
    for start, end in itertools.pairwise(edges[1:]):
        logits = session.append(prompt[:, start:end])[:, -1].float().cpu()
    chosen, rows = [], []
    for step in range(steps):
        token = logits.argmax(dim=-1)
        chosen.append(token)
        rows.append(logits)
        if until is not None and until(step, token, logits):
            break
        if step + 1 < steps:
            logits = session.append(token[:, None])[:, -1].float().cpu()
    return torch.stack(chosen, dim=1), torch.stack(rows, dim=1), dict(session.exercise())


@check("greedy-parity", params=GreedyParityParams)
def greedy_parity(ctx: CheckContext, params: GreedyParityParams) -> Outcome:
    """Greedy continuations (default 8 and 64 tokens) identical on both paths."""
    reference, candidate = ctx.reference, ctx.candidate
    claim = ctx.manifest.claim
    lengths = params.tokens or (list(claim.tokens) if isinstance(claim, GreedyTokensClaim) else []) or [8, 64]
    tol = tolerance_for(ctx, params.atol, params.rtol)
    vocab = min(reference.vocab_size, candidate.vocab_size)
    runs: list[dict[str, Any]] = []
    observed: list[torch.Tensor] = []
    exercise: dict[str, Any] = {"prompts": 0, "generated_tokens": 0}
    first_failure: dict[str, Any] | None = None
    ties = 0
    widest = 0.0  # the widest tie band of the reference's rows (the dtype's tolerance)
    chunked = params.chunked_prompt if params.chunked_prompt is not None else ctx.manifest.intervention == "scheduling"
    for prompt_len in params.prompt_lengths:
        steps = min(max(lengths), min(reference.max_len, candidate.max_len) - prompt_len)
        if steps < 1:
            continue
        prompt = random_tokens(vocab, params.batch, prompt_len, ctx.seed * 1000 + prompt_len)
        # the reference continuation does not depend on the candidate: once per run, shared by controls
        ref_tok, ref_logits, _ = ctx.cache.get(
            ("greedy", reference, prompt, steps), partial(greedy, reference, prompt, steps)
        )
        until = _first_real_divergence(ref_tok, ref_logits, tol) if ctx.stop_at_first_failure else None
        cuts = prompt_cuts(candidate, prompt_len) if chunked else None
        cand_tok, cand_logits, cand_ex = greedy(candidate, prompt, steps, cuts, until)
        steps = cand_tok.shape[1]
        ref_tok, ref_logits = ref_tok[:, :steps], ref_logits[:, :steps]
        if cuts:
            cand_ex = {**cand_ex, "prompt_chunks": [b - a for a, b in itertools.pairwise([0, *cuts, prompt_len])]}
        # what the candidate computed on the reference's own tokens: after a row's first divergence (a tie
        # the check forgives, or a failure) its continuation is another sequence, so the reference's rows
        # stand there; a fault that only flips near-ties then moves the observation by no more than the band
        drifted = (ref_tok != cand_tok).cumsum(dim=1) > 0
        drifted = torch.cat([torch.zeros_like(drifted[:, :1]), drifted[:, :-1]], dim=1)
        observed.append(torch.where(drifted[..., None], ref_logits, cand_logits).flatten())
        widest = max(widest, float(tol.row(ref_logits).max())) if ref_logits.numel() else widest
        exercise["prompts"] += params.batch
        exercise["generated_tokens"] += params.batch * steps
        exercise.setdefault("sessions", []).append(cand_ex)
        differ = ref_tok != cand_tok  # [B, steps]
        run: dict[str, Any] = {
            "prompt_len": prompt_len,
            "steps": steps,
            "match": {str(n): bool(not differ[:, : min(n, steps)].any()) for n in lengths},
        }
        divergences: list[dict[str, Any]] = []
        for row in range(params.batch):
            if not bool(differ[row].any()):
                continue
            step = int(differ[row].nonzero()[0])
            ref_row, cand_row = ref_logits[row, step], cand_logits[row, step]
            # the reference's preference for its own token over the candidate's
            margin = float(ref_row.max() - ref_row[int(cand_tok[row, step])])
            band = float(tol.row(ref_row))
            divergences.append(
                {
                    "step": step,
                    "row": row,
                    "absolute_position": prompt_len + step,
                    "reference_token": int(ref_tok[row, step]),
                    "candidate_token": int(cand_tok[row, step]),
                    "reference_margin": margin,
                    "tie_band": band,
                    "tie": margin <= band,
                    "max_abs_delta": float((ref_row - cand_row).abs().max()),
                    "reference_top_k": top_k_rows(ref_row[None], params.top_k)[0],
                    "candidate_top_k": top_k_rows(cand_row[None], params.top_k)[0],
                    # both continuations around the divergence, for the dossier's token-by-token view
                    "tokens_from": (lo := max(0, step - 16)),
                    "reference_tokens": ref_tok[row, lo : step + 32].tolist(),
                    "candidate_tokens": cand_tok[row, lo : step + 32].tolist(),
                }
            )
        if divergences:
            # the earliest real (non-tie) divergence is the evidence; ties are reported beside it
            real = sorted((d for d in divergences if not d["tie"]), key=lambda d: d["step"])
            run["first_divergence"] = real[0] if real else min(divergences, key=lambda d: d["step"])
            run["tied_rows"] = sum(d["tie"] for d in divergences)
            ties += run["tied_rows"]
            if real and first_failure is None:
                first_failure = {
                    **real[0],
                    "prompt_len": prompt_len,
                    "tokens": torch.cat([prompt, ref_tok], dim=1),
                    "cuts": [*(cuts or []), prompt_len],  # the candidate's calls, for the tracer's chunk replay
                }
        runs.append(run)
        if first_failure is not None and ctx.stop_at_first_failure:
            break  # a control needs one failure; the positive run covers every prompt batch

    metrics = {
        "lengths": lengths,
        "prompt_lengths": params.prompt_lengths,
        "batch": params.batch,
        "runs": len(runs),
        "ties": ties,
        "diverged_runs": sum("first_divergence" in r for r in runs),
    }
    evidence = GreedyEvidence(runs=[GreedyRun(**r) for r in runs], tolerance=ToleranceRecord(**tol.as_dict())).dump()
    observation = torch.cat(observed) if observed else None
    if first_failure is not None:
        diagnosis = _diagnose(ctx, first_failure)
        pos = first_failure["absolute_position"]
        return Outcome(
            status="fail",
            message=f"greedy tokens diverge at step {first_failure['step']} (absolute position "
            f"{pos}, prompt {first_failure['prompt_len']}): reference {first_failure['reference_token']}, "
            f"candidate {first_failure['candidate_token']}, margin {first_failure['reference_margin']:.3g} "
            f"({diagnosis['bug_class']})",
            metrics=metrics,
            evidence=evidence,
            exercise=exercise,
            diagnosis=diagnosis,
            detected_at=pos,
            observation=observation,
        )
    status: Literal["pass", "warn"] = "warn" if ties else "pass"
    message = (
        f"greedy continuations of {', '.join(map(str, lengths))} tokens identical for "
        f"{len(runs)} prompt batch(es)" + (f"; {ties} divergence(s) at ties" if ties else "")
    )
    return Outcome(
        status=status,
        message=message,
        metrics=metrics,
        evidence=evidence,
        exercise=exercise,
        observation=observation,
        # as prefix-sweep under a claim that bounds the logits: the deny allowance x the dtype's band
        tolerated_change=DENY_ALLOWANCE * widest if observed else None,
    )


def _first_real_divergence(
    ref_tok: torch.Tensor, ref_logits: torch.Tensor, tol: Tolerance
) -> Callable[[int, torch.Tensor, torch.Tensor], bool]:
    """For a control: stop the candidate's continuation at the first step where a row that has
    not diverged before picks another token than the reference, outside the tie band."""
    diverged = torch.zeros(ref_tok.shape[0], dtype=torch.bool)

    def until(step: int, token: torch.Tensor, _logits: torch.Tensor) -> bool:
        new = (token != ref_tok[:, step]) & ~diverged
        real = False
        for row in new.nonzero().flatten().tolist():
            ref_row = ref_logits[row, step]
            margin = float(ref_row.max() - ref_row[int(token[row])])
            real = real or margin > float(tol.row(ref_row))
        diverged.logical_or_(new)
        return real

    return until


def _diagnose(ctx: CheckContext, failure: dict[str, Any]) -> dict[str, Any]:
    """Trace the layer states at the position whose logits chose the diverging token."""
    prefix_len = max(failure["absolute_position"] - 1, 0)
    error: str | None = None
    layers: dict[str, Any] | None = None
    traced, seen = traced_reference(ctx.reference)
    try:
        if traced is not None:
            cuts = [c for c in failure["cuts"] if c <= prefix_len]
            layers = traced_divergence(traced, ctx.candidate, failure["tokens"], prefix_len, ctx.dtype, cuts)
    except Exception as err:
        layers, error = None, f"{err.__class__.__name__}: {err}"
    replayed = layers.get("replayed_chunk") if layers else None
    bug_class = classify({"profile": "chunk-step" if replayed else "single-position"}, layers)
    out: dict[str, Any] = {
        "bug_class": bug_class,
        "explanation": BUG_CLASSES[bug_class],
        "first_diverging_step": failure["step"],
        "absolute_position": failure["absolute_position"],
        **({"layer_trace": seen} if seen else {}),
    }
    if layers is not None:
        out.update(
            first_diverging_layer=layers["first_diverging_layer"],
            component=layers["component"],
            traced_prefix_len=layers["prefix_len"],
            layers=layers["layers"],
            **({"replayed_chunk": replayed} if replayed else {}),
        )
    if error:
        out["tracing_error"] = error
    return out
