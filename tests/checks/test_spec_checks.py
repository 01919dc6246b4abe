"""spec-greedy and spec-distribution on the reference decoder's speculative path, with every fault."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gate.adapters.reference import Options, ReferenceAdapter
from gate.adapters.reference.options import SAMPLER_FAULTS
from gate.checks.spec_distribution import SAMPLER_FAULTS as PARAMS_SAMPLER_FAULTS
from gate.checks.spec_distribution import SpecDistributionParams, spec_distribution
from gate.checks.spec_greedy import SpecGreedyParams, spec_greedy
from gate.core.check import CheckContext
from gate.core.manifest import Manifest
from gate.protocols import Capability, capabilities
from gate.speculative.sampler import FAULTS

DETECT = ["accept-all", "inverted-ratio", "residual-from-target", "residual-abs", "bonus-from-draft"]
LAYER_SKIP = {"k": 2, "draft": "layer-skip", "draft_layers": 1}
REPO = Path(__file__).resolve().parents[2]


def manifest(claim: dict[str, Any]) -> Manifest:
    return Manifest.model_validate(
        {
            "apiVersion": "gate/v1",
            "name": "spec",
            "intervention": "proposal-and-verify",
            "claim": claim,
            "identity": ["token-ids", "positions", "model-revision"],
            "subject": {
                "reference": {"adapter": "reference", "options": {}},
                "candidate": {"adapter": "reference", "options": {"path": "speculative"}},
            },
        }
    )


@cache
def paths(draft: tuple[tuple[str, Any], ...] = tuple(LAYER_SKIP.items())) -> tuple[Any, Any]:
    adapter = ReferenceAdapter()
    ref = adapter.build(Options(path="full"), device="cpu", dtype="float32", seed=0)
    cand = adapter.build(Options(path="speculative", speculative=dict(draft)), device="cpu", dtype="float32", seed=0)
    return ref, cand


def context(
    fault: str | None = None, seed: int = 0, draft: dict[str, Any] | None = None, claim: dict[str, Any] | None = None
) -> CheckContext:
    ref, cand = paths(tuple((draft or LAYER_SKIP).items()))
    return CheckContext(
        manifest=manifest(claim or {"level": "distribution"}),
        reference=ref,
        candidate=cand.with_fault(fault) if fault else cand,
        seed=seed,
        device="cpu",
        dtype="float32",
        control=fault,
    )


FAST = SpecDistributionParams(min_samples=1000)


def test_the_speculative_path_offers_the_capability_and_every_sampler_fault() -> None:
    _, cand = paths()
    assert Capability.SPECULATIVE_PATH in capabilities(cand) and cand.num_draft_tokens == 2
    assert set(cand.faults()) == set(FAULTS) == set(SAMPLER_FAULTS)


def test_the_distribution_params_know_every_sampler_fault_by_name_without_torch() -> None:
    assert list(PARAMS_SAMPLER_FAULTS) == list(FAULTS)  # the same names, in the order errors list them
    assert SpecDistributionParams(power_against=["drop-bonus"]).power_against == ["drop-bonus"]
    with pytest.raises(ValidationError, match=r"unknown sampler faults \['no-such'\] \(known: accept-all, "):
        SpecDistributionParams(power_against=["accept-all", "no-such"])


def test_distribution_passes_with_observed_and_expected_tables() -> None:
    out = spec_distribution(context(), SpecDistributionParams())
    assert out.status == "pass", out.message
    ev = out.evidence
    for key in (
        "categories",
        "observed",
        "expected",
        "statistic",
        "p_value",
        "dof",
        "power",
        "k",
        "horizon",
        "n_samples",
    ):
        assert key in ev
    assert ev["k"] == 2 and ev["horizon"] == 3 and "k=2, horizon=3" in out.message
    assert sum(ev["observed"]) == ev["n_samples"] == 2000
    assert sum(ev["expected"]) == pytest.approx(2000, abs=0.5)
    assert all(len(c.split()) == 3 for c in ev["categories"])
    assert min(ev["power"][f] for f in DETECT) >= 0.9 and ev["power"]["drop-bonus"] == pytest.approx(0.01)
    assert out.exercise["rejections"] > 0 and out.exercise["target_passes"] > 0


@pytest.mark.parametrize("fault", DETECT)
def test_distribution_detects_each_fault(fault: str) -> None:
    out = spec_distribution(context(fault), SpecDistributionParams())
    assert out.status == "fail", out.message
    assert "depart from the target's distribution" in out.message


def test_bonus_fault_shows_only_past_the_draft_length() -> None:
    out = spec_distribution(context("bonus-from-draft"), FAST)
    assert out.detected_at == 3
    with pytest.raises(ValueError, match="must exceed the draft length"):
        spec_distribution(context(), SpecDistributionParams(horizon=2))


def test_drop_bonus_passes_and_the_efficiency_evidence_shows_the_loss() -> None:
    good = spec_distribution(context(), FAST)
    dropped = spec_distribution(context("drop-bonus"), FAST)
    assert dropped.status == "pass", dropped.message
    assert dropped.exercise["bonus"] == 0 < good.exercise["bonus"]
    assert dropped.exercise["missing_bonus"] == dropped.exercise["full_accepts"] > 0 == good.exercise["missing_bonus"]
    assert "efficiency loss" in dropped.message and "efficiency loss" not in good.message
    assert dropped.metrics["tokens_per_target_pass"] < good.metrics["tokens_per_target_pass"] - 0.05


def test_correct_sampler_over_twenty_seeds_at_most_one_false_alarm() -> None:
    alarms = [
        s
        for s in range(20)
        if spec_distribution(context(seed=s), SpecDistributionParams(min_samples=500)).metrics["p_value"] < 0.01
    ]
    assert len(alarms) <= 1, alarms


def test_identical_draft_exercises_nothing_and_cannot_pass() -> None:
    identical = {"k": 2, "draft": "layer-skip", "draft_layers": 2}
    out = spec_distribution(context(draft=identical), FAST)
    assert out.status == "fail" and "exercises nothing" in out.message
    # with the draft equal to the target every sampler fault has the target's own law: declared, not "power"
    assert set(out.evidence["unobservable"]) == set(DETECT)
    assert out.metrics["acceptance_rate"] == 1.0
    greedy = spec_greedy(context(draft=identical), SpecGreedyParams())
    assert greedy.status == "fail" and "exercises nothing" in greedy.message


def test_a_correct_sampler_with_a_weak_draft_passes_naming_the_faults_it_cannot_show() -> None:
    """An independent draft is never accepted in the target's top-k: the residual and the bonus token
    are then the target's own law, so those faults are unobservable here, said up front; the rest
    have power, and the correct sampler passes (it used to fail as "underpowered")."""
    out = spec_distribution(context(draft={"k": 2, "draft": "tiny-draft"}), FAST)
    assert out.status == "pass", out.message
    assert set(out.evidence["unobservable"]) == {"residual-from-target", "bonus-from-draft"}
    assert "unobservable with this draft: residual-from-target" in out.message
    assert min(out.evidence["power"][f] for f in ("accept-all", "inverted-ratio", "residual-abs")) >= 0.9


def test_samples_are_drawn_in_looks_until_the_declared_power() -> None:
    """From a floor of 50 samples, looks double until every fault has the declared power at the
    per-look level alpha / looks (Bonferroni over looks fixed before sampling)."""
    out = spec_distribution(context(), SpecDistributionParams(min_samples=50, max_samples=5000))
    assert out.status == "pass", out.message
    seq = out.evidence["sequential"]
    assert seq["planned_looks"][0] == 50 and len(seq["planned_looks"]) > 1 and seq["reaches_power"]
    assert out.evidence["n_samples"] == seq["planned_looks"][-1] == seq["history"][-1]["n"]
    assert seq["alpha_per_look"] == pytest.approx(0.01 / len(seq["planned_looks"]))
    assert min(out.evidence["power"][f] for f in DETECT) >= 0.9
    # residual-from-target needs ~229 samples at alpha 0.01: more than the floor, fewer than the budget
    assert 50 < out.evidence["n_samples"] < 5000


def test_a_budget_that_cannot_reach_the_power_is_unproven_with_the_reason() -> None:
    out = spec_distribution(context(), SpecDistributionParams(min_samples=50, max_samples=100))
    assert out.status == "unproven", out.message
    assert "budget of 100 samples cannot show the declared power" in out.message
    assert "residual-from-target" in out.message and not out.evidence["sequential"]["reaches_power"]


def test_a_control_stops_at_its_first_detection() -> None:
    out = spec_distribution(context("accept-all"), SpecDistributionParams(min_samples=50, max_samples=5000))
    assert out.status == "fail" and "depart from the target's distribution" in out.message
    history = out.evidence["sequential"]["history"]
    assert len(history) == 1 and out.evidence["n_samples"] == 50 < out.evidence["sequential"]["planned_looks"][-1]


def test_greedy_equals_target_and_accept_all_is_caught() -> None:
    claim = {"level": "greedy-tokens", "tokens": [8, 24]}
    out = spec_greedy(context(claim=claim), SpecGreedyParams())
    assert out.status == "pass", out.message
    assert out.metrics["n_tokens"] == 24 and out.evidence["matching_by_length"] == {"8": 8, "24": 8}
    assert out.exercise["proposed"] > 0 and out.exercise["rejections"] > 0
    bad = spec_greedy(context("accept-all", claim=claim), SpecGreedyParams())
    assert bad.status == "fail" and bad.detected_at is not None


def test_a_greedy_control_decodes_the_first_round_first_and_the_full_run_only_if_it_agrees() -> None:
    from dataclasses import replace

    from gate.checks.spec_greedy import probe_tokens

    claim = {"level": "greedy-tokens", "tokens": [8, 24]}
    caught = spec_greedy(replace(context("accept-all", claim=claim), stop_at_first_failure=True), SpecGreedyParams())
    assert caught.status == "fail" and caught.detected_at is not None
    assert caught.metrics["n_tokens"] == probe_tokens(2) == 3  # every prompt's first round: k + 1 tokens
    full = spec_greedy(context("accept-all", claim=claim), SpecGreedyParams())
    assert full.detected_at == caught.detected_at  # greedy decoding is causal: the same first divergence
    # a fault invisible to greedy decoding gets the full run, as a positive run would
    blind = spec_greedy(
        replace(context("residual-from-target", claim=claim), stop_at_first_failure=True), SpecGreedyParams()
    )
    assert blind.status == "pass" and blind.metrics["n_tokens"] == 24


def test_greedy_cannot_see_the_residual_fault() -> None:
    """Why the distribution check exists: one-hot p and q make the wrong residual pick the same token."""
    params = SpecGreedyParams(n_tokens=16)
    clean = spec_greedy(context(), params)
    faulty = spec_greedy(context("residual-from-target"), params)
    assert faulty.status == "pass"
    assert clean.observation is not None and faulty.observation is not None
    assert bool((clean.observation == faulty.observation).all())


def test_speculative_options_are_validated() -> None:
    with pytest.raises(ValidationError, match="applies only to path 'speculative'"):
        Options(path="full", speculative={"k": 2})
    with pytest.raises(ValidationError, match="unknown sampler fault"):
        Options(path="speculative", speculative={"fault": "nope"})
    with pytest.raises(ValidationError, match="unknown draft"):
        Options(path="speculative", speculative={"draft": "gpt-5"})


def test_examples_exist_for_every_fault() -> None:
    names = {p.stem for p in (REPO / "examples").glob("reference-spec-*.yaml")}
    assert {f"reference-spec-fault-{f}" for f in DETECT} | {
        "reference-spec-correct",
        "reference-spec-drop-bonus",
        "reference-spec-identical-draft",
    } <= names
