"""Before anything runs: load, validate and plan a manifest (`prepare`, behind `gate validate`,
`gate plan` and `gate run`), and decide each check's capabilities on the built candidate.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from gate.core.load import LoadedManifest, load_manifest, validate_options
from gate.core.manifest import CheckOverride
from gate.core.plan import Plan, PlannedCheck, build_plan
from gate.core.policy import load_policies
from gate.engine.options import RunOptions
from gate.errors import InputError, UnavailableError

Log = Callable[[str], None]

if TYPE_CHECKING:
    from gate.core.check import Params


def _quiet(_line: str) -> None:
    """No log."""


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


def prepare(
    manifest_path: Path,
    policy_dirs: list[Path],
    params: dict[str, dict[str, Any]] | None = None,
    *,
    allow_unavailable: bool = False,
    device_here: bool = True,
) -> tuple[LoadedManifest, Plan]:
    """Load, validate and plan; raises InputError / UnavailableError before anything runs (for
    `gate validate` and `gate plan` too). `allow_unavailable` (`gate plan`) lists a check that is not
    installed instead of refusing the manifest; `params`: per-check overrides (`gate run --param`);
    `device_here=False` (a Ray cluster) leaves the device to be checked where the run executes.
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

    kind, _, index = device.partition(":")
    count = 0
    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    elif kind == "xpu":
        xpu = getattr(torch, "xpu", None)
        count = xpu.device_count() if xpu is not None and xpu.is_available() else 0
    elif kind == "mps":
        count = 1 if torch.backends.mps.is_available() else 0
    if int(index or 0) >= count:
        raise loaded.doc.error_at(
            ("subject", "device"),
            f"device {device!r} does not exist on this machine ({count} {kind} device(s))",
            "subject.device",
        )


def decide_capabilities(plan: Plan, candidate: Any, log: Log = _quiet) -> Plan:
    """The plan with each check's capabilities decided on the built candidate, before any check runs."""
    from gate.checks.planning import path_offers
    from gate.engine.capabilities import path_check_capabilities

    log(f"the candidate offers {', '.join(sorted(path_offers(candidate))) or 'none of the capabilities'}")
    checks = [p.model_copy(update={"capabilities": path_check_capabilities(p, candidate)}) for p in plan.checks]
    return plan.model_copy(update={"checks": checks})


def left_out(manifest_path: Path, plan: Plan, options: RunOptions) -> list[str]:
    """The planned checks a partial run (`--check`) leaves out; InputError for a `--check` or
    `--param` that names a check the plan does not have."""
    planned_names = [p.check for p in plan.checks]
    unknown = [name for name in [*options.only, *options.params] if name not in planned_names]
    if unknown:
        raise InputError(
            str(manifest_path),
            f"check {unknown[0]!r} is not in this manifest's plan (planned: {', '.join(planned_names)})",
            field="--check" if unknown[0] in options.only else "--param",
        )
    return [name for name in planned_names if options.only and name not in options.only]
