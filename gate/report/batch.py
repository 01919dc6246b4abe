"""The summary of a batch (`gate run M1 M2 ... --out DIR`): a Markdown table and one JUnit file, from
summary.json (gate.engine.batch); a run with no result becomes a suite with one `<error>` and the reason.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

from gate._util.text import printable
from gate.report.junit import _clean


def _cell(text: Any) -> str:
    cell: str = printable(str(text))
    return cell.replace("|", "\\|").replace("\n", " ")


def batch_markdown(document: dict[str, Any]) -> str:
    """summary.md: the batch verdict, then one row per run."""
    executor = document.get("executor") or {}
    how = ", ".join(f"{k} {v}" for k, v in executor.items() if v is not None)
    lines = [
        f"# gate: {_cell(document['verdict']).upper()} (exit {document['exit_code']})",
        "",
        f"{_cell(document['summary'])}; executor: {_cell(how)}; {document['duration_s']:.1f} s wall.",
        "",
        "| run | verdict | exit | checks | seconds | summary |",
        "|---|---|---:|---|---:|---|",
    ]
    for run in document["runs"]:
        statuses = Counter(check["status"] for check in run["checks"])
        checks = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "-"
        retried = f" (attempt {run['attempts']})" if run["attempts"] > 1 else ""
        name = f"[{_cell(run['name'])}]({_cell(run['out_dir'])}/dossier.md)" if run["files"] else _cell(run["name"])
        lines.append(
            f"| {name} | {_cell(run['verdict'])} | {run['exit_code']} | {_cell(checks) if run['files'] else '-'} | "
            f"{run['duration_s']:.1f} | {_cell(run['summary'])}{retried} |"
        )
    return "\n".join(lines) + "\n"


def _error_suite(parent: ET.Element, run: dict[str, Any]) -> ET.Element:
    suite = ET.SubElement(parent, "testsuite", name=_clean(f"gate: {run['name']}"), hostname="gate")
    case = ET.SubElement(
        suite, "testcase", classname="gate.run", name=_clean(run["name"]), time=f"{run['duration_s']:.3f}"
    )
    error = ET.SubElement(case, "error", message=_clean(run["error"] or run["summary"]), type="error")
    error.text = _clean(f"{run['manifest']}: {run['summary']}")
    for key, value in (("tests", 1), ("failures", 0), ("errors", 1), ("skipped", 0)):
        suite.set(key, str(value))
    suite.set("time", f"{run['duration_s']:.3f}")
    return suite


def batch_junit(document: dict[str, Any], out: Path) -> bytes:
    """junit.xml for the batch: one testsuite per run, in run order."""
    suites = ET.Element("testsuites", name="gate")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    seconds = 0.0
    for run in document["runs"]:
        own = out / run["out_dir"] / "junit.xml"
        found = ET.parse(own).getroot().findall("testsuite") if run["files"] and own.is_file() else []
        if found:
            for suite in found:
                suite.set("name", _clean(f"gate: {run['name']}"))
                properties = suite.find("properties")
                if properties is None:
                    properties = ET.SubElement(suite, "properties")
                ET.SubElement(properties, "property", name="run", value=_clean(run["name"]))
                ET.SubElement(properties, "property", name="manifest", value=_clean(run["manifest"]))
                suites.append(suite)
        else:
            found = [_error_suite(suites, run)]
        for suite in found:
            for key in totals:
                totals[key] += int(suite.get(key, "0"))
            seconds += float(suite.get("time", "0"))
    for key, value in totals.items():
        suites.set(key, str(value))
    suites.set("time", f"{seconds:.3f}")
    ET.indent(suites)
    document_bytes: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return document_bytes + b"\n"


__all__ = ["batch_junit", "batch_markdown"]
