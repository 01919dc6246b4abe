"""`gate diff`: two results.json records side by side, as one change per line.

Compared: the verdict, each check's status and measures, identity and versions, and the plan;
wall-clock values never (gate.core.result.WALL_CLOCK_KEYS): they differ between any two runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from gate.core.result import WALL_CLOCK_CHECKS, WALL_CLOCK_KEYS, CheckResult, GateResult
from gate.errors import InputError
from gate.report.fmt import as_float, display, number

Section = Literal["verdict", "check", "identity", "version", "plan"]
SECTIONS: tuple[Section, ...] = ("verdict", "check", "identity", "version", "plan")


class Change(BaseModel):
    """One thing that differs between the two runs."""

    section: Section
    item: str
    """The check, identity field, version or plan element that changed."""
    field: str
    """What of it changed (status, first failing, a measure, sha256, ...); "" for the item itself."""
    a: str | None
    """Its value in A (None: absent)."""
    b: str | None
    """Its value in B (None: absent)."""


class ResultDiff(BaseModel):
    """`gate diff A B` as data (`--format json`)."""

    a: str
    b: str
    a_label: str
    """How A was chosen (the directory given, or the ledger entry that named it)."""
    b_label: str
    verdict_a: str
    verdict_b: str
    changes: list[Change]
    unchanged: dict[str, list[str]]
    """Per section, the items compared and found equal (folded into one line each)."""


def load_result(directory: Path) -> GateResult:
    """The record in DIR/results.json (or the file itself), or one located InputError line."""
    path = directory / "results.json" if directory.is_dir() else directory
    if not path.is_file():
        raise InputError(str(path), "no results.json here (give a dossier directory from `gate run --out`)")
    try:
        return GateResult.model_validate_json(path.read_bytes())
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise InputError(str(path), first["msg"], field=where) from None
    except (OSError, ValueError) as err:
        raise InputError(str(path), f"unreadable results.json ({err.__class__.__name__})") from None


def wall_clock(key: str) -> bool:
    """A key whose value is a time or a rate: WALL_CLOCK_KEYS, and any `*_s`, `*seconds` or `*_per_s`."""
    return key in WALL_CLOCK_KEYS or key.endswith(("_s", "seconds"))


def _flatten(value: Any, prefix: str = "", depth: int = 3) -> dict[str, str]:
    """Nested mappings as dotted keys -> displayed values (wall-clock keys left out)."""
    if isinstance(value, Mapping) and depth > 0:
        out: dict[str, str] = {}
        for key, inner in value.items():
            if wall_clock(str(key)):
                continue
            out.update(_flatten(inner, f"{prefix}.{key}" if prefix else str(key), depth - 1))
        return out
    return {prefix: display(value, limit=120)} if prefix else {}


def first_failing(check: CheckResult) -> str | None:
    """Where the check first failed ("prefix length 37", "index 4"), as the dossier says it."""
    from gate.report.build import _detected_at
    from gate.report.evidence import read_evidence

    try:
        views = read_evidence(check.check, check.evidence)
        length = views.first_failing_length
    except (ValueError, TypeError, KeyError):
        length = None
    return _detected_at(check, length)


def intervals(metrics: Mapping[str, Any]) -> dict[str, tuple[float, float, float]]:
    """`X_ratio` -> (ratio, low, high) for each ratio recorded with its `X_low` and `X_high`."""
    out = {}
    for key in metrics:
        stem = key.removesuffix("_ratio")
        ratio, low, high = (as_float(metrics.get(k)) for k in (key, f"{stem}_low", f"{stem}_high"))
        if key.endswith("_ratio") and ratio is not None and low is not None and high is not None:
            out[key] = (ratio, low, high)
    return out


def _interval_text(value: tuple[float, float, float]) -> str:
    return f"{number(value[0])} [{number(value[1])}, {number(value[2])}]"


def measures(check: CheckResult) -> dict[str, str]:
    """The check's measures by name: bounds, intervals (`X_ratio` as "r [low, high]") and every other
    metric, wall-clock values left out (a WALL_CLOCK_CHECKS check has none: `_interval_changes`)."""
    if check.check in WALL_CLOCK_CHECKS:
        return {}
    metrics = {k: v for k, v in check.metrics.items() if not wall_clock(k)}
    out: dict[str, str] = {}
    used: set[str] = set()
    for key, value in intervals(metrics).items():
        out[key] = _interval_text(value)
        used |= {key, f"{key.removesuffix('_ratio')}_low", f"{key.removesuffix('_ratio')}_high"}
    for key, value in metrics.items():
        if key not in used:
            out[key] = display(value, limit=120)
    return out


def _interval_changes(a: CheckResult, b: CheckResult) -> list[Change]:
    """A wall-clock check's intervals differ between any two runs: a change is one whose two
    intervals do not overlap (B's ratio confidently moved)."""
    if a.check not in WALL_CLOCK_CHECKS:
        return []
    old, new = intervals(a.metrics), intervals(b.metrics)
    return [
        Change(section="check", item=a.check, field=key, a=_interval_text(old[key]), b=_interval_text(new[key]))
        for key in old
        if key in new and (new[key][1] > old[key][2] or new[key][2] < old[key][1])
    ]


def check_facts(check: CheckResult) -> dict[str, str]:
    """What `gate diff` compares of one check: status, first failing, then its measures."""
    facts = {"status": check.status.value, "first failing": first_failing(check) or "—"}
    if check.waiver is not None:
        facts["waiver"] = f"{check.waiver.approver} until {check.waiver.expires}"
    facts.update(measures(check))
    return facts


def _identity(result: GateResult) -> dict[str, str]:
    change = result.manifest.get("change") or {}
    out = {
        "manifest": str(result.manifest.get("name")),
        "manifest sha256": result.manifest_digest.sha256,
        "commit": display(change.get("commit")),
        "repository": display(change.get("repository")),
        "pull request": display(change.get("pull-request")),
    }
    out.update(_flatten(result.subjects, "subjects"))
    out.update(_flatten(result.datasets, "datasets"))
    if result.baseline:
        out.update(_flatten({k: result.baseline.get(k) for k in ("kind", "sha256", "commit")}, "baseline"))
    return out


def _versions(result: GateResult) -> dict[str, str]:
    return {"gate": result.gate_version, **_flatten(result.environment)}


def _plan(result: GateResult) -> dict[str, str]:
    """Plan facts: claim, each planned check's severity/params/controls, each policy's digest."""
    plan = result.plan
    out = {"claim": display(plan.get("claim")), "approximate": display(plan.get("approximate"))}
    if result.site_policy:
        out["site policy"] = "; ".join(result.site_policy)
    for entry in plan.get("checks") or []:
        if not isinstance(entry, Mapping) or "check" not in entry:
            continue
        name = str(entry["check"])
        out[f"check {name}"] = "planned"
        out[f"check {name}.severity"] = display(entry.get("severity"))
        out[f"check {name}.params"] = display(entry.get("params") or {})
        faults = [c.get("fault") for c in entry.get("controls") or [] if isinstance(c, Mapping)]
        out[f"check {name}.controls"] = ", ".join(str(f) for f in faults) or "—"
    for digest in result.policies:
        out[f"policy {Path(digest.path).name}"] = digest.sha256[:12]
    if result.trust_policy is not None:
        out["trust policy"] = result.trust_policy.sha256[:12]
    return out


def _compare(section: Section, item: str, a: Mapping[str, str], b: Mapping[str, str], changes: list[Change]) -> bool:
    """Append a Change per differing key; True when nothing differed."""
    before = len(changes)
    for key in [*a, *(k for k in b if k not in a)]:
        if a.get(key) != b.get(key):
            changes.append(
                Change(section=section, item=item or key, field=key if item else "", a=a.get(key), b=b.get(key))
            )
    return len(changes) == before


def diff_results(
    a: GateResult, b: GateResult, *, a_name: str, b_name: str, a_label: str = "", b_label: str = ""
) -> ResultDiff:
    changes: list[Change] = []
    unchanged: dict[str, list[str]] = {s: [] for s in SECTIONS}
    if a.verdict != b.verdict:
        changes.append(Change(section="verdict", item="verdict", field="", a=a.verdict.value, b=b.verdict.value))
    else:
        unchanged["verdict"].append("verdict")
    checks_a = {c.check: c for c in a.checks}
    checks_b = {c.check: c for c in b.checks}
    for name in [*checks_a, *(n for n in checks_b if n not in checks_a)]:
        if name not in checks_a or name not in checks_b:
            side_a = checks_a[name].status.value if name in checks_a else None
            side_b = checks_b[name].status.value if name in checks_b else None
            changes.append(Change(section="check", item=name, field="status", a=side_a, b=side_b))
        else:
            moved = _interval_changes(checks_a[name], checks_b[name])
            if _compare("check", name, check_facts(checks_a[name]), check_facts(checks_b[name]), changes) and not moved:
                unchanged["check"].append(name)
            changes += moved
    for section, facts in (("identity", _identity), ("version", _versions), ("plan", _plan)):
        fa, fb = facts(a), facts(b)
        for key in [*fa, *(k for k in fb if k not in fa)]:
            if fa.get(key) == fb.get(key):
                unchanged[section].append(key)
        _compare(section, "", fa, fb, changes)  # type: ignore[arg-type]
    whole = {c.item for c in changes if c.section == "plan" and c.item.startswith("check ") and "." not in c.item}
    changes = [c for c in changes if not (c.section == "plan" and c.item.split(".")[0] in whole and "." in c.item)]
    return ResultDiff(
        a=a_name,
        b=b_name,
        a_label=a_label or a_name,
        b_label=b_label or b_name,
        verdict_a=a.verdict.value,
        verdict_b=b.verdict.value,
        changes=changes,
        unchanged={k: v for k, v in unchanged.items() if v},
    )


# --- rendering ------------------------------------------------------------------------------------


def _terse(a: str | None, b: str | None, limit: int = 48) -> tuple[str, str]:
    """Two values as the terminal shows them: long comma lists as what B added and removed, other
    long values cut (--format md and json keep them whole)."""
    if a is not None and b is not None and ", " in a + b and max(len(a), len(b)) > limit:
        old, new = set(a.split(", ")), set(b.split(", "))
        moved = [f"+{x}" for x in sorted(new - old)] + [f"-{x}" for x in sorted(old - new)]
        return f"{len(old)} items", f"{len(new)} items: {' '.join(moved)}"

    def cut(value: str | None) -> str:
        text = "(absent)" if value is None else value
        return text if len(text) <= limit else text[: limit - 1] + "…"

    return cut(a), cut(b)


def _folded(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return f"{len(names)}: {shown}{', …' if len(names) > limit else ''}"


def render_text(diff: ResultDiff) -> str:
    """Aligned terminal lines: one per change, then one folded line per section left unchanged."""
    lines = [f"gate diff: A = {diff.a_label}", f"           B = {diff.b_label}"]
    verdict = (
        f"{diff.verdict_a.upper()} -> {diff.verdict_b.upper()}"
        if diff.verdict_a != diff.verdict_b
        else diff.verdict_a.upper() + " (unchanged)"
    )
    lines.append(f"verdict: {verdict}")
    rows = [(c.section, c.item, c.field, *_terse(c.a, c.b)) for c in diff.changes if c.section != "verdict"]
    if rows:
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        width_a = min(max(len(r[3]) for r in rows), 24)
        for section, item, field, va, vb in rows:
            lines.append(
                f"  {section:<{widths[0]}}  {item:<{widths[1]}}  {field:<{widths[2]}}  {va:<{width_a}} -> {vb}".rstrip()
            )
    else:
        lines.append("  no differences beyond wall-clock times")
    for name, names in diff.unchanged.items():
        if name != "verdict":
            lines.append(f"  unchanged {name}: {_folded(names)}")
    return "\n".join(lines) + "\n"


def _md(text: str | None) -> str:
    """A value as an inert code span in a GitHub table cell: control characters shown as escapes,
    backticks and line breaks removed, `|` escaped (a code span renders no link, HTML or mention)."""
    from gate._util.text import printable

    if text is None:
        return "(absent)"
    value = " ".join(printable(text).replace("`", "'").split()).replace("|", "\\|")
    return f"`{value}`" if value else ""


def render_markdown(diff: ResultDiff) -> str:
    """A PR comment: the verdict change, a table of changes, unchanged items folded in <details>."""
    from gate.report.render import markdown_text

    verdict = (
        f"**{diff.verdict_a.upper()}** → **{diff.verdict_b.upper()}**"
        if diff.verdict_a != diff.verdict_b
        else f"**{diff.verdict_a.upper()}** (unchanged)"
    )
    out = ["## gate diff", "", f"- A: {_md(diff.a_label)}", f"- B: {_md(diff.b_label)}", f"- verdict: {verdict}", ""]
    rows = [c for c in diff.changes if c.section != "verdict"]
    if rows:
        out += ["| section | item | field | A | B |", "|---|---|---|---|---|"]
        out += [f"| {c.section} | {_md(c.item)} | {markdown_text(c.field)} | {_md(c.a)} | {_md(c.b)} |" for c in rows]
    else:
        out.append("No differences beyond wall-clock times.")
    folded = {s: n for s, n in diff.unchanged.items() if s != "verdict"}
    if folded:
        out += ["", "<details><summary>unchanged</summary>", ""]
        out += [f"- {section}: {markdown_text(', '.join(names))}" for section, names in folded.items()]
        out += ["", "</details>"]
    return "\n".join(out) + "\n"


def render_json(diff: ResultDiff) -> str:
    return json.dumps(diff.model_dump(mode="json"), indent=2) + "\n"
