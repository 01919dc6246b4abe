"""greedy-parity's body: measure both paths' greedy continuations, judge the divergences, explain."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from gate.checks._compare import DENY_ALLOWANCE, Tolerance, random_tokens, tolerance_for, top_k_rows
from gate.checks._diagnosis import BUG_CLASSES, classify, traced_divergence, traced_reference
from gate.checks._diagnosis.layers import layer_fields
from gate.checks.greedy_parity import GreedyParityParams
from gate.checks.greedy_parity.evidence import GreedyEvidence, GreedyRun
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import ToleranceRecord
from gate.core.manifest import GreedyTokensClaim
from gate.protocols import DecodePath, LayoutBoundaries, offered


def prompt_cuts(path: DecodePath, prompt_len: int) -> list[int]:
    """Where the candidate's prompt is cut into chunks: its layout boundaries inside the prompt
    (chunk edges), plus a cut inside the first and the last chunk so chunks start mid-cache and
    cross edges; without boundaries, thirds of the prompt."""
    layout = offered(path, LayoutBoundaries)
    bounds = sorted({b for b in (layout.layout_boundaries() if layout is not None else ()) if b > 0})
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


@dataclass(frozen=True)
class Run:
    """One prompt batch continued on both paths (the reference's cut to the candidate's steps)."""

    prompt_len: int
    prompt: torch.Tensor
    cuts: list[int] | None
    """Where the candidate's prompt was cut into chunks (None: one prefill)."""
    ref_tok: torch.Tensor
    ref_logits: torch.Tensor
    cand_tok: torch.Tensor
    cand_logits: torch.Tensor
    session: dict[str, Any]

    @property
    def steps(self) -> int:
        return int(self.cand_tok.shape[1])


@dataclass(frozen=True)
class Observations:
    """The continuation lengths and every prompt batch run (a control stops after a real divergence)."""

    lengths: list[int]
    runs: list[Run]


@dataclass(frozen=True)
class Judgement:
    """Each run's GreedyRun record, the tied rows, the first real divergence and the widest tie band."""

    runs: list[dict[str, Any]]
    ties: int
    first_failure: dict[str, Any] | None
    widest: float


def _run(ctx: CheckContext, params: GreedyParityParams, prompt_len: int, steps: int, tol: Tolerance) -> Run:
    """One prompt batch: the reference's continuation (once per run, shared by controls), then the
    candidate's under its own schedule (a control's stopped at its first real divergence)."""
    reference, candidate = ctx.reference, ctx.candidate
    vocab = min(reference.vocab_size, candidate.vocab_size)
    prompt = random_tokens(vocab, params.batch, prompt_len, ctx.seed * 1000 + prompt_len)
    ref_tok, ref_logits, _ = ctx.cache.get(
        ("greedy", reference, prompt, steps), partial(greedy, reference, prompt, steps)
    )
    until = _first_real_divergence(ref_tok, ref_logits, tol) if ctx.stop_at_first_failure else None
    chunked = params.chunked_prompt if params.chunked_prompt is not None else ctx.manifest.intervention == "scheduling"
    cuts = prompt_cuts(candidate, prompt_len) if chunked else None
    cand_tok, cand_logits, session = greedy(candidate, prompt, steps, cuts, until)
    if cuts:
        session = {**session, "prompt_chunks": [b - a for a, b in itertools.pairwise([0, *cuts, prompt_len])]}
    done = cand_tok.shape[1]
    return Run(prompt_len, prompt, cuts, ref_tok[:, :done], ref_logits[:, :done], cand_tok, cand_logits, session)


def measure(ctx: CheckContext, params: GreedyParityParams, lengths: list[int], tol: Tolerance) -> Observations:
    """Both paths' continuations of every prompt batch (a control stops after a real divergence)."""
    runs: list[Run] = []
    for prompt_len in params.prompt_lengths:
        steps = min(max(lengths), min(ctx.reference.max_len, ctx.candidate.max_len) - prompt_len)
        if steps < 1:
            continue
        runs.append(_run(ctx, params, prompt_len, steps, tol))
        if ctx.stop_at_first_failure and any(not d["tie"] for d in _divergences(runs[-1], tol, params.top_k)):
            break
    return Observations(lengths, runs)


def _margin(ref_row: torch.Tensor, token: int) -> float:
    """The reference's preference for its own token over `token`."""
    return float(ref_row.max() - ref_row[token])


def _divergences(run: Run, tol: Tolerance, top_k: int) -> list[dict[str, Any]]:
    """Each row's first diverging step (pure): both tokens, the reference's margin and tie band,
    both logit rows' top-k and both continuations around it."""
    differ = run.ref_tok != run.cand_tok  # [B, steps]
    out: list[dict[str, Any]] = []
    for row in range(differ.shape[0]):
        if not bool(differ[row].any()):
            continue
        step = int(differ[row].nonzero()[0])
        ref_row, cand_row = run.ref_logits[row, step], run.cand_logits[row, step]
        margin, band = _margin(ref_row, int(run.cand_tok[row, step])), float(tol.row(ref_row))
        lo = max(0, step - 16)
        out.append(
            {
                "step": step,
                "row": row,
                "absolute_position": run.prompt_len + step,
                "reference_token": int(run.ref_tok[row, step]),
                "candidate_token": int(run.cand_tok[row, step]),
                "reference_margin": margin,
                "tie_band": band,
                "tie": margin <= band,
                "max_abs_delta": float((ref_row - cand_row).abs().max()),
                "reference_top_k": top_k_rows(ref_row[None], top_k)[0],
                "candidate_top_k": top_k_rows(cand_row[None], top_k)[0],
                # both continuations around the divergence, for the dossier's token-by-token view
                "tokens_from": lo,
                "reference_tokens": run.ref_tok[row, lo : step + 32].tolist(),
                "candidate_tokens": run.cand_tok[row, lo : step + 32].tolist(),
            }
        )
    return out


def judge(obs: Observations, tol: Tolerance, top_k: int) -> Judgement:
    """The earliest real (non-tie) divergence of the first run that has one is the failure (pure)."""
    records: list[dict[str, Any]] = []
    ties, first_failure, widest = 0, None, 0.0
    for run in obs.runs:
        differ = run.ref_tok != run.cand_tok
        record: dict[str, Any] = {
            "prompt_len": run.prompt_len,
            "steps": run.steps,
            "match": {str(n): bool(not differ[:, : min(n, run.steps)].any()) for n in obs.lengths},
        }
        if run.ref_logits.numel():
            widest = max(widest, float(tol.row(run.ref_logits).max()))
        divergences = _divergences(run, tol, top_k)
        if divergences:
            # the earliest real (non-tie) divergence is the evidence; ties are reported beside it
            real = sorted((d for d in divergences if not d["tie"]), key=lambda d: d["step"])
            record["first_divergence"] = real[0] if real else min(divergences, key=lambda d: d["step"])
            record["tied_rows"] = sum(d["tie"] for d in divergences)
            ties += record["tied_rows"]
            if real and first_failure is None:
                first_failure = {
                    **real[0],
                    "prompt_len": run.prompt_len,
                    "tokens": torch.cat([run.prompt, run.ref_tok], dim=1),
                    "cuts": [*(run.cuts or []), run.prompt_len],  # the candidate's calls, for the tracer's chunk replay
                }
        records.append(record)
    return Judgement(records, ties, first_failure, widest)


def _observed(run: Run) -> torch.Tensor:
    """What the candidate computed on the reference's own tokens: after a row's first divergence its
    continuation is another sequence, so the reference's rows stand there."""
    drifted = (run.ref_tok != run.cand_tok).cumsum(dim=1) > 0
    drifted = torch.cat([torch.zeros_like(drifted[:, :1]), drifted[:, :-1]], dim=1)
    return torch.where(drifted[..., None], run.ref_logits, run.cand_logits).flatten()


def explain(
    params: GreedyParityParams, tol: Tolerance, obs: Observations, j: Judgement, diagnosis: dict[str, Any] | None
) -> Outcome:
    """The first real divergence, else a pass (a warning when rows diverged at ties)."""
    lengths, runs = obs.lengths, j.runs
    seen: dict[str, Any] = {
        "metrics": {
            "lengths": lengths,
            "prompt_lengths": params.prompt_lengths,
            "batch": params.batch,
            "runs": len(runs),
            "ties": j.ties,
            "diverged_runs": sum("first_divergence" in r for r in runs),
        },
        "evidence": GreedyEvidence(
            runs=[GreedyRun(**r) for r in runs], tolerance=ToleranceRecord(**tol.as_dict())
        ).dump(),
        "exercise": {
            "prompts": params.batch * len(obs.runs),
            "generated_tokens": params.batch * sum(run.steps for run in obs.runs),
            **({"sessions": [run.session for run in obs.runs]} if obs.runs else {}),
        },
        "observation": torch.cat([_observed(run) for run in obs.runs]) if obs.runs else None,
    }
    failure = j.first_failure
    if failure is not None and diagnosis is not None:
        return Outcome(
            status="fail",
            message=f"greedy tokens diverge at step {failure['step']} (absolute position "
            f"{failure['absolute_position']}, prompt {failure['prompt_len']}): reference {failure['reference_token']}, "
            f"candidate {failure['candidate_token']}, margin {failure['reference_margin']:.3g} "
            f"({diagnosis['bug_class']})",
            diagnosis=diagnosis,
            detected_at=failure["absolute_position"],
            **seen,
        )
    return Outcome(
        status="warn" if j.ties else "pass",
        message=f"greedy continuations of {', '.join(map(str, lengths))} tokens identical for "
        f"{len(runs)} prompt batch(es)" + (f"; {j.ties} divergence(s) at ties" if j.ties else ""),
        # as prefix-sweep under a claim that bounds the logits: the deny allowance x the dtype's band
        tolerated_change=DENY_ALLOWANCE * j.widest if obs.runs else None,
        **seen,
    )


@check("greedy-parity", params=GreedyParityParams)
def greedy_parity(ctx: CheckContext, params: GreedyParityParams) -> Outcome:
    """Greedy continuations (default 8 and 64 tokens) identical on both paths."""
    tol = tolerance_for(ctx, params.atol, params.rtol)
    claim = ctx.manifest.claim
    lengths = params.tokens or (list(claim.tokens) if isinstance(claim, GreedyTokensClaim) else []) or [8, 64]
    obs = measure(ctx, params, lengths, tol)
    j = judge(obs, tol, params.top_k)
    diagnosis = _diagnose(ctx, j.first_failure) if j.first_failure is not None else None
    return explain(params, tol, obs, j, diagnosis)


def _first_real_divergence(
    ref_tok: torch.Tensor, ref_logits: torch.Tensor, tol: Tolerance
) -> Callable[[int, torch.Tensor, torch.Tensor], bool]:
    """For a control: stop the candidate's continuation at the first step where a row that has
    not diverged before picks another token than the reference, outside the tie band."""
    diverged = torch.zeros(ref_tok.shape[0], dtype=torch.bool)

    def until(step: int, token: torch.Tensor, _logits: torch.Tensor) -> bool:
        new = (token != ref_tok[:, step]) & ~diverged
        diverged.logical_or_(new)
        rows = [ref_logits[row, step] for row in new.nonzero().flatten().tolist()]
        return any(_margin(r, int(t)) > float(tol.row(r)) for r, t in zip(rows, token[new], strict=True))

    return until


def _diagnose(ctx: CheckContext, failure: dict[str, Any]) -> dict[str, Any]:
    """Trace the layer states at the position whose logits chose the diverging token (both paths again)."""
    prefix_len = max(failure["absolute_position"] - 1, 0)
    error, layers = None, None
    traced, seen = traced_reference(ctx.reference)
    try:
        if traced is not None:
            cuts = [c for c in failure["cuts"] if c <= prefix_len]
            layers = traced_divergence(traced, ctx.candidate, failure["tokens"], prefix_len, ctx.dtype, cuts)
    except Exception as err:
        error = f"{err.__class__.__name__}: {err}"
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
        out.update(layer_fields(layers), **({"replayed_chunk": replayed} if replayed else {}))
    if error:
        out["tracing_error"] = error
    return out
