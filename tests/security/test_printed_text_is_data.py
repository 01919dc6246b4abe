"""Row "printed text is data" (docs/security.md): a waiver or approval reason is text someone typed; with
a newline in it, printed raw, it would start a line of the job log with `::notice ::PASS`, a workflow
command GitHub obeys. `gate waive` / `gate approve` refuse such a reason at write time (exit 2); a
reason already in a ledger (an older gate, another writer) is printed on one line, escaped, in the
run's log, its annotations and the job summary."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gate.trust.keys import load_private_key, sign_statement
from gate.trust.ledger import Ledger
from gate.trust.waivers import WAIVER_KIND, WAIVER_SIGNATURE_DOMAIN, WaiverGrant, planned_checks, sha256_file
from tests.security.play import FAILING, action_step, gate_env
from tests.trust.trusted import in_days, make_keys, write_trust

FORGED = "known flake\n::notice ::PASS\r\n::error::\x1b[2Jall good"
CHECK = "greedy-parity"
OWN_COMMANDS = ("::group::gate run ", "::endgroup::", "::error file=", "::notice title=gate", "::warning title=gate")
"""The workflow commands gate and its Action print themselves."""


@pytest.fixture
def site(tmp_path: Path) -> dict[str, Path]:
    keys = make_keys(tmp_path / "keys", ("ci", "alice", "bob"))
    trust = write_trust(tmp_path / "trust.yaml", keys, waiver_checks=(CHECK,))
    (tmp_path / "gate").mkdir()
    manifest = tmp_path / "gate" / "flaky.yaml"
    shutil.copy(FAILING, manifest)
    return {**keys, "trust": trust, "manifest": manifest, "ledger": tmp_path / "ledger.sqlite"}


def _gate(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gate", *map(str, args)], env=gate_env(), capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("reason", [FORGED, "ok\tthen", "ok\u202eevil", "ok\x1b[2J"])
def test_waive_refuses_a_reason_with_control_characters(site: dict[str, Path], reason: str) -> None:
    done = _gate(
        "waive", CHECK, "--manifest", site["manifest"], "--reason", reason, "--expires", in_days(3),
        "--key", site["bob.key"], "--trust", site["trust"], "--ledger", site["ledger"],
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--reason" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    if site["ledger"].exists():
        with Ledger.open(site["ledger"]) as ledger:
            assert list(ledger.entries(WAIVER_KIND)) == []  # nothing written


def test_approve_refuses_a_reason_with_control_characters(site: dict[str, Path], tmp_path: Path) -> None:
    done = _gate(
        "approve", tmp_path, "--key", site["alice.key"], "--reason", FORGED,
        "--trust", site["trust"], "--ledger", site["ledger"],
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--reason" in done.stderr and not site["ledger"].exists()


def _plant_waiver(site: dict[str, Path], reason: str) -> None:
    """A signed waiver whose reason holds a newline, as an older gate (or any other writer) could have
    put in the ledger: trusted by the policy, so its reason reaches the run's output."""
    key = load_private_key(site["bob.key"])
    name, _checks = planned_checks(site["manifest"], [])
    grant = WaiverGrant.model_construct(
        check=CHECK, manifest_name=name, manifest_sha256=sha256_file(site["manifest"]),
        manifest_path=str(site["manifest"]), reason=reason, approver="bob",
        expires=__import__("datetime").date.fromisoformat(in_days(3)), signature=None, trust_policy=None,
    )  # fmt: skip
    signed = sign_statement(key, WAIVER_SIGNATURE_DOMAIN, grant.model_dump(mode="json", exclude={"signature"}))
    grant = grant.model_copy(update={"signature": signed})
    with Ledger.open(site["ledger"]) as ledger:
        ledger.append(WAIVER_KIND, grant.model_dump(mode="json", exclude_none=True))


def test_a_hostile_reason_in_the_ledger_never_starts_a_workflow_command(site: dict[str, Path], gate_bin: Path) -> None:
    _plant_waiver(site, FORGED)
    workspace = site["manifest"].parents[1]
    args = f"--check {CHECK} --ledger {site['ledger']} --trust {site['trust']}"
    rc, log, _outputs, out = action_step(workspace, gate_bin, "gate/flaky.yaml", GATE_ARGS=args)
    assert rc == 5, log  # greedy-parity ran alone and, waived, did not fail
    summary = (workspace / "summary.md").read_text()
    assert "waived: greedy-parity (known flake" in log, log  # the waiver applied: its reason was printed
    for text in (log, summary, (out / "flaky.action" / "annotations.txt").read_text()):
        commands = [line for line in text.splitlines() if line.startswith("::")]
        forged = [c for c in commands if not c.startswith(OWN_COMMANDS)]
        assert forged == [], forged
        assert "\x1b" not in text and "\r" not in text
    assert "known flake\\n::notice ::PASS" in log  # shown, escaped, on its line


def test_revoke_refuses_a_reason_with_control_characters(site: dict[str, Path]) -> None:
    done = _gate(
        "revoke", "--waiver", "1", "--reason", FORGED, "--key", site["alice.key"],
        "--trust", site["trust"], "--ledger", site["ledger"],
    )  # fmt: skip
    assert done.returncode == 2 and "--reason" in done.stderr, done.stdout + done.stderr


def test_gate_audit_list_prints_a_hostile_entry_on_one_line(site: dict[str, Path]) -> None:
    """A revocation whose reason holds a newline, appended by any writer: listed, escaped, on its line."""
    with Ledger.open(site["ledger"]) as ledger:
        ledger.append("revocation", {"target": {"waiver": 1}, "reason": FORGED, "by": "bob\n::warning ::ok"})
    done = _gate("audit", "list", "--ledger", site["ledger"])
    assert "REVOKED" in done.stdout, done.stdout + done.stderr
    assert [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("::")] == []
    assert "known flake\\n::notice ::PASS" in done.stdout
