"""quality-slices' body: measure (score every slice's samples), judge each envelope on its one-sided
bound, explain."""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gate.checks.quality_slices import QualitySlicesParams
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import JudgedEnvelope, Judgement, SlicesEvidence
from gate.core.manifest import BoundedDegradationClaim, Envelope
from gate.quality.datasets_io import BuiltSlice, build_slice
from gate.quality.evidence import METRICS, Metric, breakdowns, slice_samples, worst_samples
from gate.quality.scoring import SUMMED, Clock, SampleScores, SessionPool, score_batch
from gate.quality.spec import SliceSpec, load_slice
from gate.quality.stats import holds, min_sample_size, settled_rate
from gate.quality.stats import judge as judge_bound
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


def _prior_samples(spec: SliceSpec, envelopes: Sequence[Envelope], floor: int) -> int:
    """Samples a slice needs before it runs: the largest requirement of its envelopes whose
    metric has a known worst-case sigma (a plug-in sigma is only known afterwards)."""
    need = spec.samples
    for env in envelopes:
        metric = METRICS[env.metric]
        if metric.sigma is not None:
            groups = 2 if metric.reference_column else 1
            need = max(
                need, min_sample_size(env.min_detectable_effect, env.confidence, env.power, metric.sigma, groups, floor)
            )
    return need


class _SliceRun:
    """One slice being scored: its rows, per-sample scores, and the candidate's exercise."""

    def __init__(
        self, spec: SliceSpec, space: TokenSpace | TextSpace, seed: int, root: Path | None, pool: SessionPool
    ) -> None:
        self.spec, self.space, self.seed, self.root, self.pool = spec, space, seed, root, pool
        self.scores = SampleScores()
        self.built: BuiltSlice | None = None
        self.exercise: dict[str, Any] = {}
        self.planned: int | None = None
        """Set when scoring stopped early: the samples the slice was built for (`_settled`)."""

    @property
    def n(self) -> int:
        return len(self.scores.kl)

    def extend_to(
        self,
        n: int,
        ctx: CheckContext,
        params: QualitySlicesParams,
        clock: Clock,
        envelopes: Sequence[Envelope] = (),
    ) -> None:
        """Build the first n rows (saved, fingerprinted) and score those not yet scored, in batches
        of equal prompt length, shortest first. With `params.curtail`, scoring stops after the first
        batch that settles every one of `envelopes` (`_settled`); the slice then keeps the rows it
        scored, in dataset order, and `planned` says how many it was built for."""
        self.built = build_slice(self.spec, self.space, self.seed, n, root=self.root)
        rows = self.built.dataset
        todo = list(range(self.n, n))
        # two column reads of the saved rows (a row read at a time costs datasets' formatting per row)
        prompt_col, answer_col = rows["prompt"], rows["answer"]
        by_len: dict[int, list[int]] = {}
        for i in todo:
            by_len.setdefault(len(prompt_col[i]), []).append(i)
        k = self.spec.continuation
        results: dict[int, tuple[SampleScores, int]] = {}
        for length in sorted(by_len):
            idx = by_len[length]
            for start in range(0, len(idx), params.batch_size):
                chunk = idx[start : start + params.batch_size]
                prompts = torch.tensor([prompt_col[i] for i in chunk], dtype=torch.long)
                answers = [answer_col[i] for i in chunk]
                scores, exercise = score_batch(ctx.reference, self.pool, prompts, k, answers, clock, ctx.device)
                self._merge_exercise(exercise)
                for j, i in enumerate(chunk):
                    one = SampleScores()
                    for name in SampleScores.__dataclass_fields__:
                        column = getattr(scores, name)
                        if column:
                            getattr(one, name).append(column[j])
                    results[i] = (one, length)
                ctx.progress(f"{self.spec.name}: samples scored", len(results), len(todo))
                more = len(results) < len(todo)
                if more and params.curtail and _settled(envelopes, self, results, n, params.min_samples):
                    self._curtail(n, results, ctx)
                    return
        for i in todo:  # keep dataset order
            self.scores.extend(results[i][0])

    def _curtail(self, n: int, results: dict[int, tuple[SampleScores, int]], ctx: CheckContext) -> None:
        """Keep the rows scored so far (the earlier stages' and these), in dataset order."""
        assert self.built is not None
        kept = list(range(self.n)) + sorted(results)
        for i in sorted(results):
            self.scores.extend(results[i][0])
        self.built = dataclasses.replace(self.built, dataset=self.built.dataset.select(kept))
        self.planned = n
        ctx.log(f"  {self.spec.name}: settled after {len(kept)} of {n} samples (no later sample could rescue it)")

    def _merge_exercise(self, ex: dict[str, Any]) -> None:
        for key, value in ex.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.exercise.setdefault(key, value)
            elif key in SUMMED:
                self.exercise[key] = self.exercise.get(key, 0) + value
            else:
                self.exercise[key] = max(self.exercise.get(key, value), value)


def _settled(
    envelopes: Sequence[Envelope],
    run: _SliceRun,
    results: dict[int, tuple[SampleScores, int]],
    planned: int,
    floor: int,
) -> bool:
    """True when every envelope on the slice is a rate that fails over `planned` samples however
    the unscored ones turn out (gate.quality.stats.settled_rate). A slice with a mean envelope,
    or with none, is never cut short: a bootstrap bound is not monotone in one sample."""
    if not envelopes or any(METRICS[e.metric].kind != "rate" for e in envelopes):
        return False
    scored = run.n + len(results)
    for env in envelopes:
        metric = METRICS[env.metric]
        assert metric.sigma is not None  # a rate's worst case
        if planned < min_sample_size(env.min_detectable_effect, env.confidence, env.power, metric.sigma, 1, floor):
            return False  # a whole slice this small fails as underpowered: scored whole, so it says so
        column = metric.column
        new = sum(float(getattr(one, column)[0]) for one, _ in results.values())
        successes = round(sum(run.scores.column(column)) + new)
        if not settled_rate(successes, scored, planned, env.confidence, env.comparator.value, env.threshold):
            return False
    return True


def _judge(env: Envelope, run: _SliceRun, params: QualitySlicesParams, seed: int) -> Judgement:
    metric = METRICS[env.metric]
    scores = run.scores.column(metric.column)
    reference = run.scores.column(metric.reference_column) if metric.reference_column else None
    return judge_bound(
        scores,
        kind=metric.kind,
        comparator=env.comparator.value,
        threshold=env.threshold,
        confidence=env.confidence,
        min_detectable_effect=env.min_detectable_effect,
        power=env.power,
        seed=seed,
        reference=reference,
        sigma=metric.sigma,
        floor=params.min_samples,
        resamples=params.bootstrap_resamples,
        planned=run.planned,
    )


def _second_stage(
    run: _SliceRun,
    envelopes: list[Envelope],
    cap: int,
    ctx: CheckContext,
    params: QualitySlicesParams,
    clock: Clock,
    seed: int,
) -> None:
    """Stein's second stage for metrics whose spread is only known after a first sample (KL):
    top up to the plug-in sample size, but only for envelopes whose point estimate already meets
    the threshold (more samples cannot rescue a point on the wrong side, and a faulty candidate
    must not buy a 2000-sample evaluation by being noisy)."""
    for _ in range(3):
        if run.planned is not None:
            return  # settled: its verdict cannot change
        need = 0
        for env in envelopes:
            verdict = _judge(env, run, params, seed)
            if verdict.n < verdict.n_required and holds(verdict.point, env.comparator.value, env.threshold):
                need = max(need, verdict.n_required)
        if need <= run.n or run.n >= cap:
            return
        ctx.log(f"  {run.spec.name}: second stage, {min(cap, need)} samples")
        run.extend_to(min(cap, need), ctx, params, clock, envelopes)


def _validate(envelopes: Sequence[Envelope], specs: dict[str, SliceSpec]) -> None:
    for env in envelopes:
        if env.metric not in METRICS:
            raise ValueError(f"envelope on {env.slice}: unknown metric {env.metric!r} (known: {', '.join(METRICS)})")
        if env.slice not in specs:
            raise ValueError(f"envelope names unknown slice {env.slice!r}")


@dataclass(frozen=True)
class Observations:
    """Every slice scored (a control stops after the first with a violated envelope), the envelopes
    on them, and the work it took."""

    envelopes: list[Envelope]
    """The envelopes to judge: the claim's, or a control's on the slices it scored."""
    runs: dict[str, _SliceRun]
    show: Any
    """Renders token ids for the evidence."""
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
    _validate(envelopes, specs)
    space, show = _space(ctx, params)
    seed = ctx.seed if params.dataset_seed is None else params.dataset_seed
    clock = Clock()
    pool = SessionPool(ctx.candidate)  # the candidate's sessions are reset and reused, as served
    runs: dict[str, _SliceRun] = {}
    for name, spec in specs.items():
        mine = [e for e in envelopes if e.slice == name]
        cap = params.max_samples or spec.max_samples
        run = runs[name] = _SliceRun(spec, space, seed, None, pool)
        n = params.samples or min(cap, _prior_samples(spec, mine, params.min_samples))
        ctx.log(f"  slice {name}: {n} samples, k={spec.continuation}")
        run.extend_to(n, ctx, params, clock, mine)
        if params.samples is None:
            _second_stage(run, mine, cap, ctx, params, clock, seed)
        if ctx.stop_at_first_failure and any(not _judge(e, run, params, seed).passed for e in mine):
            # a control: one violated envelope proves power; the slices after it are not scored
            judged = [e for e in envelopes if e.slice in runs]
            return Observations(judged, runs, show, clock, started, seed, pool)
    return Observations(envelopes, runs, show, clock, started, seed, pool)


def judge(params: QualitySlicesParams, obs: Observations) -> Verdict:
    """Every envelope on its one-sided bound, with its worst samples (pure)."""
    table: list[dict[str, Any]] = []
    failed_samples_at: list[int] = []
    for env in obs.envelopes:
        run = obs.runs[env.slice]
        metric: Metric = METRICS[env.metric]
        verdict = _judge(env, run, params, obs.seed)
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


def _slices(runs: dict[str, _SliceRun]) -> dict[str, Any]:
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
    metrics: dict[str, Any] = {
        "envelopes": len(v.table),
        "envelopes_held": len(v.held),
        "samples": timing["samples"],
        "samples_per_s": timing["samples_per_s"],
        "outside_forward_share": timing["outside_forward_share"],
    }
    for e in v.table:
        metrics[f"{e['slice']}.{e['metric']}.bound"] = round(e["bound"], 6)
    return metrics


def explain(params: QualitySlicesParams, obs: Observations, v: Verdict, wall: float) -> Outcome:
    """The Outcome of the verdict, built once: every envelope held, or which broke and why.
    `wall`: seconds from the start of scoring to the end of judging."""
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
