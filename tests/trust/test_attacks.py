"""The eight attacks of issue 15, each tried as a forger would, through the real CLI, SQLite and keys.

Each failed on the code before the trust policy (see the commit that added this file); each must
now be refused, or reported and ignored, with the reason named.
"""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gate._util.clock import now_utc
from gate.cli.main import cli
from gate.core.result import GateResult, Verdict
from gate.engine.pipeline import write_outputs
from gate.trust.approvals import (
    APPROVAL_FILE,
    APPROVAL_KIND,
    approval_record,
    approval_statement,
    read_run_statement,
    sign_envelope,
)
from gate.trust.attest import ENVELOPE_NAME, load_private_key
from gate.trust.ledger import Ledger, record_run
from gate.trust.waivers import WAIVER_KIND
from tests.trust.runs import quant_manifest, signed_run
from tests.trust.trusted import in_days, make_keys, write_trust

OLD = "a1b2c3d4" * 5
NEW = "e5f6a7b8" * 5


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture
def trust(tmp_path: Path, keys: dict[str, Path]) -> Path:
    return write_trust(tmp_path / "trust.yaml", keys)


def gate(*args: Any) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _run(tmp_path: Path, keys: dict[str, Path], ledger: Path | None, name: str, commit: str, **kw: Any) -> Path:
    manifest = quant_manifest(tmp_path / name / "kv-int8.yaml", commit)
    out, _ = signed_run(tmp_path / name / "out", manifest, kw.pop("key", keys["ci.key"]), ledger=ledger, **kw)
    return out


def _approve(out: Path, key: Path, ledger: Path, trust: Path, who: str = "alice") -> Any:
    return gate(
        "approve", out, "--approver", who, "--key", key, "--reason", "bound holds", "--ledger", ledger, "--trust", trust
    )


# 1 -----------------------------------------------------------------------------------------------


def test_replay_an_old_signed_dossier_as_another_commit(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, trust: Path
) -> None:
    out = _run(tmp_path, keys, ledger, "old", OLD)
    assert _approve(out, keys["alice.key"], ledger, trust).exit_code == 0
    # the forger records the old dossier again, as the run of commit NEW
    with Ledger.open(ledger) as opened:
        body = next(opened.entries("run")).body
        body["change"]["commit"] = NEW
        opened.append("run", {k: v for k, v in body.items() if k not in ("kind", "time")})
    traced = gate("audit", "trace", NEW, "--ledger", ledger, "--trust", trust)
    assert traced.exit_code == 1, traced.output
    assert f"signed commit {OLD}" in traced.output and "NOT VERIFIED" in traced.output
    verify = gate("verify", out, "--trust", trust, "--commit", NEW)
    assert verify.exit_code == 1, verify.output
    assert f"the signed statement is for commit {OLD}, not {NEW}" in verify.output
    ok = gate("verify", out, "--trust", trust, "--commit", OLD[:12])
    assert ok.exit_code == 0, ok.output
    assert f"commit {OLD}" in ok.output and "manifest kv-int8" in ok.output and "APPROVED by alice" in ok.output
    genuine = gate("audit", "trace", OLD, "--ledger", ledger, "--trust", trust)
    assert genuine.exit_code == 0, genuine.output
    assert f"verified: commit {OLD}" in genuine.output


# 2 -----------------------------------------------------------------------------------------------


def _forge_pass(out: Path, manifest: Path, result: GateResult, key: Path, ledger: Path) -> None:
    forged = result.model_copy(update={"verdict": Verdict("pass"), "exit_code": 0, "summary": "all checks passed"})
    (out / "results.json").write_text(forged.model_dump_json(indent=2) + "\n")
    write_outputs(forged, out, manifest, key, environ={})
    record_run(forged, out, ledger, sign_key=key)


def test_role_swap_an_approver_key_signs_a_pass_run(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, trust: Path
) -> None:
    manifest = quant_manifest(tmp_path / "r" / "kv-int8.yaml", NEW)
    out, result = signed_run(tmp_path / "r" / "out", manifest, keys["alice.key"])
    _forge_pass(out, manifest, result, keys["alice.key"], ledger)
    for roles in (["--trust", trust], ["--run-key", keys["ci.pub"], "--approver-key", keys["alice.pub"]]):
        traced = gate("audit", "trace", NEW, "--ledger", ledger, *roles)
        assert traced.exit_code == 1, traced.output
        assert "status    PASS" not in traced.output
        assert "not signed by a run signer" in traced.output
        verify = gate("verify", out, *roles)
        assert verify.exit_code == 1 and "not signed by a run signer" in verify.output, verify.output
    # even the CI key cannot make an approximate change PASS
    _forge_pass(out, manifest, result, keys["ci.key"], ledger)
    verify = gate("verify", out, "--trust", trust)
    assert verify.exit_code == 1, verify.output
    assert "an approximate change cannot PASS" in verify.output


# 3 -----------------------------------------------------------------------------------------------


def test_forged_identity_a_fresh_key_approves_as_alice(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, trust: Path
) -> None:
    out = _run(tmp_path, keys, ledger, "r", NEW)
    refused = _approve(out, keys["mallory.key"], ledger, trust, who="alice")
    assert refused.exit_code == 1 and "not in the trust policy" in refused.output, refused.output
    wrong_name = _approve(out, keys["carol.key"], ledger, trust, who="alice")
    assert wrong_name.exit_code == 1 and "belongs to 'carol'" in wrong_name.output, wrong_name.output
    # the forger writes the approval straight into the ledger instead
    run = read_run_statement(out)
    statement = approval_statement(run, approver="alice", reason="lgtm", approved_at=now_utc(), run_signers=[])
    key = load_private_key(keys["mallory.key"])
    with Ledger.open(ledger) as opened:
        opened.append(APPROVAL_KIND, approval_record(sign_envelope(statement, key), key, statement))
    traced = gate("audit", "trace", NEW, "--ledger", ledger, "--trust", trust)
    assert "APPROVED by alice" not in traced.output
    assert "AWAITING APPROVAL" in traced.output and "not in the trust policy" in traced.output, traced.output


# 4 -----------------------------------------------------------------------------------------------


def test_unsigned_waiver_is_never_applied(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, trust: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = quant_manifest(tmp_path / "r" / "kv-int8.yaml", NEW)
    unsigned = gate(
        "waive", "quality-slices", "--manifest", manifest, "--reason", "known", "--approver", "bob",
        "--expires", in_days(3), "--ledger", ledger, "--trust", trust,
    )  # fmt: skip
    assert unsigned.exit_code == 2 and "--key" in unsigned.output, unsigned.output
    # written straight into the ledger instead
    from gate.trust.signing import sha256_file

    with Ledger.open(ledger) as opened:
        opened.append(
            WAIVER_KIND,
            {
                "check": "quality-slices", "manifest_name": "kv-int8", "manifest_sha256": sha256_file(manifest),
                "reason": "known", "approver": "bob", "expires": in_days(3),
            },
        )  # fmt: skip
    monkeypatch.setenv("GATE_TRUST", str(trust))
    out, result = signed_run(tmp_path / "r" / "out", manifest, keys["ci.key"], ledger=ledger, quality="fail")
    assert result.verdict.value == "fail", result.checks[0].message
    assert "not applied: it is not signed" in result.checks[0].message
    verify = gate("verify", out, "--trust", trust)
    assert verify.exit_code == 6 and "verdict FAIL" in verify.output, verify.output  # authentic, not deployable
    assert gate("verify", out, "--trust", trust, "--any-verdict").exit_code == 0


# 5 -----------------------------------------------------------------------------------------------


def test_one_untrusted_entry_does_not_block_unrelated_audits(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, trust: Path
) -> None:
    good = _run(tmp_path, keys, ledger, "good", OLD)
    assert _approve(good, keys["alice.key"], ledger, trust).exit_code == 0
    other = _run(tmp_path, keys, ledger, "other", NEW)
    run = read_run_statement(other)
    statement = approval_statement(run, approver="mallory", reason="x", approved_at=now_utc(), run_signers=[])
    key = load_private_key(keys["mallory.key"])
    with Ledger.open(ledger) as opened:
        bad, _ = opened.append(APPROVAL_KIND, approval_record(sign_envelope(statement, key), key, statement))
    traced = gate("audit", "trace", OLD, "--ledger", ledger, "--trust", trust)
    assert traced.exit_code == 0, traced.output
    assert "APPROVED by alice" in traced.output
    assert f"entry #{bad.seq} (approval) is untrusted" in traced.output
    related = gate("audit", "trace", NEW, "--ledger", ledger, "--trust", trust)
    assert "AWAITING APPROVAL" in related.output and "not in the trust policy" in related.output


# 6 -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dossier.approved.html", "dossier.approved.md", APPROVAL_FILE])
def test_editing_the_approved_dossier_fails_verification(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, trust: Path, name: str
) -> None:
    out = _run(tmp_path, keys, ledger, "r", NEW)
    assert _approve(out, keys["alice.key"], ledger, trust).exit_code == 0
    assert gate("verify", out, "--trust", trust).exit_code == 0
    path = out / name
    if name == APPROVAL_FILE:
        data = json.loads(path.read_text())
        data["approvals"][0]["ledger"]["entry"]["seq"] = 99
        path.write_text(json.dumps(data))
    else:
        path.write_text(path.read_text().replace("alice", "alice and the CTO"))
    verify = gate("verify", out, "--trust", trust)
    assert verify.exit_code == 1 and f"{name}: sha256" in verify.output, verify.output
    traced = gate("audit", "trace", NEW, "--ledger", ledger, "--trust", trust)
    assert traced.exit_code == 1 and f"{name}: sha256" in traced.output, traced.output


# 7 -----------------------------------------------------------------------------------------------


def _approve_in_process(args: tuple[str, str, str, str, str]) -> int:
    out, key, ledger, trust, who = args
    from gate.errors import GateError
    from gate.trust.approve import approve
    from gate.trust.policy import load_trust

    try:
        approve(
            Path(out), approver=who, reason="ok", key_path=Path(key), ledger_path=Path(ledger),
            trust=load_trust(Path(trust)),
        )  # fmt: skip
    except GateError:
        return 1
    return 0


def test_concurrent_approvals_lose_nothing_and_stay_idempotent(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, trust: Path
) -> None:
    out = _run(tmp_path, keys, ledger, "r", NEW)
    who = ["alice", "carol", "dave", "erin", "frank"]
    jobs = [(str(out), str(keys[f"{w}.key"]), str(ledger), str(trust), w) for w in who]
    jobs += [jobs[0]] * 3  # alice three more times at once
    with multiprocessing.get_context("fork").Pool(len(jobs)) as pool:
        codes = pool.map(_approve_in_process, jobs)
    assert codes == [0] * len(jobs)
    envelope = json.loads((out / ENVELOPE_NAME).read_text())
    assert len(envelope["signatures"]) == 1 + len(who)
    records = json.loads((out / APPROVAL_FILE).read_text())["approvals"]
    assert sorted(r["approver"] for r in records) == sorted(who)
    with Ledger.open(ledger, writable=False) as opened:
        assert len(list(opened.entries(APPROVAL_KIND))) == len(who)
    verify = gate("verify", out, "--trust", trust)
    assert verify.exit_code == 0, verify.output


# 8 -----------------------------------------------------------------------------------------------


def test_waive_refuses_a_broken_chain_blank_fields_and_long_expiry(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, trust: Path
) -> None:
    manifest = quant_manifest(tmp_path / "r" / "kv-int8.yaml", NEW)

    def waive(*extra: Any, reason: str = "known", approver: str = "bob", expires: str = in_days(3)) -> Any:
        return gate(
            "waive", "quality-slices", "--manifest", manifest, "--reason", reason, "--approver", approver,
            "--expires", expires, "--key", keys["bob.key"], "--ledger", ledger, "--trust", trust, *extra,
        )  # fmt: skip

    assert waive(reason="   ").exit_code == 2
    assert waive(approver=" ").exit_code == 2
    far = waive(expires="9999-12-31")
    assert far.exit_code == 2 and "at most 14 days" in far.output, far.output
    assert waive().exit_code == 0
    conn = sqlite3.connect(ledger)
    conn.execute("DROP TRIGGER entries_append_only_u")
    conn.execute("UPDATE entries SET body = replace(body, 'known', 'KNOWN') WHERE seq = 1")
    conn.commit()
    conn.close()
    broken = waive()
    assert broken.exit_code == 2 and "does not verify" in broken.output, broken.output
    with Ledger.open(ledger, writable=False) as opened:
        assert opened.size() == 1
