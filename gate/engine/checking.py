"""Running the checks: one check with its negative controls (`run_check`, never raises), every
planned check of a run in order (`run_checks`), and settling the checks that others cover.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from gate.core.plan import Plan, PlannedCheck
from gate.core.result import CheckResult, ErrorInfo, Status
from gate.engine.events import CheckFinished, CheckStarted, ControlFinished, ControlStarted, Events, as_log
from gate.engine.options import RunOptions
from gate.engine.preflight import Log
from gate.engine.profile import ForwardClock, Stopwatch
from gate.engine.run_cache import RunCache
from gate.errors import GateError, SubjectCrash
from gate.protocols import CountsServers, PlansServers, ReleasesControls, offered

if TYPE_CHECKING:
    from gate.core.check import CheckContext, CheckSpec, Params
    from gate.core.manifest import Manifest


def _from_plan(planned: PlannedCheck) -> dict[str, Any]:
    """The fields a check's record takes from its line in the plan."""
    return planned.model_dump(include={"check", "severity", "step", "why"}) | {"policy_rule": planned.source}


def run_check(
    planned: PlannedCheck,
    spec: CheckSpec[Params],
    params: Params,
    ctx: CheckContext,
    clock: ForwardClock | None = None,
    events: Events | None = None,
) -> CheckResult:
    """Run one check and its controls, each stopping at its first failure; never raises. With a
    `clock`, forward time is recorded too; each control's start and result go to `events` (None:
    `ctx.log`). A check that lacks a capability it needs is never started, and is judged as the skip
    it would have returned."""
    from gate.engine.capabilities import not_applicable_outcome, path_check_capabilities
    from gate.engine.controls import control_ran, power_verdict, run_control, unproven_verdict

    decision = planned.capabilities
    if decision is None or decision.read_from != "path":
        decision = path_check_capabilities(planned, ctx.candidate)

    whole = Stopwatch(clock).start()  # the check and its controls

    def _times(**more: Any) -> dict[str, Any]:
        whole.stop()
        return {"duration_s": whole.wall_s, "forward_s": whole.forward_s, "subject_s": whole.subject_s, **more}

    base = {**_from_plan(planned), "unproven": planned.unproven, "params": params.model_dump(mode="json")}
    try:
        with Stopwatch(clock) as positive:
            outcome = (
                not_applicable_outcome(planned, decision)  # never started: it lacks what it needs
                if decision.runs == "not-applicable"
                else spec(ctx, params)
            )
    except SubjectCrash as crash:  # the library under test raised: a finding, not gate's error
        message, diagnosis = f"the subject crashed in {crash}", crash.diagnosis()
        return CheckResult(
            **base, status=Status.failed, message=message, diagnosis=diagnosis, **_times(positive_s=positive.wall_s)
        )
    except Exception as err:
        return CheckResult(
            **base,
            status=Status.error,
            message=f"{err.__class__.__name__}: {err}",
            error=ErrorInfo(type=err.__class__.__name__, message=str(err), traceback=traceback.format_exc()),
            # a GateError's own exit code (an engine that never became ready, timed out, ...) names the run's
            metrics={"exit_code": err.exit_code} if isinstance(err, GateError) else {},
            **_times(),
        )
    status, message = Status(outcome.status), outcome.message
    rule_na = planned.not_applicable
    if status == Status.skip and outcome.absent and rule_na is not None and rule_na.without == outcome.absent:
        # the policy states the check has nothing to judge on such a path: not applicable, no warning
        status, message = Status.not_applicable, f"not applicable, because {rule_na.because.strip()} ({message})"
    elif status == Status.skip and outcome.covered_by:
        # not applicable here; what stands in is settled once the covering checks have run
        base["covered_by"] = dict(outcome.covered_by)
        status, message = Status.unproven, f"not applicable here: {message}"
    elif status == Status.skip and planned.severity == "deny":
        # a required deny check that cannot run proves nothing: unproven, never a silent skip
        status, message = Status.unproven, f"required deny check could not run here ({message})"
    if status == Status.passed and not outcome.exercise:
        status, message = Status.error, "pass without proof of exercise: the candidate path reported no evidence"
    controls = []
    evidence = outcome.evidence
    emit = events or as_log(ctx.log)
    # a check that could assert nothing for lack of capabilities exercised nothing a control could change
    asserted_nothing = outcome.status == "unproven" and bool(outcome.lacking) and not outcome.exercise
    if not asserted_nothing and (status in (Status.passed, Status.warn) or outcome.status == "unproven"):
        for done, control in enumerate(planned.controls):
            emit(ControlStarted(check=planned.check, fault=control.fault, expect=control.expect))
            result = run_control(spec, ctx, params, outcome, control, clock)
            controls.append(result)
            emit(
                ControlFinished(
                    check=planned.check,
                    fault=control.fault,
                    result=result.outcome,
                    detected_at=result.detected_at,
                    message=result.message,
                )
            )
            ctx.progress("controls done", done + 1, len(planned.controls))
        unproven = unproven_verdict(planned.check, controls)
        problem = None if unproven else power_verdict(planned.check, controls)
        if outcome.covered_by and status in (Status.passed, Status.warn) and not any(map(control_ran, controls)):
            # an optional capability let the check run, but none of its own controls can: a capability
            # never makes a check worse, so it is judged as without it, what it showed kept as evidence
            base["covered_by"] = dict(outcome.covered_by)
            evidence = {**evidence, "without_its_controls": {"status": status.value, "message": message}}
            message = (
                f"not applicable here: none of the {len(controls)} negative controls of {planned.check} could run "
                f"on {ctx.candidate.name}, so it is judged as without the capability that let it run; what it "
                f"showed is kept as evidence ({status.value}: {message})"
            )
            status = Status.unproven
        elif unproven:
            also = f"; {message}" if status == Status.unproven else ""
            status, message = Status.unproven, unproven + also
        elif problem:
            status, message = Status.failed, problem
    if status == Status.unproven and outcome.lacking and not unproven_verdict(planned.check, controls):
        # the controls showed power (or nothing could be asserted): a capability the candidate lacks
        base["unproven"] = planned.missing_capability
    return CheckResult(
        **base,
        status=status,
        message=message,
        evidence=evidence,
        metrics={
            **outcome.metrics,
            **({"detected_at": outcome.detected_at} if outcome.detected_at is not None else {}),
        },
        exercise=outcome.exercise,
        controls=controls,
        diagnosis=outcome.diagnosis,
        **_times(positive_s=positive.wall_s),
    )


def settle_covered(checks: list[CheckResult]) -> list[CheckResult]:
    """A check that could not run here and names the checks observing its rule at model level
    (`covered_by`) is unproven-not-applicable, a warning, when every one of them passed (or warned)
    and showed power in this run; otherwise it stays unproven, its message naming what did not hold."""
    from gate.engine.controls import none_could_show

    by_name = {c.check: c for c in checks}
    settled = []
    for check in checks:
        if check.status != Status.unproven or not check.covered_by:
            settled.append(check)
            continue
        held, short = [], []
        for name in check.covered_by:
            other = by_name.get(name)
            detected = [c for c in other.controls if c.outcome.value == "detected"] if other else []
            if other is None or other.status == Status.skip:
                short.append(f"{name} did not run")
            elif other.status not in (Status.passed, Status.warn):
                short.append(f"{name} is {other.status.value}")
            elif none_could_show(other.controls) or not detected:
                short.append(f"{name} showed no power")
            else:
                held.append(
                    f"{name} ({other.status.value}, {len(detected)} of {len(other.controls)} controls detected)"
                )
        if short:
            message = f"{check.message}; what stands in did not hold ({'; '.join(short)}), so it stays unproven"
            settled.append(check.model_copy(update={"message": message}))
            continue
        message = (
            f"unproven-not-applicable: {check.message.removeprefix('not applicable here: ')}; its rule is observed at "
            f"model level by {', '.join(held)}: a warning, not a pass"
        )
        settled.append(check.model_copy(update={"unproven": "warn", "message": message}))
    return settled


@contextmanager
def _settled_heap() -> Iterator[None]:
    """Everything loaded so far outlives the checks: frozen out of the cyclic collector's sight while
    they run (a full collection walks only what the checks made), handed back afterwards."""
    import gc

    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _release_controls(candidate: Any, later: list[PlannedCheck], not_run: list[str], log: Log) -> None:
    """After a check, free what the controls no later check names hold (an engine's control servers)."""
    if (releasing := offered(candidate, ReleasesControls)) is not None:
        keep = {c.fault for p in later if p.check not in not_run for c in p.controls}
        for freed in releasing.release_controls(keep):
            log(f"  stopped {freed}: no later check uses it")


def _plan_servers(candidate: Any, ahead: list[PlannedCheck], not_run: list[str]) -> None:
    """Before a check, tell an engine which checks and controls are still to run, so the cap on its
    servers stops one no later check needs rather than one a later check would start again."""
    if isinstance(candidate, PlansServers) and offered(candidate, ReleasesControls) is not None:
        runs = [
            p
            for p in ahead
            if p.check not in not_run and not (p.capabilities and p.capabilities.runs == "not-applicable")
        ]
        candidate.plan_servers([[None, *(c.fault for c in p.controls)] for p in runs])


def servers_started(candidate: Any) -> dict[str, Any] | None:
    """What the run's server processes cost, once every check and control is done (an engine's)."""
    return candidate.servers_started() if isinstance(candidate, CountsServers) else None


def run_checks(
    plan: Plan,
    specs: dict[str, CheckSpec[Params]],
    params: dict[str, Params],
    paths: dict[str, Any],
    manifest: Manifest,
    not_run: list[str],
    options: RunOptions,
    *,
    log: Log,
    progress: Callable[[str, int, int], None] | None,
    events: Events | None,
) -> list[CheckResult]:
    """Every planned check in order, each with its controls, on one cache shared by the run; a check
    a partial run leaves out is recorded as not run. The results as each check settled them."""
    from gate.core.check import CheckContext

    subject = manifest.subject
    emit = events or as_log(log)
    checks: list[CheckResult] = []
    cache = RunCache()  # shared by every check of this run and their controls, dropped with the run
    clock = ForwardClock() if options.profile else None
    with clock or nullcontext(), _settled_heap():
        for index, planned in enumerate(plan.checks):
            if planned.check in not_run:
                only = ", ".join(options.only)
                message = f"not run: this run was limited to --check {only}; the manifest has no verdict from it"
                checks.append(CheckResult(**_from_plan(planned), status=Status.skip, message=message))
                continue
            _plan_servers(paths["candidate"], plan.checks[index:], not_run)
            emit(CheckStarted(check=planned.check, step=planned.step, severity=planned.severity))
            if planned.capabilities is not None:  # the same words as `gate plan` and the dossier
                needs, means = planned.capabilities.in_words()
                log(f"  needs:    {needs}")
                log(f"  means:    {means}")
            ctx = CheckContext(
                manifest=manifest,
                reference=paths["reference"],
                candidate=paths["candidate"],
                seed=subject.seed,
                device=subject.device,
                dtype=subject.dtype,
                log=log,
                progress=progress or (lambda _task, _done, _total: None),
                cache=cache,
            )
            # a recording runs the controls too: a planted fault leads a check to questions of its own
            check_result = run_check(
                planned, specs[planned.check], params[planned.check], ctx, clock=clock, events=events
            )
            emit(CheckFinished(check=planned.check, status=check_result.status, message=check_result.message))
            checks.append(check_result)
            _release_controls(paths["candidate"], plan.checks[index + 1 :], not_run, log)
    return checks
