"""quality-slices' body: score every slice's samples, judge each envelope on its one-sided bound, explain."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gate.checks.quality_slices import QualitySlicesParams
from gate.checks.quality_slices.evidence import JudgedEnvelope, SlicesEvidence
from gate.checks.quality_slices.slice_run import SliceRun, judge_envelope, prior_samples, second_stage
from gate.core.check import CheckContext, Outcome, check
from gate.core.manifest import BoundedDegradationClaim, Envelope
from gate.quality.evidence import METRICS, Metric, breakdowns, slice_samples, worst_samples
from gate.quality.scoring import Clock, SessionPool
from gate.quality.spec import load_slice
from gate.quality.text import TextSpace
from gate.quality.vocab import TokenSpace, render


def _space(ctx: CheckContext, params: QualitySlicesParams) -> tuple[TokenSpace | TextSpace, Any]:
    """The slice space for the reference path and a function rendering token ids for evidence."""
    ref = ctx.reference
    max_len = min(ref.max_len, ctx.candidate.max_len)
    tokenizer = getattr(ref, "tokenizer", None)
    if params.space == "text" or (params.space == "auto" and tokenizer is not None):
        if tokenizer is None:
            raise ValueError(f"space: text, but path {ref.name} exposes no tokenizer")
        vocab = sorted(tokenizer.get_vocab().items())
        ident = f"{getattr(tokenizer, 'name_or_path', '')}:{hashlib.sha256(repr(vocab).encode()).hexdigest()}"
        bos = getattr(tokenizer, "bos_token_id", None)

        def encode(text: str) -> list[int]:
            return list(tokenizer(text, add_special_tokens=False)["input_ids"])

        space: TokenSpace | TextSpace = TextSpace(encode, max_len, ident, () if bos is None else (int(bos),))
        return space, lambda ids: tokenizer.decode(list(ids))
    return TokenSpace(min(ref.vocab_size, ctx.candidate.vocab_size), max_len), render


@dataclass(frozen=True)
class Observations:
    """Every slice scored, the envelopes on them, and the work it took."""

    envelopes: list[Envelope]
    """The envelopes to judge: the claim's, or a control's on the slices it scored."""
    runs: dict[str, SliceRun]
    show: Any
    clock: Clock
    started: float
    """perf_counter() when scoring began."""
    seed: int
    """The seed the slices were built from (and the bootstrap draws from)."""
    pool: SessionPool


@dataclass(frozen=True)
class Verdict:
    """Each envelope judged on its bound, with its worst samples, and the first failing context."""

    table: list[dict[str, Any]]
    detected_at: int | None
    """The shortest context of a flipped sample on a violated envelope."""

    @property
    def held(self) -> list[str]:
        return [f"{e['slice']}/{e['metric']}" for e in self.table if e["passed"]]

    @property
    def broken(self) -> list[str]:
        return [f"{e['slice']}/{e['metric']}" for e in self.table if not e["passed"]]


def measure(ctx: CheckContext, params: QualitySlicesParams, envelopes: list[Envelope]) -> Observations:
    """Build and score every slice the envelopes (and extra_slices) name, sized for their power."""
    started = time.perf_counter()
    root = Path(params.evals_dir) if params.evals_dir else None
    names = list(dict.fromkeys([e.slice for e in envelopes] + params.extra_slices))
    specs = {name: load_slice(name, root) for name in names}
    for env in envelopes:
        if env.metric not in METRICS:
            raise ValueError(f"envelope on {env.slice}: unknown metric {env.metric!r} (known: {', '.join(METRICS)})")
        if env.slice not in specs:
            raise ValueError(f"envelope names unknown slice {env.slice!r}")
    space, show = _space(ctx, params)
    seed = ctx.seed if params.dataset_seed is None else params.dataset_seed
    clock = Clock()
    pool = SessionPool(ctx.candidate)  # the candidate's sessions are reset and reused, as served
    runs: dict[str, SliceRun] = {}
    for name, spec in specs.items():
        mine = [e for e in envelopes if e.slice == name]
        cap = params.max_samples or spec.max_samples
        run = runs[name] = SliceRun(spec, space, seed, pool)
        n = params.samples or min(cap, prior_samples(spec, mine, params.min_samples))
        ctx.log(f"  slice {name}: {n} samples, k={spec.continuation}")
        run.extend_to(n, ctx, params, clock, mine)
        if params.samples is None:
            second_stage(run, mine, cap, ctx, params, clock, seed)
        if ctx.stop_at_first_failure and any(not judge_envelope(e, run, params, seed).passed for e in mine):
            # a control: one violated envelope proves power; the slices after it are not scored
            envelopes = [e for e in envelopes if e.slice in runs]
            break
    return Observations(envelopes, runs, show, clock, started, seed, pool)


def judge(params: QualitySlicesParams, obs: Observations) -> Verdict:
    """Every envelope on its one-sided bound, with its worst samples (pure)."""
    table: list[dict[str, Any]] = []
    failed_samples_at: list[int] = []
    for env in obs.envelopes:
        run = obs.runs[env.slice]
        metric: Metric = METRICS[env.metric]
        verdict = judge_envelope(env, run, params, obs.seed)
        rows = run.built.dataset if run.built else []
        entry = {
            "slice": env.slice,
            "metric": env.metric,
            "comparator": env.comparator.value,
            "threshold": env.threshold,
            "confidence": env.confidence,
            "min_detectable_effect": env.min_detectable_effect,
            "power": env.power,
            **verdict.model_dump(),
            "worst": worst_samples(rows, run.scores, metric, env.comparator.value, params.worst, obs.show),
        }
        table.append(entry)
        if not verdict.passed:
            failed_samples_at += [int(rows[i]["context_len"]) for i, m in enumerate(run.scores.greedy_match) if not m]
    return Verdict(table, min(failed_samples_at) if failed_samples_at else None)


def _slices(runs: dict[str, SliceRun]) -> dict[str, Any]:
    """Per slice scored: its size, continuation, dependency, fingerprint and breakdowns."""
    return {
        name: {
            "n": r.n,
            "k": r.spec.continuation,
            "dependency": r.spec.dependency,
            "fingerprint": r.built.fingerprint if r.built else None,
            **breakdowns(r.built.dataset, r.scores),
        }
        for name, r in runs.items()
        if r.built
    }


def _timing(obs: Observations, wall: float) -> dict[str, Any]:
    total, clock = sum(r.n for r in obs.runs.values()), obs.clock
    return {
        "wall_s": round(wall, 3),
        "forward_s": round(clock.forward_s, 3),
        "model_calls": clock.calls,
        "samples": total,
        "samples_per_s": round(total / wall, 3) if wall else None,
        "outside_forward_share": round(1 - clock.forward_s / wall, 4) if wall else None,
    }


def _exercise(obs: Observations) -> dict[str, Any]:
    """Samples scored, sessions reused and fresh, and each slice's candidate exercise (numbers: the most)."""
    exercise: dict[str, Any] = {
        "samples_scored": sum(r.n for r in obs.runs.values()),
        "slices": list(obs.runs),
        # requests on a session reset after an earlier one, and on a new one (docs/test-power.md)
        "reused_session_requests": obs.pool.reused,
        "fresh_session_requests": obs.pool.fresh,
    }
    for r in obs.runs.values():
        for key, value in r.exercise.items():
            exercise.setdefault(key, value)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                exercise[key] = max(exercise[key], value)
    return exercise


def _metrics(v: Verdict, timing: dict[str, Any]) -> dict[str, Any]:
    return {
        "envelopes": len(v.table),
        "envelopes_held": len(v.held),
        **{key: timing[key] for key in ("samples", "samples_per_s", "outside_forward_share")},
        **{f"{e['slice']}.{e['metric']}.bound": round(e["bound"], 6) for e in v.table},
    }


def explain(params: QualitySlicesParams, obs: Observations, v: Verdict, wall: float) -> Outcome:
    """The Outcome of the verdict, built once; `wall`: seconds from the start of scoring to the end of judging."""
    runs, slices, timing = obs.runs, _slices(obs.runs), _timing(obs, wall)
    evidence = SlicesEvidence(
        envelopes=[JudgedEnvelope(**e) for e in v.table],
        slices=slices,
        space="text" if isinstance(next(iter(runs.values())).space, TextSpace) else "tokens",
        datasets={name: r.built.fingerprint for name, r in runs.items() if r.built},
        samples={
            name: slice_samples(r.built.dataset, r.scores, obs.show, params.log_samples)
            for name, r in runs.items()
            if r.built and params.log_samples
        },
        timing=timing,
    ).dump()
    held, broken = v.held, v.broken
    message = f"all {len(v.table)} envelopes held on their one-sided bounds ({', '.join(held)})"
    if broken:
        message = f"{len(broken)} of {len(v.table)} envelopes violated: {', '.join(broken)}" + (
            f"; held: {', '.join(held)}" if held else ""
        )
    return Outcome(
        "fail" if broken else "pass",
        message,
        _metrics(v, timing),
        evidence,
        _exercise(obs),
        diagnosis=_diagnose(v.table, slices) if broken else None,
        detected_at=v.detected_at,
        observation=torch.tensor([x for r in runs.values() for x in r.scores.kl], dtype=torch.float64),
    )


@check("quality-slices", params=QualitySlicesParams)
def quality_slices(ctx: CheckContext, params: QualitySlicesParams) -> Outcome:
    """Judge every envelope of a bounded-degradation claim on its slice's one-sided bound."""
    claim = ctx.manifest.claim
    envelopes: list[Envelope] = list(claim.envelopes) if isinstance(claim, BoundedDegradationClaim) else []
    if not envelopes:
        return Outcome("skip", f"claim {claim.level} declares no envelopes; nothing to judge")
    obs = measure(ctx, params, envelopes)
    verdict = judge(params, obs)
    return explain(params, obs, verdict, time.perf_counter() - obs.started)


def _diagnose(table: list[dict[str, Any]], slices: dict[str, Any]) -> dict[str, Any]:
    """Which envelopes broke, and whether failures grow with the distance to the evidence."""
    failed = [e for e in table if not e["passed"]]
    underpowered = [
        f"{e['slice']}/{e['metric']}" for e in failed if e["n"] < e["n_required"] and e.get("planned") is None
    ]
    long_failed = {e["slice"] for e in failed if slices.get(e["slice"], {}).get("dependency") == "long-range"}
    local_held = [e["slice"] for e in table if e["passed"] and slices.get(e["slice"], {}).get("dependency") == "local"]
    out: dict[str, Any] = {
        "failed": [f"{e['slice']}/{e['metric']}" for e in failed],
        "underpowered": underpowered,
        "by_distance": {s: slices[s]["by_distance"] for s in long_failed if s in slices},
    }
    if long_failed and local_held:
        out["bug_class"] = "lost-long-range-context"
        out["summary"] = (
            "long-range slices fail while the local control holds: the candidate no longer "
            "attends over the full past (the forgetful stenographer; background: approximate caches)"
        )
    elif underpowered and len(underpowered) == len(failed):
        out["bug_class"] = "underpowered"
        out["summary"] = "too few samples to detect the declared effect: the envelope cannot be earned"
    else:
        out["bug_class"] = "degraded"
        out["summary"] = "quality outside the declared envelope"
    return out
