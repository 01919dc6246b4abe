"""Waivers: scoped to one check of one exact manifest, expiring, never covering an error."""

from __future__ import annotations

import sqlite3
from datetime import date, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate.cli.main import cli
from gate.core.load import load_manifest
from gate.core.manifest import ClaimLevel
from gate.core.result import CheckResult, Status, Verdict
from gate.engine.runner import decide
from gate.errors import InputError
from gate.trust.ledger import Ledger, LedgerError
from gate.trust.policy import find_trust
from gate.trust.waivers import apply_waivers, grant_waiver, parse_expiry, recorded_waivers, today_utc
from tests.trust.trusted import make_keys, write_trust

TODAY = today_utc()


KEYS: dict[str, Path] = {}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    KEYS.update(make_keys(tmp_path_factory.mktemp("keys"), ("ci", "alice", "bob", "carol", "dave", "erin", "frank")))
    return KEYS


@pytest.fixture(autouse=True)
def trust(tmp_path: Path, keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """alice and bob may waive any check for 30 days; the policy is found through $GATE_TRUST."""
    path = write_trust(tmp_path / "trust.yaml", keys, waiver_people=("alice", "bob"), waiver_checks=("*",), max_days=30)
    monkeypatch.setenv("GATE_TRUST", str(path))
    return path


def _check(name: str, status: Status, severity: str = "deny", message: str = "max |Δlogit| 0.3 > atol") -> CheckResult:
    return CheckResult(check=name, status=status, severity=severity, step=4, message=message)  # type: ignore[arg-type]


def _grant(ledger: Path, manifest: Path, check: str = "cache-identity", expires: date = TODAY) -> int:
    trust = find_trust(None)
    assert trust is not None
    with Ledger.open(ledger) as opened:
        return grant_waiver(
            opened,
            manifest,
            check,
            reason="known key-collision false alarm, fix in #42",
            approver="alice",
            expires=expires,
            key_path=KEYS["alice.key"],
            trust=trust,
        ).id


def test_active_waiver_turns_a_failed_check_into_waived(write_manifest, ledger: Path) -> None:  # type: ignore[no-untyped-def]
    manifest = write_manifest()
    waiver_id = _grant(ledger, manifest)
    checks = [
        _check("cache-identity", Status.failed),
        _check("invalidation", Status.failed),
        _check("prefix-reuse-parity", Status.passed),
    ]
    out = apply_waivers(load_manifest(manifest), checks, ledger, today=TODAY)
    waived = out[0]
    assert waived.status == Status.waived and waived.waiver is not None
    assert (waived.waiver.ledger_id, waived.waiver.approver, waived.waiver.expires, waived.waiver.expired) == (
        waiver_id,
        "alice",
        TODAY.isoformat(),
        False,
    )
    assert "waived by alice" in waived.message and "0.3 > atol" in waived.message  # the failure stays visible
    assert out[1].status == Status.failed and out[1].waiver is None  # scoped to one check
    assert out[2] == checks[2]
    verdict, code, summary = decide(out[:1] + out[2:], ClaimLevel.tolerance)
    assert verdict == Verdict.passed_with_waivers and code == 0 and "1 waived: cache-identity" in summary
    assert decide(out, ClaimLevel.tolerance)[0] == Verdict.failed


def test_expired_waiver_is_ignored_and_its_expiry_reported(write_manifest, ledger: Path) -> None:  # type: ignore[no-untyped-def]
    manifest = write_manifest()
    waiver_id = _grant(ledger, manifest, expires=TODAY)
    out = apply_waivers(
        load_manifest(manifest), [_check("cache-identity", Status.failed)], ledger, today=TODAY + timedelta(days=1)
    )
    assert out[0].status == Status.failed
    assert out[0].waiver is not None and out[0].waiver.expired and out[0].waiver.ledger_id == waiver_id
    assert f"waiver #{waiver_id} expired on {TODAY.isoformat()}" in out[0].message


def test_a_waiver_never_turns_an_error_into_a_pass(write_manifest, ledger: Path) -> None:  # type: ignore[no-untyped-def]
    manifest = write_manifest()
    waiver_id = _grant(ledger, manifest)
    errored = _check("cache-identity", Status.error, message="RuntimeError: adapter crashed")
    out = apply_waivers(load_manifest(manifest), [errored], ledger, today=TODAY)
    assert out[0].status == Status.error and out[0].waiver is None
    assert f"waiver #{waiver_id} not applied: a waiver never covers an error" in out[0].message
    assert decide(out, ClaimLevel.tolerance)[0] == Verdict.error


def test_editing_the_manifest_voids_its_waivers(write_manifest, ledger: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    manifest = write_manifest()
    _grant(ledger, manifest)
    manifest.write_text(manifest.read_text().replace("atol: 0.001", "atol: 0.5"))  # same name, looser claim
    out = apply_waivers(load_manifest(manifest), [_check("cache-identity", Status.failed)], ledger, today=TODAY)
    assert out[0].status == Status.failed and out[0].waiver is None
    assert "granted for another version of this manifest" in out[0].message
    other = write_manifest(manifest.read_text().replace("name: prefix-cache-change", "name: other"), "o.yaml")
    out = apply_waivers(load_manifest(other), [_check("cache-identity", Status.failed)], ledger, today=TODAY)
    assert out[0].status == Status.failed and "waiver" not in out[0].message


def test_no_ledger_means_no_waivers(write_manifest, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    checks = [_check("cache-identity", Status.failed)]
    loaded = load_manifest(write_manifest())
    assert apply_waivers(loaded, checks, None) is checks
    assert apply_waivers(loaded, checks, tmp_path / "absent.sqlite") is checks


def test_a_tampered_ledger_applies_no_waiver(write_manifest, ledger: Path) -> None:  # type: ignore[no-untyped-def]
    manifest = write_manifest()
    _grant(ledger, manifest, check="invalidation")
    conn = sqlite3.connect(str(ledger), isolation_level=None)
    conn.execute("DROP TRIGGER entries_append_only_u")
    conn.execute("UPDATE entries SET body = replace(body, '\"invalidation\"', '\"cache-identity\"')")
    with pytest.raises(LedgerError, match="does not verify"):
        apply_waivers(load_manifest(manifest), [_check("cache-identity", Status.failed)], ledger, today=TODAY)


def test_grant_checks_the_plan_and_the_date(write_manifest, ledger: Path, keys: dict[str, Path]) -> None:  # type: ignore[no-untyped-def]
    manifest = write_manifest()
    trust = find_trust(None)
    assert trust is not None
    with Ledger.open(ledger) as opened, pytest.raises(InputError, match="not in this manifest's plan"):
        grant_waiver(
            opened, manifest, "spec-greedy", reason="r", approver="alice", expires=TODAY, key_path=keys["alice.key"],
            trust=trust,
        )  # fmt: skip
    with pytest.raises(InputError, match="in the past"):
        parse_expiry((TODAY - timedelta(days=1)).isoformat(), today=TODAY)
    with pytest.raises(InputError, match="not a date"):
        parse_expiry("next tuesday", today=TODAY)
    assert parse_expiry(TODAY.isoformat(), today=TODAY) == TODAY


def test_gate_waive_command_records_a_waiver(write_manifest, ledger: Path, keys: dict[str, Path]) -> None:  # type: ignore[no-untyped-def]
    manifest = write_manifest()
    expires = (date.today() + timedelta(days=30)).isoformat()
    result = CliRunner().invoke(
        cli,
        [
            "waive",
            "tenant-isolation",
            "--manifest",
            str(manifest),
            "--reason",
            "single-tenant deployment",
            "--approver",
            "bob",
            "--expires",
            expires,
            "--key",
            str(keys["bob.key"]),
            "--ledger",
            str(ledger),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "waiver #1: tenant-isolation of prefix-cache-change" in result.output
    with Ledger.open(ledger, writable=False) as opened:
        (waiver,) = recorded_waivers(opened)
    assert waiver.grant.approver == "bob" and waiver.grant.expires.isoformat() == expires
    bad = CliRunner().invoke(
        cli,
        [
            "waive",
            "nope",
            "--manifest",
            str(manifest),
            "--reason",
            "x",
            "--approver",
            "bob",
            "--expires",
            expires,
            "--key",
            str(keys["bob.key"]),
            "--ledger",
            str(ledger),
        ],
    )
    assert bad.exit_code == 2 and "not in this manifest's plan" in bad.output


def test_a_signed_waiver_verifies_and_an_edited_one_does_not(
    write_manifest, ledger: Path, keys: dict[str, Path]
) -> None:  # type: ignore[no-untyped-def]
    from gate.trust.keys import keyid, load_private_key
    from gate.trust.waivers import check_waiver_signature

    trust = find_trust(None)
    assert trust is not None
    kid = keyid(load_private_key(keys["alice.key"]).public_key())
    with Ledger.open(ledger) as opened:
        waiver = grant_waiver(
            opened, write_manifest(), "cache-identity", reason="r", approver="alice", expires=TODAY,
            key_path=keys["alice.key"], trust=trust,
        )  # fmt: skip
    assert waiver.grant.signature is not None and waiver.grant.signature["keyid"] == kid
    assert check_waiver_signature(waiver.grant, trusted_keyids=[kid]) is None
    assert "not trusted" in str(check_waiver_signature(waiver.grant, trusted_keyids=["0" * 64]))
    edited = waiver.grant.model_copy(update={"expires": date(2031, 1, 1)})
    assert check_waiver_signature(edited) == "the signature does not verify"
