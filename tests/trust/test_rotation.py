"""Revocation and CI key rotation, and the PR head commit on GitHub, with real keys and SQLite."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gate._util.clock import now_utc
from gate.cli.main import cli
from gate.core.manifest import Change
from gate.trust.ledger import Ledger
from tests.trust.runs import quant_manifest, signed_run
from tests.trust.trusted import make_keys, write_trust

C1, C2 = "c1d2e3f4" * 5, "d4e5f6a7" * 5


def gate(*args: Any) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_rotating_the_ci_key_keeps_old_runs_and_revokes_later_signatures(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys", ("ci", "ci2", "alice", "bob"))
    # 1. the policy lists the old and the new CI key under the one run signer "ci"
    trust = write_trust(tmp_path / "trust.yaml", {k: v for k, v in keys.items() if not k.startswith("ci2")},
                        extra_ci_keys=(keys["ci2.pub"],))  # fmt: skip
    ledger = tmp_path / "ledger.sqlite"
    old = signed_run(tmp_path / "old", quant_manifest(tmp_path / "m1.yaml", C1), keys["ci.key"], ledger=ledger)[0]
    time.sleep(1.1)  # ledger times have one-second resolution
    # 2. revoke the old key from now on
    revoked = gate("revoke", "--key-id", keys["ci.pub"], "--from", now_utc(), "--reason", "rotated",
                   "--key", keys["alice.key"], "--trust", trust, "--ledger", ledger)  # fmt: skip
    assert revoked.exit_code == 0, revoked.output
    new = signed_run(tmp_path / "new", quant_manifest(tmp_path / "m2.yaml", C2), keys["ci2.key"], ledger=ledger)[0]
    stolen = signed_run(tmp_path / "stolen", quant_manifest(tmp_path / "m3.yaml", C2), keys["ci.key"], ledger=ledger)[0]
    with Ledger.open(ledger, writable=False) as opened:
        assert [e.kind for e in opened.entries()] == ["run", "revocation", "run", "run"]
    # authentic runs awaiting approval: --any-verdict (without it, exit 7: not deployable)
    assert gate("audit", "trace", C1, "--ledger", ledger, "--trust", trust, "--any-verdict").exit_code == 0
    assert gate("verify", old, "--trust", trust, "--ledger", ledger).exit_code == 7
    assert gate("verify", old, "--trust", trust, "--ledger", ledger, "--any-verdict").exit_code == 0
    assert gate("verify", new, "--trust", trust, "--ledger", ledger, "--commit", C2, "--any-verdict").exit_code == 0
    bad = gate("verify", stolen, "--trust", trust, "--ledger", ledger)
    assert bad.exit_code == 1 and "rotated" in bad.output and "revoked from" in bad.output, bad.output
    audit = gate("audit", "verify", "--ledger", ledger, "--trust", trust)
    assert audit.exit_code == 1 and "entry #4 (run) is untrusted" in audit.output, audit.output
    # a stranger's revocation counts for nothing
    refused = gate("revoke", "--key-id", keys["ci2.pub"], "--reason", "x", "--by", "bob",
                   "--key", keys["ci2.key"], "--trust", trust, "--ledger", ledger)  # fmt: skip
    assert refused.exit_code == 2


def test_a_revoked_waiver_no_longer_applies(tmp_path: Path, monkeypatch: Any) -> None:
    keys = make_keys(tmp_path / "keys", ("ci", "alice", "bob"))
    trust = write_trust(tmp_path / "trust.yaml", keys)
    monkeypatch.setenv("GATE_TRUST", str(trust))
    ledger = tmp_path / "ledger.sqlite"
    manifest = quant_manifest(tmp_path / "m.yaml", C1)
    from tests.trust.trusted import in_days

    assert gate("waive", "quality-slices", "--manifest", manifest, "--reason", "relabelled", "--expires", in_days(2),
                "--key", keys["bob.key"], "--ledger", ledger).exit_code == 0  # fmt: skip
    assert (
        signed_run(tmp_path / "a", manifest, keys["ci.key"], ledger=ledger, quality="fail")[1].checks[0].status
        == "waived"
    )
    assert (
        gate("revoke", "--waiver", 1, "--reason", "slice fixed", "--key", keys["bob.key"], "--ledger", ledger).exit_code
        == 0
    )
    after = signed_run(tmp_path / "b", manifest, keys["ci.key"], ledger=ledger, quality="fail")[1]
    assert after.verdict.value == "fail" and "revoked by bob" in after.checks[0].message


def test_the_pull_request_head_commit_is_recorded_not_the_merge_commit(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7, "head": {"sha": C2}}}))
    env = {"GITHUB_SHA": C1, "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(event)}
    change = Change().with_ci_commit(env)
    assert (change.commit, change.pull_request) == (C2, 7)
    assert Change().with_ci_commit({**env, "GITHUB_EVENT_NAME": "push"}).commit == C1
