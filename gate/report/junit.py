"""junit.xml for CI test tabs: one testcase per planned check, built with xml.etree.

deny failure -> <failure>; error -> <error>; waived and skip -> <skipped>; unproven -> <failure
type="unproven"> when the policy denies, else passing with <system-out> UNPROVEN; warn -> passing with
<system-out>. The suite's properties and system-out carry the verdict and the banner's notes.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from gate._util.text import printable
from gate.core.result import GateResult
from gate.report.build import anchor
from gate.report.model import CheckSection, ReportData

_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: str) -> str:
    """Control characters and bidi overrides shown as `\\uXXXX` (XML 1.0 cannot carry most of them)."""
    return _INVALID_XML.sub("", printable(text))


def _details(s: CheckSection) -> str:
    lines = [f"{s.check}: {s.status_label} (step {s.step}: {s.step_title}; severity {s.severity})"]
    if s.message:
        lines.append(s.message)
    if s.detected_at:
        lines.append(f"first failed at {s.detected_at}")
    if s.diagnosis:
        for label, value in (
            ("likely bug class", s.diagnosis.likely_bug_class),
            ("profile", s.diagnosis.profile),
            ("first diverging layer", s.diagnosis.first_diverging_layer),
            ("explanation", s.diagnosis.explanation),
            (
                "design hazard",
                s.diagnosis.hazard and f"{s.diagnosis.hazard.name}; avoid it: {s.diagnosis.hazard.avoid}",
            ),
        ):
            if value:
                lines.append(f"{label}: {value}")
    for control in s.controls:
        where = f" at {control.detected_at}" if control.detected_at else ""
        lines.append(f"control {control.fault}: {control.outcome}{where}")
    lines.append(f"why required: {s.why}")
    if s.policy_rule:
        lines.append(f"policy rule: {s.policy_rule}")
    return "\n".join(lines)


def _testcase(parent: ET.Element, s: CheckSection, seconds: float) -> str:
    """Append one testcase; return its JUnit outcome (pass, failure, error, skipped)."""
    case = ET.SubElement(parent, "testcase", classname=f"gate.step{s.step}", name=s.check, time=f"{seconds:.3f}")
    details = _clean(_details(s))
    headline = _clean(s.message or s.status_label)
    if (s.status, "deny") in (("fail", s.severity), ("unproven", s.unproven)):
        ET.SubElement(
            case, "failure", message=headline, type="deny" if s.status == "fail" else "unproven"
        ).text = details
        return "failure"
    if s.status == "error":
        error = ET.SubElement(case, "error", message=_clean(s.error or headline), type="error")
        error.text = _clean("\n".join(filter(None, [details, s.traceback])))
        return "error"
    if s.status in ("waived", "skip", "not-applicable"):
        reason = (
            f"waived: {s.waiver.reason} (approved by {s.waiver.approver}, expires {s.waiver.expires})"
            if s.waiver
            else headline
        )
        ET.SubElement(case, "skipped", message=_clean(reason))
        return "skipped"
    ET.SubElement(case, "system-out").text = details
    return "pass"


def junit_xml(result: GateResult, data: ReportData) -> bytes:
    """The JUnit XML document (UTF-8, with declaration)."""
    total = sum(c.duration_s for c in result.checks)
    suites = ET.Element("testsuites", name="gate")
    suite = ET.SubElement(
        suites, "testsuite", name=_clean(f"gate: {data.banner.name}"), timestamp=result.started_at, hostname="gate"
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("verdict", data.banner.verdict),
        ("signature", data.banner.signed_label),
        ("keyid", data.banner.keyid or ""),
        ("intervention", data.claim.intervention),
        ("claim", data.claim.level),
        ("manifest_sha256", result.manifest_digest.sha256),
        ("gate_version", result.gate_version),
    ):
        ET.SubElement(properties, "property", name=name, value=_clean(value))
    counts = {"failure": 0, "error": 0, "skipped": 0, "pass": 0}
    by_anchor = {section.anchor: section for section in data.sections}  # the dossier shows failures first
    for check in result.checks:  # test cases keep plan order
        counts[_testcase(suite, by_anchor[anchor(check.check)], check.duration_s)] += 1
    ET.SubElement(suite, "system-out").text = _clean(
        "\n".join([f"gate {data.banner.label} ({data.banner.signed_label}): {data.banner.summary}", *data.banner.notes])
    )
    for element in (suites, suite):
        element.set("tests", str(len(result.checks)))
        element.set("failures", str(counts["failure"]))
        element.set("errors", str(counts["error"]))
        element.set("skipped", str(counts["skipped"]))
        element.set("time", f"{total:.3f}")
    ET.indent(suites)
    document: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return document + b"\n"
