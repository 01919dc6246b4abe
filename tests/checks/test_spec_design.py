"""spec-distribution's design shared across a run, and a control's pilot look (gate.checks._spec_design)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from gate.checks._spec import seeded_prompts
from gate.checks._spec_design import MIN_PILOT, Design, LookPlan, _pilot, shared_design
from gate.checks.spec_distribution import SpecDistributionParams, spec_distribution
from gate.core.check import CheckContext
from gate.core.policy import ControlSpec
from gate.core.result import ControlOutcome
from gate.engine.controls import _run_planted, power_verdict, run_control, unproven_verdict
from gate.engine.generic_faults import plant
from gate.engine.run_cache import RunCache
from gate.speculative.gof import power, required_samples
from gate.speculative.path import SpeculativeDecodePath
from tests.checks.test_spec_checks import DETECT, context

PARAMS = SpecDistributionParams()
HORIZON = 3


class DeepDraft(SpeculativeDecodePath):
    """A fault in the model, not in the sampler's rule: the draft answers differently only two tokens
    past the prompt, the deepest the enumeration asks it (the last batches it records)."""

    def draft_next_token_probs(self, contexts: torch.Tensor, *, temperature: float, top_k: int | None) -> torch.Tensor:
        probs = super().draft_next_token_probs(contexts, temperature=temperature, top_k=top_k)
        return probs.roll(1, dims=-1) if contexts.shape[1] == PARAMS.prompt_len + 2 else probs


class ShiftedTarget(SpeculativeDecodePath):
    """The candidate's target answers differently one token past the prompt."""

    def target_next_token_probs(self, contexts: torch.Tensor, *, temperature: float, top_k: int | None) -> torch.Tensor:
        probs = super().target_next_token_probs(contexts, temperature=temperature, top_k=top_k)
        return probs.roll(1, dims=-1) if contexts.shape[1] == PARAMS.prompt_len + 1 else probs


def with_cache(ctx: CheckContext, cache: RunCache) -> CheckContext:
    return replace(ctx, cache=cache)


def design_of(ctx: CheckContext) -> Design:
    spec: Any = ctx.candidate
    prompt = seeded_prompts(ctx.reference.vocab_size, 1, PARAMS.prompt_len, ctx.seed, ctx.device)[0]
    return shared_design(ctx, spec, prompt, PARAMS, HORIZON, 0.01, 0.9)


def rebuilt(ctx: CheckContext, kind: type[SpeculativeDecodePath]) -> CheckContext:
    c: Any = ctx.candidate
    return replace(ctx, candidate=kind(c.target, c.draft, c.num_draft_tokens, c.rules, c.draft_kind))


def test_a_fault_in_the_sampler_rule_reads_the_runs_design() -> None:
    cache = RunCache()
    clean = design_of(with_cache(context(), cache))
    for fault in [*DETECT, "drop-bonus"]:
        assert design_of(with_cache(context(fault), cache)) is clean
    assert design_of(context()) is not clean  # no run cache (a context built by hand): computed


@pytest.mark.parametrize("kind", [DeepDraft, ShiftedTarget])
def test_a_fault_that_changes_what_the_enumeration_read_gets_its_own_design(kind: type[SpeculativeDecodePath]) -> None:
    cache = RunCache()
    clean = design_of(with_cache(context(), cache))
    faulty_ctx = rebuilt(context("accept-all"), kind)
    faulty = design_of(with_cache(faulty_ctx, cache))
    alone = design_of(faulty_ctx)  # the same candidate in a run of its own
    assert faulty is not clean
    changed = {f for f in clean.alts if not np.array_equal(_on(clean, f, faulty), faulty.alts[f])}
    assert changed, kind
    assert faulty.cells == alone.cells and all(np.array_equal(faulty.alts[f], alone.alts[f]) for f in alone.alts)


def _on(design: Design, fault: str, other: Design) -> np.ndarray:
    """`design`'s law of `fault` over `other`'s cells."""
    return np.array([design.alts[fault][design.index[c]] if c in design.index else 0.0 for c in other.cells])


def test_controls_detect_at_a_pilot_sized_for_their_fault_and_a_harmless_one_walks_the_planned_looks() -> None:
    ctx = with_cache(context(), RunCache())
    clean = spec_distribution(ctx, PARAMS)
    assert clean.status == "pass" and clean.evidence["sequential"].get("pilot") is None
    planned = clean.evidence["sequential"]["planned_looks"]
    assert planned == [2000] and clean.metrics["alpha_per_look"] == 0.01
    for fault in DETECT:
        result = run_control(spec_distribution, ctx, PARAMS, clean, ControlSpec(fault=fault))
        assert result.outcome == ControlOutcome.detected, (fault, result.message)
        # Bonferroni over the pilot and the planned look: each at alpha / 2, the detection among them
        assert result.metrics["alpha_per_look"] == pytest.approx(0.005) and result.metrics["looks"] == 1
        assert MIN_PILOT <= result.metrics["n_samples"] <= planned[0] // 2
        assert result.metrics["p_value"] < 0.005
    assert result.detected_at == HORIZON  # bonus-from-draft still shows at the bonus token
    harmless = run_control(spec_distribution, ctx, PARAMS, clean, ControlSpec(fault="drop-bonus", expect="pass"))
    assert harmless.outcome == ControlOutcome.tolerated, harmless.message
    assert harmless.metrics["n_samples"] == 2000 and harmless.metrics["alpha_per_look"] == 0.01


def test_after_a_pilot_the_planned_looks_draw_what_a_positive_run_draws() -> None:
    """On a sampler that already drops the bonus token, bonus-from-draft changes nothing: its pilot
    (sized from the law the fault has on a correct sampler) finds nothing, and the planned look draws
    the positive run's very samples, so the adapter's own fault is unobservable (max |Δ| = 0), as
    without a pilot. The control then runs the generic stand-in (gate's sampler with the bonus taken
    from the draft, over the candidate's own probabilities), which shows: the check has power here."""
    ctx = with_cache(context("drop-bonus"), RunCache())
    clean = spec_distribution(ctx, PARAMS)
    control = ControlSpec(fault="bonus-from-draft")
    own = plant(ctx.candidate, "spec-distribution", control.fault, own=True)
    assert not isinstance(own, str) and own.kind != "generic"
    result = _run_planted(spec_distribution, ctx, PARAMS, clean, control, own)
    assert result.outcome == ControlOutcome.unobservable and result.output_difference == 0.0, result.message
    assert result.metrics["looks"] == 2 and result.metrics["n_samples"] == 2000
    stood_in = run_control(spec_distribution, ctx, PARAMS, clean, control)
    assert stood_in.stand_in and "its own bonus-from-draft unobservable" in stood_in.stand_in
    assert stood_in.kind == "generic" and stood_in.outcome == ControlOutcome.detected, stood_in.message


def test_a_pilot_is_taken_only_where_the_planned_looks_keep_the_declared_power() -> None:
    p0 = np.full(4, 0.25)
    alts = {"visible": np.array([0.7, 0.1, 0.1, 0.1]), "faint": np.array([0.28, 0.22, 0.25, 0.25])}
    just_enough = required_samples(p0, alts["faint"], 0.01, 0.9, 10**6)
    assert just_enough is not None and power(p0, alts["faint"], just_enough, 0.005) < 0.9

    def design(required: list[str]) -> Design:
        looks = LookPlan([just_enough], 0.01, True, {})
        return Design({}, [], True, [], {}, p0, alts, {}, required, looks, None)

    assert _pilot(design(["faint"]), "visible", 0.01, 0.9) is None  # the planned look would lose its power
    n, level = _pilot(design(["visible"]), "visible", 0.01, 0.9) or (0, 0.0)
    assert n == MIN_PILOT and level == 0.005
    assert _pilot(design(["visible"]), "faint", 0.01, 0.9) is None  # as large as the planned look: no saving
    assert _pilot(design(["visible"]), "unknown", 0.01, 0.9) is None


def test_a_correct_sampler_with_a_weak_draft_is_unproven_not_failed_for_lack_of_power() -> None:
    """A draft of k=4 accepted 14 % of the time reaches the bonus token so seldom that 200 samples
    have power 0.61 < 0.9 against bonus-from-draft: the run is unproven, naming the samples that
    would show it, and the control (own fault, then the generic stand-in) is unobservable, never
    "no power against fault bonus-from-draft" (the sampler and seed where it passes unseen)."""
    weak = SpecDistributionParams(min_samples=100, max_samples=200, power_against=["bonus-from-draft"])
    ctx = with_cache(context(seed=2, draft={"k": 4, "draft": "layer-skip", "draft_layers": 1}), RunCache())
    clean = spec_distribution(ctx, weak)
    assert clean.status == "unproven" and clean.evidence["power"]["bonus-from-draft"] < 0.9
    hint = clean.underpowered["bonus-from-draft"]
    assert "raise max_samples to about" in hint and "a draft accepted more often than this run's 0.1" in hint
    result = run_control(spec_distribution, ctx, weak, clean, ControlSpec(fault="bonus-from-draft"))
    assert result.outcome == ControlOutcome.unobservable, result.message
    assert "below the check's power" in result.message and result.metrics["observable_with"]
    assert power_verdict("spec-distribution", [result]) is None
    verdict = unproven_verdict("spec-distribution", [result])
    assert verdict and "to make them observable: bonus-from-draft: power 0.606 < 0.9" in verdict
