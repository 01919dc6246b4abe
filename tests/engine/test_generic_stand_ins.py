"""Generic stand-ins for the store and sampler checks (gate.engine.generic_stores): a prefix store or a
speculative sampler that plants no faults of its own still gets a control for every rule the
prefix-reuse and proposal-and-verify policies judge, and each shows the check's power."""

from __future__ import annotations

from typing import Any

import pytest

from gate.core.check import CheckSpec
from gate.core.manifest import Intervention
from gate.core.policy import ControlSpec, load_policies
from gate.core.result import ControlOutcome
from gate.engine.controls import run_control
from gate.engine.generic_faults import GENERIC_FAULTS, PREFIX_CHECKS, SPEC_CHECKS, plant


class NoOwnFaults:
    """A subject as a third party would offer it: every capability of `inner`, no faults of its own."""

    def __init__(self, inner: Any) -> None:
        self.__dict__["inner"] = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["inner"], name)

    def faults(self) -> tuple[str, ...]:
        return ()

    def with_fault(self, fault: str) -> Any:
        from gate.errors import UnknownFault

        raise UnknownFault(fault)


def policy_faults(intervention: Intervention, checks: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(claim, check, fault) for every control the policy names for `checks`, once per check and fault."""
    resolved = load_policies().interventions[intervention]
    found: dict[tuple[str, str], str] = {}
    for level, claim in resolved.claims.items():
        if claim.rule.admissible:
            for rule, _ in claim.checks:
                if rule.check in checks:
                    for control in rule.controls:
                        found.setdefault((rule.check, control.fault), level.value)
    return [(level, check, fault) for (check, fault), level in found.items()]


def test_every_control_of_the_store_and_sampler_policies_has_a_generic_stand_in() -> None:
    covered = {(c, f) for g in GENERIC_FAULTS for f in (g.name, *g.stands_for) for c in g.proves}
    named = policy_faults(Intervention.prefix_reuse, PREFIX_CHECKS)
    named += policy_faults(Intervention("proposal-and-verify"), SPEC_CHECKS)
    assert named and all((check, fault) in covered for _, check, fault in named), [
        (c, f) for _, c, f in named if (c, f) not in covered
    ]


@pytest.mark.parametrize("claim,name,fault", policy_faults(Intervention.prefix_reuse, PREFIX_CHECKS), ids=str)
def test_a_store_without_faults_gets_a_generic_control_that_detects(claim: str, name: str, fault: str) -> None:
    from tests.checks.test_prefix_checks import CHECKS, context

    ctx = context(claim={"level": claim, "tokens": [4]} if claim == "greedy-tokens" else {"level": claim})
    ctx = type(ctx)(**{**ctx.__dict__, "candidate": NoOwnFaults(ctx.candidate), "control": None})
    spec: CheckSpec[Any] = CHECKS[name]
    greedy = name == "prefix-reuse-parity" and claim == "greedy-tokens"
    params = spec.params(**({"compare": "greedy"} if greedy else {}))
    clean = spec(ctx, params)
    assert clean.status == "pass", clean.message
    result = run_control(spec, ctx, params, clean, ControlSpec(fault=fault))
    assert result.kind == "generic" and result.stand_in and "plants no" in result.stand_in, result
    assert result.outcome == ControlOutcome.detected, result.message


SPEC_FAULTS = policy_faults(Intervention("proposal-and-verify"), SPEC_CHECKS)


@pytest.mark.parametrize("claim,name,fault", SPEC_FAULTS, ids=str)
def test_a_sampler_without_faults_gets_a_wrapper_sampler_that_shows_power(claim: str, name: str, fault: str) -> None:
    from gate.checks.spec_distribution import SpecDistributionParams, spec_distribution
    from gate.checks.spec_greedy import SpecGreedyParams, spec_greedy
    from tests.checks.test_spec_checks import context

    ctx = context(claim={"level": "distribution"})
    ctx = type(ctx)(**{**ctx.__dict__, "candidate": NoOwnFaults(ctx.candidate), "control": None})
    spec: CheckSpec[Any] = spec_greedy if name == "spec-greedy" else spec_distribution
    params = SpecGreedyParams() if name == "spec-greedy" else SpecDistributionParams(min_samples=1000)
    clean = spec(ctx, params)
    assert clean.status == "pass", clean.message
    expect = "pass" if fault == "drop-bonus" else "detect"
    result = run_control(spec, ctx, params, clean, ControlSpec(fault=fault, expect=expect))
    assert result.kind == "generic" and result.applied == f"sampler:{fault}", result
    if expect == "pass":
        assert result.outcome == ControlOutcome.tolerated, result.message
    elif name == "spec-greedy" and fault == "residual-from-target":  # one-hot p and q: greedy cannot see it
        assert result.outcome == ControlOutcome.unobservable, result.message
    else:
        assert result.outcome == ControlOutcome.detected, result.message


def test_a_stand_in_that_cannot_apply_says_why() -> None:
    from tests.checks.test_prefix_checks import paths

    _, store = paths()
    planted = plant(store, "spec-greedy", "accept-all", own=False)
    assert isinstance(planted, str) and "samples no drafts" in planted
    planted = plant(store, "invalidation", "skip-invalidation", own=False)
    assert not isinstance(planted, str) and planted.applied == "invalidation-skipped"


class NoSiblings:
    """gate's own prefix worker without siblings (one model, one configuration), its faults kept."""

    def __init__(self, inner: Any) -> None:
        self.__dict__["inner"] = inner

    def __getattr__(self, name: str) -> Any:
        if name == "sibling":
            raise AttributeError(name)
        return getattr(self.__dict__["inner"], name)

    def fresh(self, **kw: Any) -> NoSiblings:
        return NoSiblings(self.__dict__["inner"].fresh(**kw))

    def with_fault(self, fault: str) -> NoSiblings:
        return NoSiblings(self.__dict__["inner"].with_fault(fault))


@pytest.mark.parametrize("fault", ["key-ignores-revision", "key-ignores-tokenizer", "key-ignores-kv-dtype"])
def test_on_a_store_without_siblings_a_key_fault_on_a_worker_field_is_unobservable_never_missed(fault: str) -> None:
    from gate.checks.cache_identity import cache_identity
    from gate.core.plan import PlannedCheck
    from gate.core.result import Status
    from gate.engine.runner import run_check
    from gate.protocols import PrefixServing, PrefixSiblings
    from tests.checks.test_prefix_checks import context

    ctx = context()
    ctx = type(ctx)(**{**ctx.__dict__, "candidate": NoSiblings(ctx.candidate), "control": None})
    assert isinstance(ctx.candidate, PrefixServing) and not isinstance(ctx.candidate, PrefixSiblings)
    clean = cache_identity(ctx, cache_identity.params())
    field = {"key-ignores-revision": "model-revision", "key-ignores-tokenizer": "tokenizer"}.get(fault, "kv-dtype")
    assert clean.status == "unproven" and field in clean.lacking, clean.message
    result = run_control(cache_identity, ctx, cache_identity.params(), clean, ControlSpec(fault=fault))
    # the store's own fault ran and could not show (the assertion it breaks cannot be made here, so no
    # stand-in can make it either): the control is unobservable, never missed
    assert result.outcome == ControlOutcome.unobservable and result.kind == "adapter", result.message
    assert "could not be made on this candidate" in result.message and "no stand-in can" in result.message
    # as the policy plans it: the tenant control shows power, so the check is unproven for the missing
    # capability (a warning by the policy's missing_capability), not failed for lack of power
    planned = PlannedCheck(
        check="cache-identity",
        step=3,
        severity="deny",
        why="test",
        source="test",
        missing_capability="warn",
        available=True,
        controls=[ControlSpec(fault=fault), ControlSpec(fault="key-ignores-tenant")],
    )
    checked = run_check(planned, cache_identity, cache_identity.params(), ctx)
    assert checked.status == Status.unproven and checked.unproven == "warn", checked.message
    assert [c.outcome for c in checked.controls] == [ControlOutcome.unobservable, ControlOutcome.detected]


def test_docs_faults_shows_which_control_stands_in_where() -> None:
    from gate.engine.generic_faults import stand_in_table
    from tests.support.repo import REPO

    text = (REPO / "docs" / "faults.md").read_text()
    table = text.split("<!-- stand-in-table:start -->\n", 1)[1].split("<!-- stand-in-table:end -->", 1)[0]
    assert table == stand_in_table()
