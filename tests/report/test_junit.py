"""junit.xml: one testcase per check, statuses mapped as CI tools expect."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import tests.report.results as fx
from gate.core.result import GateResult, Status
from gate.report import build_report
from gate.report.build import Signing
from gate.report.junit import junit_xml
from tests.report.results import assert_gold


def parse(result: GateResult, signing: Signing | None = None) -> ET.Element:
    return ET.fromstring(junit_xml(result, build_report(result, signing)))


def cases(root: ET.Element) -> dict[str, ET.Element]:
    return {case.attrib["name"]: case for case in root.iter("testcase")}


def test_statuses_map_to_junit_outcomes() -> None:
    root = parse(fx.failing_parity_run())
    suite = root.find("testsuite")
    assert suite is not None
    assert {k: suite.attrib[k] for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "5",
        "failures": "2",
        "errors": "1",
        "skipped": "1",
    }
    by_name = cases(root)
    failure = by_name["prefix-sweep"].find("failure")
    assert failure is not None and failure.attrib["type"] == "deny"
    assert "first failed at prefix length 512" in (failure.text or "")
    assert "likely bug class: positional-index" in (failure.text or "")
    error = by_name["cache-identity"].find("error")
    assert error is not None and error.attrib["message"].startswith("RuntimeError: adapter does not expose")
    assert "Traceback" in (error.text or "")
    skipped = by_name["invalidation"].find("skipped")
    assert skipped is not None
    assert skipped.attrib["message"].startswith("waived: reload path is disabled in this release")
    passed = by_name["mask-oracle"]
    assert passed.find("failure") is None and passed.find("error") is None and passed.find("skipped") is None
    assert by_name["prefix-sweep"].attrib["classname"] == "gate.step4"


def test_warnings_pass_with_system_out() -> None:
    result = fx.passing_run()
    warn_fail = result.checks[3].model_copy(update={"status": Status.failed, "message": "tpot 40% slower"})
    root = parse(result.model_copy(update={"checks": [*result.checks[:3], warn_fail]}))
    case = cases(root)["phase-performance"]
    assert [child.tag for child in case] == ["system-out"]
    assert "FAIL (warn only)" in (case.findtext("system-out") or "")
    plain_warn = cases(parse(fx.passing_run()))["phase-performance"]
    assert [child.tag for child in plain_warn] == ["system-out"]
    assert "WARN" in (plain_warn.findtext("system-out") or "")


def test_signature_state_is_a_property() -> None:
    def prop(root: ET.Element, name: str) -> str:
        return next(p.attrib["value"] for p in root.iter("property") if p.attrib["name"] == name)

    assert prop(parse(fx.passing_run()), "signature") == "UNSIGNED"
    signed = parse(fx.passing_run(), Signing(signed=True, keyid="ab" * 32))
    assert prop(signed, "signature") == "SIGNED" and prop(signed, "keyid") == "ab" * 32
    assert "(UNSIGNED)" in (parse(fx.passing_run()).find("testsuite/system-out").text or "")  # type: ignore[union-attr]


def test_hostile_and_control_characters_stay_well_formed() -> None:
    result = fx.hostile_run()
    checks = [c.model_copy(update={"message": c.message + " \x00\x1b[31m ]]> &"}) for c in result.checks]
    root = parse(result.model_copy(update={"checks": checks}))
    failure = cases(root)["prefix-sweep"].find("failure")
    assert failure is not None and fx.HOSTILE in failure.attrib["message"]
    assert "\x00" not in failure.attrib["message"]


def test_junit_matches_gold() -> None:
    result = fx.failing_parity_run()
    assert_gold({"failing.junit.xml": junit_xml(result, build_report(result)).decode()})
