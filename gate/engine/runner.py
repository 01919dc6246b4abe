"""The runner: Plan -> checks (with their negative controls) -> GateResult, written atomically.

Every check runs even when an earlier one fails; an exception inside a check becomes that check's
`error`. The steps live in gate.engine.preflight, .subject, .checking and .verdict; their public
names stay importable from here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gate._util.clock import now_utc
from gate.core.load import LoadedManifest
from gate.core.plan import Plan
from gate.core.result import GateResult
from gate.engine.checking import run_check as run_check
from gate.engine.checking import run_checks, servers_started
from gate.engine.checking import settle_covered as settle_covered
from gate.engine.events import Events
from gate.engine.options import RunOptions
from gate.engine.preflight import Log, _quiet, _validated_params, decide_capabilities, left_out, prepare
from gate.engine.preflight import check_device as check_device
from gate.engine.preflight import load_params_model as load_params_model
from gate.engine.subject import _baseline_record, build_paths
from gate.engine.verdict import decide, seal
from gate.engine.verdict import reference_origin as reference_origin
from gate.engine.verdict import tally as tally
from gate.errors import EXIT_BAD_INPUT


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
    """Run a manifest end to end and write `results.json` atomically into `out_dir`. `prepared`: what
    `prepare` returned for this manifest, when the caller already checked it."""
    from gate.core.registry import load_check
    from gate.trust.policy import find_trust

    started_at = now_utc()
    options = options or RunOptions()
    log = log or _quiet
    loaded, plan = prepared or prepare(manifest_path, list(options.policy_dirs), options.params)
    not_run = left_out(manifest_path, plan, options)
    manifest = loaded.manifest
    trust = find_trust(options.trust)  # a bad trust policy stops the run before any check
    for spec in (manifest.subject.reference, manifest.subject.candidate):
        if spec.adapter == "recorded" and isinstance(spec.options.get("baseline"), str):
            from gate.trust.baseline import require_trusted_baseline

            require_trusted_baseline(Path(spec.options["baseline"]), trust, options.baseline_commit, manifest.name)
    specs = {p.check: load_check(p.check) for p in plan.checks}
    waivers = None
    if options.ledger_path is not None:
        from gate.trust.waivers import ledger_waivers

        waivers = ledger_waivers(options.ledger_path, trust)  # a broken ledger stops the run before any check
    params = {p.check: _validated_params(loaded, p, specs[p.check].params) for p in plan.checks}

    paths, subjects = build_paths(manifest, options, log)
    plan = decide_capabilities(plan, paths["candidate"], log)
    checks = run_checks(
        plan, specs, params, paths, manifest, not_run, options, log=log, progress=progress, events=events
    )
    return seal(
        out_dir,
        loaded,
        plan,
        checks,
        not_run=not_run,
        waivers=waivers,
        baseline=_baseline_record(paths["reference"], log),
        subjects=subjects,
        servers=servers_started(paths["candidate"]),
        trust=trust,
        started_at=started_at,
    )


# `X as X` above: importable from here as before the split, outside __all__ as they were
__all__ = ["EXIT_BAD_INPUT", "RunOptions", "decide", "decide_capabilities", "prepare", "run_manifest"]
