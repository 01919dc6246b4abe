"""A key the trust policy or the ledger refuses is refused before anything is signed, each in its
own line naming the key id, the policy file and the people it knows: `gate approve --key` (a
stranger's key, a key of the wrong role, a revoked key) and `gate run --sign-key` (the same, exit 2,
before the run starts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gate.cli.main import cli
from gate.errors import EXIT_BAD_INPUT, EXIT_GATE_FAILED
from gate.trust.keys import keyid, load_public_key
from tests.trust.runs import quant_manifest, signed_run
from tests.trust.trusted import make_keys, write_trust

COMMIT = "c0ffee12" * 5


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    found = make_keys(tmp_path_factory.mktemp("keys"), ("ci", "alice", "bob", "mallory"))
    rotated = make_keys(tmp_path_factory.mktemp("next"), ("ci",))
    found["ci-2027.key"], found["ci-2027.pub"] = rotated["ci.key"], rotated["ci.pub"]
    return found


@pytest.fixture
def trust(tmp_path: Path, keys: dict[str, Path]) -> Path:
    """ci signs runs with two keys (2026 and 2027), alice approves, bob waives and revokes; mallory: no key in it."""
    mine = {k: v for k, v in keys.items() if not k.startswith("ci-2027")}
    return write_trust(tmp_path / "trust.yaml", mine, approvers=("alice",), extra_ci_keys=(keys["ci-2027.pub"],))


def kid(keys: dict[str, Path], name: str) -> str:
    return keyid(load_public_key(keys[f"{name}.pub"]))[:16]


def gate(*args: Any) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def approve(out: Path, key: Path, ledger: Path, trust: Path) -> Any:
    return gate("approve", out, "--key", key, "--reason", "bounds hold", "--ledger", ledger, "--trust", trust)


def test_the_key_fixture_holds_a_second_ci_key(keys: dict[str, Path]) -> None:
    assert keys["ci-2027.pub"].is_file() and kid(keys, "ci-2027") != kid(keys, "ci")


def test_approve_with_a_key_the_policy_does_not_know_names_it_the_policy_and_its_people(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, trust: Path
) -> None:
    out, _ = signed_run(tmp_path / "out", quant_manifest(tmp_path / "m.yaml", COMMIT), keys["ci.key"], ledger=ledger)
    refused = approve(out, keys["mallory.key"], ledger, trust)
    assert refused.exit_code == EXIT_GATE_FAILED, refused.output
    (line,) = [x for x in refused.output.splitlines() if x.strip()]
    assert "approver name" not in line, line  # the old, wrong refusal
    assert f"key {kid(keys, 'mallory')} is not in the trust policy {trust}" in line, line
    assert f"alice (key {kid(keys, 'alice')})" in line and f"bob (key {kid(keys, 'bob')})" in line, line
    assert not (out / "approval.json").exists()


def test_approve_with_a_key_of_another_role_names_who_may(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, trust: Path
) -> None:
    out, _ = signed_run(tmp_path / "out", quant_manifest(tmp_path / "m.yaml", COMMIT), keys["ci.key"], ledger=ledger)
    refused = approve(out, keys["bob.key"], ledger, trust)
    assert refused.exit_code == EXIT_GATE_FAILED, refused.output
    (line,) = [x for x in refused.output.splitlines() if x.strip()]
    assert f"key {kid(keys, 'bob')} belongs to bob, who may not approve quantisation/" in line, line
    assert f"under the trust policy {trust}; who may: alice (key {kid(keys, 'alice')})" in line, line
    assert not (out / "approval.json").exists()


def test_approve_with_a_revoked_key_names_who_revoked_it_and_when(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, trust: Path
) -> None:
    out, _ = signed_run(tmp_path / "out", quant_manifest(tmp_path / "m.yaml", COMMIT), keys["ci.key"], ledger=ledger)
    revoked = gate(
        "revoke", "--key-id", keys["alice.pub"], "--from", "2026-01-01T00:00:00+00:00", "--reason", "laptop lost",
        "--key", keys["bob.key"], "--ledger", ledger, "--trust", trust,
    )  # fmt: skip
    assert revoked.exit_code == 0, revoked.output
    refused = approve(out, keys["alice.key"], ledger, trust)
    assert refused.exit_code == EXIT_GATE_FAILED, refused.output
    (line,) = [x for x in refused.output.splitlines() if x.strip()]
    assert f"key {kid(keys, 'alice')} (alice) was revoked from 2026-01-01T00:00:00+00:00 by bob" in line, line
    assert "laptop lost" in line and f"the trust policy {trust}: alice has no other key in it" in line, line
    assert not (out / "approval.json").exists()


def run(tmp_path: Path, key: Path, ledger: Path, trust: Path) -> Any:
    manifest = quant_manifest(tmp_path / "m.yaml", COMMIT)
    return gate("run", manifest, "--out", tmp_path / "out", "--sign-key", key, "--ledger", ledger, "--trust", trust)


def test_run_refuses_a_sign_key_the_ledger_revoked_before_running(tmp_path: Path, ledger: Path) -> None:
    made: dict[str, Path] = {}
    for name in ("ci", "ci-2027", "alice", "bob"):  # gate keygen --out PREFIX: PREFIX.key, PREFIX.pub
        assert gate("keygen", "--out", tmp_path / "keys" / name).exit_code == 0
        made[f"{name}.key"], made[f"{name}.pub"] = tmp_path / "keys" / f"{name}.key", tmp_path / "keys" / f"{name}.pub"
    people = {k: v for k, v in made.items() if not k.startswith("ci-2027")}
    trust = write_trust(tmp_path / "trust.yaml", people, approvers=("alice",), extra_ci_keys=(made["ci-2027.pub"],))
    revoked = gate(
        "revoke", "--key-id", made["ci.pub"], "--reason", "rotated to ci-2027", "--key", made["alice.key"],
        "--ledger", ledger, "--trust", trust,
    )  # fmt: skip
    assert revoked.exit_code == 0, revoked.output
    refused = run(tmp_path, made["ci.key"], ledger, trust)
    assert refused.exit_code == EXIT_BAD_INPUT, refused.output
    (line,) = [x for x in refused.output.splitlines() if x.strip()]
    assert f"key {kid(made, 'ci')} (ci) was revoked from " in line and "by alice" in line, line
    assert "rotated to ci-2027" in line and f"use ci's key {kid(made, 'ci-2027')}" in line, line
    assert not (tmp_path / "out").exists()
    # the key it names instead passes the same check (gate run's, before running)
    from gate.trust.key_refusal import check_sign_key

    check_sign_key(made["ci-2027.key"], trust, ledger)


@pytest.mark.parametrize(
    ("who", "says"),
    [("mallory", "is not in the trust policy"), ("bob", "belongs to bob, who is not a run signer in the trust policy")],
)
def test_run_refuses_a_sign_key_the_trust_policy_does_not_make_a_run_signer(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, trust: Path, who: str, says: str
) -> None:
    refused = run(tmp_path, keys[f"{who}.key"], ledger, trust)
    assert refused.exit_code == EXIT_BAD_INPUT, refused.output
    (line,) = [x for x in refused.output.splitlines() if x.strip()]
    assert f"key {kid(keys, who)} {says}" in line and str(trust) in line, line
    knows = "run signers: ci (key" if who == "bob" else f"which knows alice (key {kid(keys, 'alice')})"
    assert knows in line, line
    assert not (tmp_path / "out").exists() and not ledger.exists()
