"""The negative-control engine (release-gate step 5): each fault the policy names is planted (the
adapter's own, else a generic stand-in from gate.engine.generic_faults) and the check runs again.

A control counts only when the fault changed what the check observed; one that did not is
unobservable, never a detection or a lack of power. One failure proves power, so a control runs
with `ctx.stop_at_first_failure` set; one that finds no failure has walked the whole schedule.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gate.core.check import CheckContext, CheckSpec, Outcome
from gate.core.policy import ControlSpec
from gate.core.result import ControlOutcome, ControlResult
from gate.engine.generic_faults import Planted, plant
from gate.engine.profile import ForwardClock, Stopwatch
from gate.errors import SubjectCrash
from gate.protocols import FaultVisibility, offered

UNASSERTED = "the assertion this fault breaks could not be made on this candidate"
"""How a control whose target assertion the check could not make here is reported (unobservable)."""


def observation_difference(clean: Outcome, faulty: Outcome) -> float | None:
    """max |Δ| between the two observations; inf when shapes differ; None when either is missing.
    A control that stopped early compares the prefix it observed when both lay their observation
    out in run order (`Outcome.observation_in_run_order`)."""
    a, b = clean.observation, faulty.observation
    if a is None or b is None:
        return None
    stopped = b.dim() == a.dim() == 1 and b.numel() < a.numel()
    if stopped and clean.observation_in_run_order and faulty.observation_in_run_order:
        a = a[: b.numel()]
    if a.shape != b.shape:
        return float("inf")
    diff = (a.double() - b.double()).abs()
    if bool((a.isnan() ^ b.isnan()).any()):
        return float("inf")
    return float(diff.nan_to_num(0.0).max()) if diff.numel() else 0.0


def run_control(
    spec: CheckSpec[Any],
    ctx: CheckContext,
    params: Any,
    clean: Outcome,
    control: ControlSpec,
    clock: ForwardClock | None = None,
) -> ControlResult:
    """Run one control (stopping at its first failure), classify it and record its time."""
    with Stopwatch(clock) as watch:
        result = _classified_control(spec, ctx, params, clean, control)
    return result.model_copy(
        update={"duration_s": watch.wall_s, "forward_s": watch.forward_s, "subject_s": watch.subject_s}
    )


def _classified_control(
    spec: CheckSpec[Any], ctx: CheckContext, params: Any, clean: Outcome, control: ControlSpec
) -> ControlResult:
    # why the fault cannot change this path's outputs on its architecture, when the path declares it
    declared = offered(ctx.candidate, FaultVisibility)
    invisible = None if declared is None else declared.invisible_faults().get(control.fault)
    planted = plant(ctx.candidate, spec.name, control.fault, own=invisible is None)
    if isinstance(planted, str):
        if invisible is not None:  # declared before running: nothing planted, no power claimed either way
            return ControlResult(
                fault=control.fault,
                outcome=ControlOutcome.unobservable,
                message=f"unobservable on this path, declared before running: {invisible}; and {planted}",
            )
        return ControlResult(fault=control.fault, outcome=ControlOutcome.unsupported, message=planted)
    if planted.kind == "generic":
        why = (
            f"its own {control.fault} is invisible here ({invisible})"
            if invisible is not None
            else f"the adapter plants no {control.fault} of its own"
        )
        return _stood_in(_next_stand_ins(spec, ctx, params, clean, control, planted), why)
    result = _run_planted(spec, ctx, params, clean, control, planted)
    if control.expect == "pass" or not _could_not_show(result):
        return result
    if UNASSERTED in result.message:  # the check cannot make that assertion here, whatever is planted
        return result.model_copy(update={"message": f"{result.message}; no stand-in can make it either"})
    # the adapter's own fault ran but could not show here: the generic fault covering the same rule stands in
    stand_in = plant(ctx.candidate, spec.name, control.fault, own=False)
    own = f"its own {control.fault} {result.outcome.value} at run time ({result.message})"
    if isinstance(stand_in, str):
        return result.model_copy(update={"message": f"{result.message}; no generic stand-in: {stand_in}"})
    return _stood_in(_next_stand_ins(spec, ctx, params, clean, control, stand_in), own)


def _next_stand_ins(
    spec: CheckSpec[Any], ctx: CheckContext, params: Any, clean: Outcome, control: ControlSpec, planted: Planted
) -> ControlResult:
    """Run a generic stand-in; while it could not show, the next generic covering the same rule
    runs (in the order `plant` lists them). The last one's result stands, naming those before it."""
    result = _run_planted(spec, ctx, params, clean, control, planted)
    tried: list[str] = []
    while control.expect != "pass" and _could_not_show(result) and UNASSERTED not in result.message:
        following = plant(ctx.candidate, spec.name, control.fault, own=False, after=result.applied)
        if isinstance(following, str):
            break
        tried.append(f"{result.applied} {result.outcome.value} ({result.message})")
        result = _run_planted(spec, ctx, params, clean, control, following)
    if not tried:
        return result
    return result.model_copy(update={"message": f"after {'; '.join(tried)}: {result.message}"})


def _could_not_show(result: ControlResult) -> bool:
    """An adapter's fault that ran and changed nothing the check could judge (or errored in gate)."""
    return result.outcome in (ControlOutcome.unobservable, ControlOutcome.error)


def _stood_in(result: ControlResult, why: str) -> ControlResult:
    return result.model_copy(
        update={"stand_in": why, "message": f"{why}; generic {result.applied} stands in: {result.message}"}
    )


def _run_planted(
    spec: CheckSpec[Any], ctx: CheckContext, params: Any, clean: Outcome, control: ControlSpec, planted: Planted
) -> ControlResult:
    """Run the check against one planted candidate (stopping at its first failure) and judge it."""
    kind = {"kind": planted.kind, "applied": planted.applied}
    faulty_ctx = replace(ctx, candidate=planted.path, control=control.fault, stop_at_first_failure=True)
    try:
        faulty = spec(faulty_ctx, params)
    except SubjectCrash as crash:  # the faulted subject crashed inside the library: the check failed it
        outcome = ControlOutcome.over_rejected if control.expect == "pass" else ControlOutcome.detected
        return ControlResult(
            fault=control.fault, **kind, outcome=outcome, message=f"the faulted subject crashed in {crash}"
        )
    except Exception as err:  # an error in gate's own code proves nothing either way
        return ControlResult(
            fault=control.fault, **kind, outcome=ControlOutcome.error, message=f"{err.__class__.__name__}: {err}"
        )
    difference = observation_difference(clean, faulty)
    metrics = {k: v for k, v in faulty.metrics.items() if isinstance(v, (int, float, str, bool))}
    base = {"fault": control.fault, **kind, "output_difference": difference, "detected_at": faulty.detected_at}
    return _judged(control, base | {"metrics": metrics}, clean, faulty, difference)


BELOW_POWER = "the fault's effect at these settings is below the check's power"
"""How a control whose fault the check declared underpowered (`Outcome.underpowered`) and passed is reported."""


def targeted_but_unasserted(fault: str, lacking: dict[str, str]) -> dict[str, str]:
    """The identity fields a check could not probe (`Outcome.lacking`) that `fault`'s name points at
    (key-ignores-revision: model-revision)."""
    if not lacking:
        return {}
    from gate.checks.cache_identity.body import points_at
    from gate.checks.planning import IDENTITY_WHY

    return {a: why for a, why in lacking.items() if a in IDENTITY_WHY and points_at(fault, a)}


def _judged(
    control: ControlSpec, base: dict[str, Any], clean: Outcome, faulty: Outcome, difference: float | None
) -> ControlResult:
    failed, spread = faulty.status == "fail", clean.rounding_spread

    def judged(outcome: ControlOutcome, message: str, **more: Any) -> ControlResult:
        return ControlResult(**{**base, **more}, outcome=outcome, message=message)

    if failed and control.expect != "pass" and spread is not None and difference is not None and difference <= spread:
        return judged(
            ControlOutcome.unobservable,
            f"the fault moved the observed outputs by only {difference:.3g}, within the correct path's own "
            f"rounding spread {spread:.3g}: a failure through noise is not power ({faulty.message})",
        )
    if control.expect == "pass" and failed:
        return judged(ControlOutcome.over_rejected, f"harmless fault {control.fault!r} was rejected: {faulty.message}")
    if control.expect == "pass":
        return judged(ControlOutcome.tolerated, f"harmless fault tolerated as expected: {faulty.message}")
    if failed:
        return judged(ControlOutcome.detected, faulty.message)
    unasserted = targeted_but_unasserted(control.fault, faulty.lacking)
    if unasserted:
        # the check could not make the assertion this fault breaks: whatever moved, it is no lack of power
        lacking = "; ".join(f"{a}: {why}" for a, why in unasserted.items())
        return judged(ControlOutcome.unobservable, f"{UNASSERTED} ({lacking}): the control cannot show anything here")
    # an effect the check's power cannot reach at these settings (as either run declared it) is
    # unobservable, never missed, for the subject's own fault and a stand-in alike
    hint = {**clean.underpowered, **faulty.underpowered}.get(control.fault)
    if hint is not None and difference != 0.0:
        return judged(
            ControlOutcome.unobservable,
            f"{BELOW_POWER} ({hint}): passing it is no lack of power",
            metrics={**base["metrics"], "observable_with": hint},
        )
    if difference == 0.0:
        return judged(
            ControlOutcome.unobservable,
            "the fault did not change the observed outputs at these settings (max |Δ| = 0)",
        )
    allowed = max((b for b in (spread, clean.tolerated_change) if b is not None), default=None)
    if allowed is not None and difference is not None and difference <= allowed:
        # a change no larger than a correct path may show (its rounding, or the tolerance band the check
        # accepts): passing it proves no lack of power
        return judged(
            ControlOutcome.unobservable,
            f"the fault moved the observed outputs by only {difference:.3g}, within what the check accepts of "
            f"a correct path at this dtype ({allowed:.3g}): the check cannot be asked to see it",
        )
    return judged(ControlOutcome.missed, f"the fault changed the outputs (max |Δ| = {difference}) but the check passed")


def control_ran(control: ControlResult) -> bool:
    """Whether a fault was planted and the check run against it: not unsupported, not an error in
    gate, and not declared unobservable up front (nothing planted)."""
    if control.outcome in (ControlOutcome.unsupported, ControlOutcome.error):
        return False
    return not (control.outcome == ControlOutcome.unobservable and control.kind is None)


def none_could_show(controls: list[ControlResult]) -> bool:
    """Whether a check's controls showed nothing either way: none detected, none missed, none
    over-rejected (each unsupported, unobservable on this path, or an error in gate)."""
    shown = (ControlOutcome.detected, ControlOutcome.missed, ControlOutcome.over_rejected)
    expected = [c for c in controls if c.outcome != ControlOutcome.tolerated]
    return bool(expected) and not any(c.outcome in shown for c in controls)


def unproven_verdict(check: str, controls: list[ControlResult]) -> str | None:
    """The reason a check's power is unproven: it declares controls and none of them could run, or
    none of those that ran could show anything on this path (no control showed the check can fail)."""
    if not none_could_show(controls):
        return None
    reasons = "; ".join(f"{c.fault}: {c.outcome.value}: {c.message}" for c in controls)
    if not any(control_ran(c) for c in controls):
        return f"unproven: none of the {len(controls)} negative controls of {check} could run ({reasons})"
    settings = observable_with(controls)
    return (
        f"unproven: none of the {len(controls)} negative controls of {check} could show anything on this path, "
        f"their stand-ins included" + (f"; to make them observable: {settings}" if settings else "") + f" ({reasons})"
    )


def observable_with(controls: list[ControlResult]) -> str:
    """The settings that would make the controls whose effect was below the check's power observable."""
    hints = {c.fault: c.metrics["observable_with"] for c in controls if "observable_with" in c.metrics}
    return "; ".join(f"{fault}: {hint}" for fault, hint in hints.items())


def power_verdict(check: str, controls: list[ControlResult]) -> str | None:
    """A failure message when the controls show the check lacks power or over-rejects, else None."""
    problems = [
        f"check {check} has no power against fault {c.fault}" for c in controls if c.outcome == ControlOutcome.missed
    ]
    problems += [
        f"check {check} rejects harmless fault {c.fault}" for c in controls if c.outcome == ControlOutcome.over_rejected
    ]
    return "; ".join(problems) or None
