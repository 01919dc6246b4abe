"""The runner: Plan -> checks (with their negative controls) -> GateResult, written atomically.

Every check runs even when an earlier one fails; an exception inside a check becomes that check's
`error` with its traceback, and the verdict says so.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

if TYPE_CHECKING:
    from gate.core.check import CheckContext, CheckSpec, Params

import gate
from gate._util.atomic import write_bytes_atomic
from gate._util.clock import now_utc
from gate.core.load import LoadedManifest, load_manifest, validate_options
from gate.core.manifest import CheckOverride, ClaimLevel
from gate.core.plan import Plan, PlannedCheck, build_plan
from gate.core.policy import load_policies
from gate.core.result import CheckResult, Digest, ErrorInfo, GateResult, KnownBugRecord, Status, Verdict
from gate.engine.events import CheckFinished, CheckStarted, ControlFinished, ControlStarted, Events, as_log
from gate.engine.options import RunOptions
from gate.engine.profile import ForwardClock, Stopwatch
from gate.engine.run_cache import RunCache
from gate.errors import (
    EXIT_AWAITING_APPROVAL,
    EXIT_BAD_INPUT,
    EXIT_CHECK_ERROR,
    EXIT_GATE_FAILED,
    EXIT_PARTIAL,
    EXIT_PASS,
    EXIT_UNPROVEN,
    GateError,
    InputError,
    SubjectCrash,
    UnavailableError,
)
from gate.protocols import PlansServers, ReleasesControls, offered

Log = Callable[[str], None]


def _quiet(_line: str) -> None:
    """No log."""


def _no_progress(_task: str, _done: int, _total: int) -> None:
    """No progress."""


def _error_result(base: dict[str, Any], err: BaseException, times: dict[str, Any]) -> CheckResult:
    return CheckResult(
        **base,
        status=Status.error,
        message=f"{err.__class__.__name__}: {err}",
        error=ErrorInfo(type=err.__class__.__name__, message=str(err), traceback=traceback.format_exc()),
        # a GateError's own exit code (an engine that never became ready, timed out, ...) names the run's
        metrics={"exit_code": err.exit_code} if isinstance(err, GateError) else {},
        **times,
    )


def _crash_result(base: dict[str, Any], crash: SubjectCrash, times: dict[str, Any]) -> CheckResult:
    return CheckResult(
        **base,
        status=Status.failed,
        message=f"the subject crashed in {crash}",
        diagnosis=crash.diagnosis(),
        **times,
    )


def _validated_params(loaded: LoadedManifest, planned: PlannedCheck, model: type[Params]) -> Params:
    try:
        return model.model_validate(planned.params)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in first["loc"])
        if planned.check in loaded.manifest.checks:
            where = ("checks", planned.check, "params", *first["loc"])
            raise loaded.doc.error_at(where, first["msg"], f"checks.{planned.check}.params.{loc}") from None
        raise InputError(
            planned.source.split(":")[0], f"{first['msg']} ({planned.source})", field=f"params.{loc}"
        ) from None


def _from_plan(planned: PlannedCheck) -> dict[str, Any]:
    """The fields a check's record takes from its line in the plan."""
    return planned.model_dump(include={"check", "severity", "step", "why"}) | {"policy_rule": planned.source}


def _not_run(planned: PlannedCheck, only: list[str]) -> CheckResult:
    """The record of a planned check a partial run left out: skipped, and saying why."""
    return CheckResult(
        **_from_plan(planned),
        status=Status.skip,
        message=f"not run: this run was limited to --check {', '.join(only)}; the manifest has no verdict from it",
    )


def run_check(
    planned: PlannedCheck,
    spec: CheckSpec[Params],
    params: Params,
    ctx: CheckContext,
    run_controls: bool = True,
    clock: ForwardClock | None = None,
    events: Events | None = None,
) -> CheckResult:
    """Run one check and (unless `run_controls` is false) its controls, each stopping at its first
    failure; never raises. With a `clock`, forward time is recorded too; each control's start and
    result go to `events` (None: `ctx.log`).

    Before anything runs, the check's declared needs are read against what the candidate offers
    (`planned.capabilities` as the run decided it, else decided here on `ctx.candidate`): a check
    that lacks a capability it needs is never started, and is judged as the skip it would have
    returned (the policy rule's `not_applicable`, the checks that cover it, or unproven)."""
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
        return _crash_result(base, crash, _times(positive_s=positive.wall_s))
    except Exception as err:
        return _error_result(base, err, _times())
    status = Status(outcome.status)
    message = outcome.message
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
    if (
        run_controls
        and not asserted_nothing
        and (status in (Status.passed, Status.warn) or outcome.status == "unproven")
    ):
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
            # an optional capability (an attention probe) let the check run, but none of its own controls
            # can: a capability the subject adds never makes a check worse, so it is judged as without it
            # (not applicable, its rule observed at model level), what it showed kept as evidence
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
        # the controls showed power (or nothing could be asserted): what is left unproven is a
        # capability the candidate lacks
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
    (`covered_by`) is unproven-not-applicable, a warning, when every one of them ran in this run,
    passed (or warned) and showed power (a control detected); otherwise it stays unproven as its
    policy rule says, and its message names what did not hold."""
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


def decide(
    checks: list[CheckResult],
    claim: ClaimLevel,
    not_run: list[str] | None = None,
    known_bugs: list[KnownBugRecord] | None = None,
) -> tuple[Verdict, int, str]:
    """Verdict, exit code and summary from the check results. `not_run`: planned checks a partial
    run (`gate run --check`) left out; then nothing short of a failure or an error is a verdict.
    `known_bugs`: the manifest's declarations as settled (gate.core.known_bugs): a check that failed
    as one declares is a warning (it does not colour the verdict), named in the summary."""
    errors = [c.check for c in checks if c.status == Status.error]
    denied = [c.check for c in checks if c.status == Status.failed and c.severity == "deny"]
    partial = f" (partial run: {len(not_run)} planned checks not run)" if not_run else ""
    if errors:
        codes = [c.metrics.get("exit_code") for c in checks if c.status == Status.error]
        code = codes[0] if isinstance(codes[0], int) else EXIT_CHECK_ERROR
        return Verdict.error, code, f"error in {', '.join(errors)}" + partial
    if denied:
        return Verdict.failed, EXIT_GATE_FAILED, f"failed: {', '.join(denied)}" + partial
    unproven = [c for c in checks if c.status == Status.unproven and c.unproven == "deny"]
    if unproven:
        from gate.engine.controls import none_could_show

        powerless = {c.check for c in unproven if none_could_show(c.controls)}
        no_controls = [c.check for c in unproven if c.check in powerless]
        other = [c.check for c in unproven if c.check not in powerless]
        why = []
        if no_controls:
            why.append(
                f"{', '.join(no_controls)} passed, but none of their negative controls could run (or show "
                "anything) on this candidate, so the gate never showed these checks can fail"
            )
        if other:
            why.append(f"{', '.join(other)} could not cover what the policy requires (see each check)")
        return Verdict.unproven, EXIT_UNPROVEN, "unproven: " + "; ".join(why) + partial
    if not_run:
        alone = [c.check for c in checks if c.check not in not_run]
        return (
            Verdict.partial,
            EXIT_PARTIAL,
            f"partial run: {', '.join(alone)} {'was' if len(alone) == 1 else 'were'} run alone and did not fail; "
            f"{len(not_run)} other planned checks were not run ({', '.join(not_run)}), so this is no verdict "
            "on the manifest",
        )
    waived = [c.check for c in checks if c.status == Status.waived]
    skipped = [c.check for c in checks if c.status == Status.skip]
    warned = [c.check for c in checks if c.status == Status.unproven]
    note = f" ({len(waived)} waived: {', '.join(waived)})" if waived else ""
    note += f" ({len(skipped)} skipped: {', '.join(skipped)})" if skipped else ""
    not_here = [c.check for c in checks if c.status == Status.not_applicable]
    note += f" ({len(not_here)} not applicable: {', '.join(not_here)})" if not_here else ""
    counted = tally(checks)
    lead = ""
    if any(_is_warning(c) for c in checks):  # the tally names what the counts above would
        lead, note = f"{counted}; ", ""
    by_policy = [c.check for c in checks if c.status == Status.unproven and not c.covered_by]
    not_applicable = [c.check for c in checks if c.status == Status.unproven and c.covered_by]
    note += f"; unproven (a warning by policy, not a pass): {', '.join(by_policy)}" if by_policy else ""
    note += f"; unproven-not-applicable (a warning, not a pass): {', '.join(not_applicable)}" if not_applicable else ""
    for bug in known_bugs or []:
        if bug.disposition in ("expected", "not-showing", "expired"):
            note += f"; {bug.note}"
    if claim == ClaimLevel.bounded_degradation:
        from gate.core.evidence import ENVELOPE_CHECKS

        if not any(c.check in ENVELOPE_CHECKS and c.status != Status.skip for c in checks):
            held = "no check judged the claim's envelopes (the plan runs none), and every check that ran held"
        else:
            held = "every deny check held" if waived else "every envelope held"
        return (
            Verdict.awaiting_approval,
            EXIT_AWAITING_APPROVAL,
            f"{lead}{held}; an approximate change waits for a signed approval" + note,
        )
    if waived:
        ran = len(checks) - len(skipped) - len(waived) - len(not_here)
        held = f"{ran} checks passed, {len(waived)} failed and waived"
        return Verdict.passed_with_waivers, EXIT_PASS, lead + held + note
    ran = len(checks) - len(skipped) - len(not_here)
    which = "checks that ran" if skipped else "required checks"
    if warned:
        held = f"{ran - len(warned)} of {ran} {which} passed"
    elif ran == 1:
        held = "the one check that ran passed" if skipped else "the one required check passed"
    else:
        held = f"all {ran} {which} passed"
    return Verdict.passed, EXIT_PASS, (counted if lead else held) + note


def reference_origin(baseline: dict[str, Any] | None) -> str | None:
    """Where the reference's answers came from when they were stored ones, in words for the verdict
    line: a replayed recording (checked to be main's commit before the run) or the reference cache."""
    if not baseline or not baseline.get("answers_read"):
        return None
    read = baseline["answers_read"]
    if baseline.get("kind") == "recorded baseline":
        commit = str(baseline.get("commit") or "")
        return f"reference: main's recording at {commit[:12] or 'an unnamed commit'}, {read} answers"
    if baseline.get("kind") == "reference cache":
        return f"reference: the reference cache, {read} answers read, {baseline.get('answers_computed', 0)} computed"
    return None


def _is_warning(check: CheckResult) -> bool:
    """A result that lets the verdict stand but is not a pass: a warn, an unproven the policy lets
    through, or a failed warn-severity check."""
    return check.status in (Status.warn, Status.unproven) or (
        check.status == Status.failed and check.severity == "warn"
    )


def _gist(check: CheckResult) -> str:
    """A warning in a few words, pytest style: the check and what it warns of (no intervals)."""
    if check.status == Status.unproven:
        return f"{check.check} unproven"
    first = check.message.split(";")[0].rsplit(": ", 1)[-1]
    kept: list[str] = []
    for part in re.sub(r"\s*\[[^\]]*\]", "", first).strip().split(", "):
        if kept and len(", ".join([*kept, part])) > 60:
            kept.append("…")
            break
        kept.append(part)
    return " ".join([check.check, ", ".join(kept)]).replace(", …", " …").strip()


def tally(checks: list[CheckResult]) -> str:
    """What the checks came to, pytest style: `7 passed, 1 warning (phase-performance throughput
    x0.61), 1 not applicable (invalidation)`; the verdict line, results.json's summary and the
    banner lead with it when a warning lets the verdict stand."""
    warnings = [c for c in checks if _is_warning(c)]
    passed = sum(1 for c in checks if c.status == Status.passed)
    parts = [f"{passed} passed"]
    if warnings:
        noun = "warning" if len(warnings) == 1 else "warnings"
        parts.append(f"{len(warnings)} {noun} ({'; '.join(_gist(c) for c in warnings)})")
    for status, words in (
        (Status.not_applicable, "not applicable"),
        (Status.waived, "waived"),
        (Status.skip, "skipped"),
    ):
        names = [c.check for c in checks if c.status == status]
        if names:
            parts.append(f"{len(names)} {words} ({', '.join(names)})")
    return ", ".join(parts)


def _stored_reference(path: Any, spec: Any, manifest_name: str, options: RunOptions, log: Log) -> Any:
    """The reference path behind the reference cache or the recording store, when asked for."""
    from gate.adapters.recorded.store import BaselineStore, StoredPath, cached_reference, new_header

    if options.record is not None:
        store = BaselineStore(options.record, new_header(path, spec.adapter, spec.options, manifest_name), dirty=True)
        log(f"recording the reference's answers into {options.record}")
        return StoredPath(store, path, mode="recording")
    if options.reference_cache is not None and not isinstance(path, StoredPath):
        stored = cached_reference(options.reference_cache, path, spec.adapter, spec.options, manifest_name)
        log(f"reference cache: {stored.store.directory} ({len(stored.store.index)} stored answers)")
        return stored
    return path


def _threads_of_recording(path: Any, log: Log) -> None:
    """A float32 matmul's bits depend on how many threads split it: stored answers are replayed
    with the torch thread count they were recorded with, so the candidate computes as the recorded
    reference did (an exact claim compares bits; docs/baselines.md)."""
    import torch

    from gate.adapters.recorded.store import StoredPath

    if not isinstance(path, StoredPath) or path.mode == "recording":
        return
    recorded = path.store.header.get("torch_threads")
    if isinstance(recorded, int) and recorded >= 1 and recorded != torch.get_num_threads():
        log(
            f"the stored answers were computed with {recorded} torch threads, this run had "
            f"{torch.get_num_threads()}: the run uses {recorded}, so float32 bits compare as recorded"
        )
        torch.set_num_threads(recorded)


def _baseline_record(path: Any, log: Log) -> dict[str, Any] | None:
    """Save a writing store; describe the store the reference answered from, for the record."""
    from gate.adapters.recorded.store import StoredPath

    if not isinstance(path, StoredPath):
        return None
    store = path.store
    store.save()
    kind = path.mode
    log(f"{kind}: {store.hits} answers read, {store.misses} computed ({store.directory})")
    return {
        "kind": kind,
        "path": str(store.directory),
        "sha256": store.digest() if (store.directory / "baseline.json").is_file() else None,
        "key": store.key,
        "gate_commit": store.header.get("gate_commit"),
        "commit": store.header.get("commit"),
        "gate_version": store.header.get("gate_version"),
        "answers_read": store.hits,
        "answers_computed": store.misses,
        **({"live_reference": f"{path.live_built} (built for clocks and layer traces)"} if path.live_built else {}),
    }


def prepare(
    manifest_path: Path,
    policy_dirs: list[Path],
    params: dict[str, dict[str, Any]] | None = None,
    *,
    allow_unavailable: bool = False,
    device_here: bool = True,
) -> tuple[LoadedManifest, Plan]:
    """Load, validate and plan; raises InputError / UnavailableError before anything runs.

    Everything `gate run` checks is checked here, for `gate validate` and `gate plan` too: the
    manifest (limits, types, finite numbers), the policies, adapter options, each check's params
    against its Params model, and that the device exists. `allow_unavailable` (for `gate plan`)
    lists a check that is not installed instead of refusing the manifest. `params`: per-check overrides
    merged over the manifest's `checks.NAME.params` (`gate run --param`). `device_here=False` (a batch
    sent to a Ray cluster) leaves the device to be checked where the run executes.
    """
    loaded = load_manifest(manifest_path)
    if params:
        merged = {name: override.model_copy() for name, override in loaded.manifest.checks.items()}
        for name, values in params.items():
            old = merged.get(name, CheckOverride())
            merged[name] = CheckOverride(params={**old.params, **values})
        loaded.manifest = loaded.manifest.model_copy(update={"checks": merged})
    plan = build_plan(loaded.manifest, loaded.doc, load_policies(policy_dirs))
    for planned in plan.checks:
        if not planned.available and not allow_unavailable:
            raise UnavailableError(f"check {planned.check} required by policy {planned.source} is not available")
    validate_options(loaded)
    for planned in plan.checks:
        if planned.available:
            _validated_params(loaded, planned, load_params_model(planned.check))
    if device_here:
        check_device(loaded)
    return loaded, plan


def load_params_model(name: str) -> type[Params]:
    """The params model of check `name`: for a built-in from gate.checks.planning (no torch), for a
    plugin by importing the plugin."""
    from gate.checks.planning import BUILTIN_PARAMS
    from gate.core.registry import CHECK_GROUP, entry_point_of, load_check

    ep = entry_point_of(CHECK_GROUP, name)
    if ep is not None and name in BUILTIN_PARAMS and ep.value.startswith("gate.checks."):
        return BUILTIN_PARAMS[name]
    return load_check(name).params


def check_device(loaded: LoadedManifest) -> None:
    """Refuse a device this machine does not have (`cuda:99` on a CPU machine) as bad input."""
    device = loaded.manifest.subject.device
    if device == "cpu":
        return
    import torch

    kind, _, index_text = device.partition(":")
    index = int(index_text or 0)
    count = 0
    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    elif kind == "xpu":
        xpu = getattr(torch, "xpu", None)
        count = xpu.device_count() if xpu is not None and xpu.is_available() else 0
    elif kind == "mps":
        count = 1 if torch.backends.mps.is_available() else 0
    if index >= count:
        raise loaded.doc.error_at(
            ("subject", "device"),
            f"device {device!r} does not exist on this machine ({count} {kind} device(s))",
            "subject.device",
        )


@contextmanager
def _settled_heap() -> Iterator[None]:
    """Everything loaded so far (libraries, models, policies) outlives the checks: moved out of the
    cyclic collector's sight while they run, so a full collection (one a library's first call can
    set off) walks only what the checks made; handed back afterwards, so nothing outlives the run."""
    import gc

    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def decide_capabilities(plan: Plan, candidate: Any, log: Log = _quiet) -> Plan:
    """The plan with each check's capabilities decided on the built candidate (what it needs, what
    the candidate offers, what that means: gate.engine.capabilities), before any check runs: the
    decision the run records in its plan and keeps (a check found not applicable is never started)."""
    from gate.checks.planning import path_offers
    from gate.engine.capabilities import path_check_capabilities

    log(f"the candidate offers {', '.join(sorted(path_offers(candidate))) or 'none of the capabilities'}")
    checks = [p.model_copy(update={"capabilities": path_check_capabilities(p, candidate)}) for p in plan.checks]
    return plan.model_copy(update={"checks": checks})


def _release_controls(candidate: Any, later: list[PlannedCheck], not_run: list[str], log: Log) -> None:
    """After a check, free what the controls no later check names hold (an engine's control servers)."""
    if (releasing := offered(candidate, ReleasesControls)) is not None:
        keep = {c.fault for p in later if p.check not in not_run for c in p.controls}
        for freed in releasing.release_controls(keep):
            log(f"  stopped {freed}: no later check uses it")


_NOT_APPLICABLE = "not-applicable"


def _plan_servers(candidate: Any, ahead: list[PlannedCheck], not_run: list[str]) -> None:
    """Before a check, tell an engine which checks and controls are still to run, so the cap on its
    servers stops one no later check needs rather than one a later check would start again."""
    if isinstance(candidate, PlansServers) and offered(candidate, ReleasesControls) is not None:
        runs = [
            p
            for p in ahead
            if p.check not in not_run and not (p.capabilities and p.capabilities.runs == _NOT_APPLICABLE)
        ]
        candidate.plan_servers([[None, *(c.fault for c in p.controls)] for p in runs])


def run_manifest(
    manifest_path: Path,
    out_dir: Path,
    options: RunOptions | None = None,
    *,
    log: Log | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    events: Events | None = None,
    prepared: tuple[LoadedManifest, Plan] | None = None,
) -> GateResult:
    """Run a manifest end to end and write `results.json` atomically into `out_dir`.

    `log`: the run's lines; `progress(task, done, total)`: progress inside long checks; `events`:
    each check's start and result and each control's (gate.engine.events; None: their lines go to
    `log`); `prepared`: what `prepare` returned for this manifest, when the caller already checked it.
    """
    from gate.core.check import CheckContext
    from gate.core.registry import load_adapter, load_check
    from gate.errors import AdapterUnavailable

    started_at = now_utc()
    options = options or RunOptions()
    log = log or _quiet
    emit = events or as_log(log)
    loaded, plan = prepared or prepare(manifest_path, list(options.policy_dirs), options.params)
    planned_names = [p.check for p in plan.checks]
    unknown = [name for name in [*options.only, *options.params] if name not in planned_names]
    if unknown:
        raise InputError(
            str(manifest_path),
            f"check {unknown[0]!r} is not in this manifest's plan (planned: {', '.join(planned_names)})",
            field="--check" if unknown[0] in options.only else "--param",
        )
    not_run = [name for name in planned_names if options.only and name not in options.only]
    manifest = loaded.manifest
    from gate.trust.policy import find_trust

    trust = find_trust(options.trust)  # a bad trust policy stops the run before any check
    for spec in (manifest.subject.reference, manifest.subject.candidate):
        if spec.adapter == "recorded" and isinstance(spec.options.get("baseline"), str):
            from gate.trust.baseline import require_trusted_baseline

            require_trusted_baseline(Path(spec.options["baseline"]), trust, options.baseline_commit, manifest.name)
    specs = {p.check: load_check(p.check) for p in plan.checks}
    waivers = None
    ledger = options.ledger_path
    if ledger is not None:
        from gate.trust.waivers import ledger_waivers

        waivers = ledger_waivers(ledger, trust)  # a broken ledger stops the run before any check
    params = {p.check: _validated_params(loaded, p, specs[p.check].params) for p in plan.checks}

    subject = manifest.subject
    checks: list[CheckResult] = []
    subjects: dict[str, Any] = {}
    paths = {}
    for role in ("reference", "candidate"):
        spec = getattr(subject, role)
        # only loading the adapter and building its path can say "cannot run here" (a missing extra,
        # no driver, a device the library refuses); an error anywhere else is not relabelled
        try:
            adapter = load_adapter(spec.adapter)()
            log(f"building {role} path ({spec.adapter})")
            paths[role] = adapter.build(
                adapter.Options.model_validate(spec.options),
                device=subject.device,
                dtype=subject.dtype,
                seed=subject.seed,
            )
        except (AdapterUnavailable, UnavailableError, ImportError, RuntimeError) as err:
            raise UnavailableError(f"adapter could not run: {err.__class__.__name__}: {err}") from err
        subjects[role] = {"adapter": spec.adapter, "path": paths[role].name, **paths[role].identity()}
    paths["reference"] = _stored_reference(paths["reference"], subject.reference, manifest.name, options, log)
    _threads_of_recording(paths["reference"], log)
    plan = decide_capabilities(plan, paths["candidate"], log)

    cache = RunCache()  # shared by every check of this run and their controls, dropped with the run
    clock = ForwardClock() if options.profile else None
    with clock or nullcontext(), _settled_heap():
        for index, planned in enumerate(plan.checks):
            if planned.check in not_run:
                checks.append(_not_run(planned, list(options.only)))
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
                progress=progress or _no_progress,
                cache=cache,
            )
            # a recording runs the controls too: a planted fault leads a check to questions of its own
            # (schedule-fuzz shrinks a failing schedule), which the replay's controls will ask again
            check_result = run_check(
                planned, specs[planned.check], params[planned.check], ctx, clock=clock, events=events
            )
            emit(CheckFinished(check=planned.check, status=check_result.status, message=check_result.message))
            checks.append(check_result)
            _release_controls(paths["candidate"], plan.checks[index + 1 :], not_run, log)

    checks = settle_covered(checks)
    from gate.core.known_bugs import apply_known_bugs

    checks, known_bugs = apply_known_bugs(checks, plan.known_bugs)
    baseline = _baseline_record(paths["reference"], log)
    if waivers is not None:
        from gate.trust.waivers import apply_waivers

        checks = apply_waivers(loaded, checks, waivers)
    verdict, exit_code, summary = decide(checks, plan.claim, not_run, known_bugs)
    origin = reference_origin(baseline)
    summary += f"; {origin}" if origin else ""
    datasets = {name: str(fp) for c in checks for name, fp in (c.evidence.get("datasets") or {}).items()}
    from gate.engine.environment import describe

    result = GateResult(
        gate_version=gate.__version__,
        verdict=verdict,
        exit_code=exit_code,
        summary=summary,
        manifest=manifest.model_dump(mode="json", by_alias=True),
        manifest_digest=Digest(path=str(loaded.path), sha256=loaded.sha256),
        policies=plan.policies,
        site_policy=plan.site_policy,
        baseline=baseline,
        plan=plan.model_dump(mode="json"),
        checks=checks,
        subjects=subjects,
        datasets=datasets,
        environment=describe(subject.device),
        started_at=started_at,
        finished_at=now_utc(),
        trust_policy=Digest(path=trust.path, sha256=trust.sha256) if trust is not None else None,
        known_bugs=known_bugs,
    )
    write_bytes_atomic(out_dir / "results.json", (result.model_dump_json(indent=2) + "\n").encode())
    return result


__all__ = ["EXIT_BAD_INPUT", "RunOptions", "decide", "decide_capabilities", "prepare", "run_manifest"]
