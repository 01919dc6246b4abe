"""quality-slices' slice runs: a slice being scored (`SliceRun`, cut short once every rate envelope is
settled), each envelope judged on its one-sided bound, and Stein's second stage."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from gate.checks.quality_slices import QualitySlicesParams
from gate.core.check import CheckContext
from gate.core.evidence import Judgement
from gate.core.manifest import Envelope
from gate.quality.datasets_io import BuiltSlice, build_slice
from gate.quality.evidence import METRICS
from gate.quality.scoring import SUMMED, Clock, SampleScores, SessionPool, score_batch
from gate.quality.spec import SliceSpec
from gate.quality.stats import holds, min_sample_size, settled_rate
from gate.quality.stats import judge as judge_bound
from gate.quality.text import TextSpace
from gate.quality.vocab import TokenSpace


def prior_samples(spec: SliceSpec, envelopes: Sequence[Envelope], floor: int) -> int:
    """Samples a slice needs before it runs: the largest requirement of its envelopes whose
    metric has a known worst-case sigma (a plug-in sigma is only known afterwards)."""
    needs = [
        min_sample_size(
            env.min_detectable_effect, env.confidence, env.power, m.sigma, 2 if m.reference_column else 1, floor
        )
        for env in envelopes
        if (m := METRICS[env.metric]).sigma is not None
    ]
    return max([spec.samples, *needs])


class SliceRun:
    """One slice being scored: its rows, per-sample scores, and the candidate's exercise."""

    def __init__(self, spec: SliceSpec, space: TokenSpace | TextSpace, seed: int, pool: SessionPool) -> None:
        self.spec, self.space, self.seed, self.pool = spec, space, seed, pool
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
        """Build the first n rows (saved, fingerprinted) and score those not yet scored, in batches of
        equal prompt length, shortest first; with `params.curtail`, stop once `envelopes` are settled."""
        self.built = build_slice(self.spec, self.space, self.seed, n)
        todo = list(range(self.n, n))
        # two column reads of the saved rows (a row read at a time costs datasets' formatting per row)
        prompt_col, answer_col = self.built.dataset["prompt"], self.built.dataset["answer"]
        by_len: dict[int, list[int]] = {}
        for i in todo:
            by_len.setdefault(len(prompt_col[i]), []).append(i)
        k = self.spec.continuation
        results: dict[int, SampleScores] = {}
        for _, idx in sorted(by_len.items()):
            for start in range(0, len(idx), params.batch_size):
                chunk = idx[start : start + params.batch_size]
                prompts = torch.tensor([prompt_col[i] for i in chunk], dtype=torch.long)
                answers = [answer_col[i] for i in chunk]
                scores, exercise = score_batch(ctx.reference, self.pool, prompts, k, answers, clock, ctx.device)
                self._merge_exercise(exercise)
                for j, i in enumerate(chunk):
                    results[i] = one = SampleScores()
                    for name in SampleScores.__dataclass_fields__:
                        if column := getattr(scores, name):
                            getattr(one, name).append(column[j])
                ctx.progress(f"{self.spec.name}: samples scored", len(results), len(todo))
                more = len(results) < len(todo)
                if more and params.curtail and _settled(envelopes, self, results, n, params.min_samples):
                    self._curtail(n, results, ctx)
                    return
        for i in todo:  # keep dataset order
            self.scores.extend(results[i])

    def _curtail(self, n: int, results: dict[int, SampleScores], ctx: CheckContext) -> None:
        """Keep the rows scored so far (the earlier stages' and these), in dataset order."""
        assert self.built is not None
        kept = list(range(self.n)) + sorted(results)
        for i in sorted(results):
            self.scores.extend(results[i])
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
    run: SliceRun,
    results: dict[int, SampleScores],
    planned: int,
    floor: int,
) -> bool:
    """True when every envelope on the slice is a rate that fails over `planned` samples however the
    unscored ones turn out (a bootstrap bound of a mean is not monotone in one sample)."""
    if not envelopes or any(METRICS[e.metric].kind != "rate" for e in envelopes):
        return False
    scored = run.n + len(results)
    for env in envelopes:
        metric = METRICS[env.metric]
        assert metric.sigma is not None  # a rate's worst case
        if planned < min_sample_size(env.min_detectable_effect, env.confidence, env.power, metric.sigma, 1, floor):
            return False  # a whole slice this small fails as underpowered: scored whole, so it says so
        column = metric.column
        new = sum(float(getattr(one, column)[0]) for one in results.values())
        successes = round(sum(run.scores.column(column)) + new)
        if not settled_rate(successes, scored, planned, env.confidence, env.comparator.value, env.threshold):
            return False
    return True


def judge_envelope(env: Envelope, run: SliceRun, params: QualitySlicesParams, seed: int) -> Judgement:
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


def second_stage(
    run: SliceRun,
    envelopes: list[Envelope],
    cap: int,
    ctx: CheckContext,
    params: QualitySlicesParams,
    clock: Clock,
    seed: int,
) -> None:
    """Stein's second stage for metrics whose spread is only known after a first sample (KL): top up
    to the plug-in sample size, only for envelopes whose point estimate already meets the threshold."""
    for _ in range(3):
        if run.planned is not None:
            return  # settled: its verdict cannot change
        need = 0
        for env in envelopes:
            verdict = judge_envelope(env, run, params, seed)
            if verdict.n < verdict.n_required and holds(verdict.point, env.comparator.value, env.threshold):
                need = max(need, verdict.n_required)
        if need <= run.n or run.n >= cap:
            return
        ctx.log(f"  {run.spec.name}: second stage, {min(cap, need)} samples")
        run.extend_to(min(cap, need), ctx, params, clock, envelopes)
