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
from gate.errors import EXIT_OTHER_COMMIT
from gate.trust.approval_predicate import APPROVAL_FILE, APPROVAL_KIND, read_run_statement
from gate.trust.approvals import approval_record, approval_statement
from gate.trust.attest import ENVELOPE_NAME, envelope_for
from gate.trust.keys import load_private_key
from gate.trust.ledger import Ledger
from gate.trust.run_record import record_run
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
    verify = gate("verify", out, "--trust", trust, "--commit", NEW)  # authentic, another commit's: exit 8
    assert verify.exit_code == EXIT_OTHER_COMMIT, verify.output
    assert f"OTHER COMMIT: {out}: the signed statement is for commit {OLD}, not {NEW}" in verify.output
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
        opened.append(APPROVAL_KIND, approval_record(envelope_for(statement, key), key, statement).dump())
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
    from gate._util.digest import sha256_file

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
    assert verify.exit_code == 7 and "verdict FAIL" in verify.output, verify.output  # authentic, not deployable
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
        bad, _ = opened.append(APPROVAL_KIND, approval_record(envelope_for(statement, key), key, statement).dump())
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


# issue 34: nothing fails open -------------------------------------------------------------------
# Each test below failed on the code before issue 34 (verify exited 0 for any authentic dossier;
# waivers were trusted as the run judged them; `approximate` came from results.json; any signature
# by a --run-key counted; baselines were unsigned and unbound; /dev/zero as a key hung).


DEPLOYED = "deployed"


def _recipe() -> list[str]:
    """The `run:` lines of docs/audit.md's deploy job, as written."""
    import re

    text = (Path(__file__).parents[2] / "docs" / "audit.md").read_text()
    job = text[text.index("deploy:\n  steps:") :]
    job = job[: job.index("```")]
    return [m.group(1).split("  #")[0].strip() for m in re.finditer(r"- run: (.+)", job)]


def _deploy(work: Path, dossier: Path, trust: Path, ledger: Path, commit: str) -> tuple[bool, list[int]]:
    """Run the recipe's steps as CI would (each a shell step; the job stops at the first that fails)."""
    import os
    import shutil
    import subprocess
    import sys

    work.mkdir(parents=True)
    shutil.copytree(dossier, work / "dossier")
    shutil.copy(trust, work / "trust.yaml")
    (work / "deploy.sh").write_text(f'#!/bin/sh\necho "$1" > {DEPLOYED}\n')
    (work / "deploy.sh").chmod(0o755)
    env = {**os.environ, "GITHUB_SHA": commit, "GATE_LEDGER": str(ledger)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env.pop("GATE_TRUST", None)
    codes = []
    for step in _recipe():
        code = subprocess.run(["bash", "-c", step], cwd=work, env=env, capture_output=True, timeout=120).returncode
        codes.append(code)
        if code != 0:
            break
    return (work / DEPLOYED).is_file(), codes


def test_the_documented_deploy_recipe_ships_only_deployable_verdicts(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, trust: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.trust.runs import exact_manifest

    assert len(_recipe()) == 3 and _recipe()[-1].startswith("./deploy.sh")
    monkeypatch.setenv("GATE_TRUST", str(trust))
    commits = {name: f"{i}abc" * 10 for i, name in enumerate(("failing", "awaiting", "approved", "passing"), 1)}
    failing = _run(tmp_path, keys, ledger, "failing", commits["failing"], quality="fail")
    awaiting = _run(tmp_path, keys, ledger, "awaiting", commits["awaiting"])
    approved = _run(tmp_path, keys, ledger, "approved", commits["approved"])
    assert _approve(approved, keys["alice.key"], ledger, trust).exit_code == 0
    passing, result = signed_run(
        tmp_path / "passing" / "out",
        exact_manifest(tmp_path / "passing" / "m.yaml", commits["passing"]),
        keys["ci.key"],
        ledger=ledger,
    )
    assert result.verdict.value == "pass"
    shipped = {
        name: _deploy(tmp_path / f"job-{name}", out, trust, ledger, commits[name])
        for name, out in (("failing", failing), ("awaiting", awaiting), ("approved", approved), ("passing", passing))
    }
    assert shipped == {
        "failing": (False, [7]),
        "awaiting": (False, [7]),
        "approved": (True, [0, 0, 0]),
        "passing": (True, [0, 0, 0]),
    }, shipped
    # an auditor checking authenticity only asks for it
    assert gate("verify", failing, "--trust", trust, "--any-verdict").exit_code == 0
    traced = gate("audit", "trace", commits["failing"], "--ledger", ledger, "--trust", trust)
    assert traced.exit_code == 7 and "NOT DEPLOYABLE" in traced.output, traced.output
    assert (
        gate("audit", "trace", commits["failing"], "--ledger", ledger, "--trust", trust, "--any-verdict").exit_code == 0
    )


def _failing_check(manifest: Path) -> Any:
    from gate.core.result import CheckResult
    from gate.trust.waivers import planned_checks

    check = planned_checks(manifest, [])[1][0]
    return check, CheckResult(
        check=check, status="fail", severity="deny", step=3, message="max |d| 0.4 > atol",  # type: ignore[arg-type]
        exercise={"cache_len": 64},
    )  # fmt: skip


def test_a_pull_request_cannot_waive_its_own_failure_with_its_own_trust_policy(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.trust.runs import exact_manifest

    main_trust = write_trust(tmp_path / "main" / "trust.yaml", keys, waiver_checks=("*",))
    eve = make_keys(tmp_path / "eve", ("eve",))
    pr_trust = write_trust(
        tmp_path / "pr" / "trust.yaml", {**keys, **eve}, waiver_people=("eve",), waiver_checks=("*",)
    )
    manifest = exact_manifest(tmp_path / "pr" / "m.yaml", NEW)
    check, failed = _failing_check(manifest)
    waived = gate(
        "waive", check, "--manifest", manifest, "--reason", "mine", "--key", eve["eve.key"],
        "--expires", in_days(3), "--ledger", ledger, "--trust", pr_trust,
    )  # fmt: skip
    assert waived.exit_code == 0, waived.output
    monkeypatch.setenv("GATE_TRUST", str(pr_trust))  # the run reads the PR's own trust.yaml
    out, result = signed_run(tmp_path / "pr" / "out", manifest, keys["ci.key"], ledger=ledger, checks=[failed])
    assert result.verdict.value == "pass-with-waivers"
    monkeypatch.delenv("GATE_TRUST")
    verify = gate("verify", out, "--trust", main_trust, "--commit", NEW, "--ledger", ledger)
    assert verify.exit_code == 7, verify.output
    assert f"waiver of {check}: does NOT count" in verify.output and "eve" in verify.output
    assert "the run judged its waivers under trust policy" in verify.output
    assert "the run used another trust policy" in verify.output
    traced = gate("audit", "trace", NEW, "--trust", main_trust, "--ledger", ledger)
    assert traced.exit_code == 7 and "does NOT count" in traced.output, traced.output
    # without the ledger a waiver cannot be judged, so it cannot ship
    unjudged = gate("verify", out, "--trust", main_trust)
    assert unjudged.exit_code == 7 and "NOT JUDGED" in unjudged.output, unjudged.output

    # the same failure waived by bob, whom main's policy lets waive, ships
    legit = exact_manifest(tmp_path / "legit" / "m.yaml", OLD)
    waived = gate(
        "waive", check, "--manifest", legit, "--reason", "known", "--key", keys["bob.key"],
        "--expires", in_days(3), "--ledger", ledger, "--trust", main_trust,
    )  # fmt: skip
    assert waived.exit_code == 0, waived.output
    monkeypatch.setenv("GATE_TRUST", str(main_trust))
    out2, result2 = signed_run(tmp_path / "legit" / "out", legit, keys["ci.key"], ledger=ledger, checks=[failed])
    assert result2.verdict.value == "pass-with-waivers"
    ok = gate("verify", out2, "--trust", main_trust, "--commit", OLD, "--ledger", ledger)
    assert ok.exit_code == 0 and "each counting under the verifier's trust policy" in ok.output, ok.output
    assert gate("audit", "trace", OLD, "--trust", main_trust, "--ledger", ledger).exit_code == 0
    # a revocation by main's revoker voids it for the verifier too
    seq = next(e.seq for e in Ledger.open(ledger, writable=False).entries(WAIVER_KIND) if e.body["approver"] == "bob")
    revoked = gate("revoke", "--waiver", seq, "--reason", "no", "--key", keys["alice.key"], "--trust", main_trust,
                   "--ledger", ledger)  # fmt: skip
    assert revoked.exit_code == 0, revoked.output
    after = gate("verify", out2, "--trust", main_trust, "--commit", OLD, "--ledger", ledger)
    assert after.exit_code == 7 and "revoked" in after.output, after.output


def test_approximate_is_the_verifiers_call_and_approver_signatures_are_no_run_signatures(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, trust: Path
) -> None:
    manifest = quant_manifest(tmp_path / "r" / "kv-int8.yaml", NEW)
    out, result = signed_run(tmp_path / "r" / "out", manifest, keys["ci.key"])
    # the CI key signs a PASS whose results say the plan is not approximate (a PR's --policy-dir)
    plan = {**result.plan, "approximate": False}
    forged = result.model_copy(update={"verdict": Verdict("pass"), "exit_code": 0, "plan": plan})
    (out / "results.json").write_text(forged.model_dump_json(indent=2) + "\n")
    write_outputs(forged, out, manifest, keys["ci.key"], environ={})
    verify = gate("verify", out, "--trust", trust, "--any-verdict")
    assert verify.exit_code == 1 and "an approximate change cannot PASS" in verify.output, verify.output

    # an approver's added signature does not pass as the run's, whatever key is called a run key
    honest = _run(tmp_path, keys, ledger, "h", OLD)
    assert _approve(honest, keys["alice.key"], ledger, trust).exit_code == 0
    as_run = gate("verify", honest, "--run-key", keys["alice.pub"], "--any-verdict")
    assert as_run.exit_code == 1 and "not signed by a run signer" in as_run.output, as_run.output
    assert "was added to the run's" in as_run.output
    assert gate("verify", honest, "--run-key", keys["ci.pub"], "--approver-key", keys["alice.pub"]).exit_code == 0


@pytest.mark.parametrize("what", ["devzero", "fifo", "huge"])
def test_a_key_or_trust_file_that_is_a_device_fifo_or_huge_is_one_line_exit_2(tmp_path: Path, what: str) -> None:
    import os

    if what == "devzero":
        bad = Path("/dev/zero")
    elif what == "fifo":
        bad = tmp_path / "fifo"
        os.mkfifo(bad)
    else:
        bad = tmp_path / "huge.pub"
        bad.write_bytes(b"x" * (2 * 1024 * 1024))
    out = tmp_path / "out"
    out.mkdir()
    for args in (["verify", out, "--run-key", bad], ["verify", out, "--trust", bad]):
        result = CliRunner().invoke(cli, [str(a) for a in args])
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in result.output, result.output


MAIN_SHA = "9c0ffee1" * 5


def _baseline(root: Path, key: Path | None, commit: str = MAIN_SHA, entries: dict[str, Any] | None = None) -> Path:
    """A baseline directory as `gate record --sign-key KEY` leaves it (answers by hand: none is read here)."""
    import gate as gate_pkg
    from gate.adapters.recorded.store import FORMAT, reference_key
    from gate.trust.baseline import seal_baseline

    identity = {"model": "reference", "config_sha256": "ab" * 32, "rope_base": 10000.0}
    header = {
        "format": FORMAT, "key": reference_key(identity, "reference", {}), "identity": identity,
        "adapter": "reference", "options": {}, "gate_version": gate_pkg.__version__, "gate_commit": None,
        "manifest": "replay", "entries": entries or {"q" * 64: {"sha256": "0" * 64, "shape": [1, 2], "question": "x"}},
        "shape": {"name": "reference", "vocab_size": 256, "max_len": 512, "uses_cache": True, "dtype": "float32"},
    }  # fmt: skip
    root.mkdir(parents=True)
    (root / "baseline.json").write_text(json.dumps(header))
    if key is not None:
        seal_baseline(root, key, commit)
    return root


def _replay(tmp_path: Path, baseline: Path, trust: Path, *extra: Any) -> Any:
    manifest = tmp_path / "replay.yaml"
    manifest.write_text(
        "apiVersion: gate/v1\nname: replay\nintervention: layout\nclaim: {level: tolerance}\n"
        "identity: [token-ids, positions, kv-dtype]\n"
        f"subject:\n  reference: {{adapter: recorded, options: {{baseline: {baseline}}}}}\n"
        "  candidate: {adapter: reference, options: {}}\n"
    )
    return CliRunner().invoke(
        cli, ["run", str(manifest), "--out", str(tmp_path / "out"), "-q", "--trust", str(trust), *map(str, extra)]
    )


def _refused(result: Any, *words: str) -> None:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "Traceback" not in result.output and all(w in lines[0] for w in words), result.output


def test_a_baseline_must_be_signed_by_a_run_signer_for_mains_commit(
    tmp_path: Path, keys: dict[str, Path], trust: Path
) -> None:
    def replay(baseline: Path, *extra: Any) -> Any:
        return _replay(tmp_path / baseline.name, baseline, trust, *extra)

    main = _baseline(tmp_path / "main", keys["ci.key"])
    _refused(replay(_baseline(tmp_path / "unsigned", None), "--baseline-commit", MAIN_SHA), "unsigned")
    _refused(
        replay(_baseline(tmp_path / "stranger", keys["mallory.key"]), "--baseline-commit", MAIN_SHA), "not trusted"
    )
    _refused(replay(_baseline(tmp_path / "approver", keys["alice.key"]), "--baseline-commit", MAIN_SHA), "not trusted")
    _refused(replay(_baseline(tmp_path / "pr", keys["ci.key"], commit=NEW), "--baseline-commit", MAIN_SHA),
             f"recorded for commit {NEW}, not main's {MAIN_SHA}")  # fmt: skip
    _refused(replay(main), "say which commit is main's")
    # the forgery: the PR's regressed build recorded, main's signed header copied over it
    forged = _baseline(tmp_path / "forged", None, entries={"p" * 64: {"sha256": "1" * 64, "shape": [1, 2]}})
    doc = json.loads((main / "baseline.json").read_text())
    doc["entries"] = json.loads((forged / "baseline.json").read_text())["entries"]
    (forged / "baseline.json").write_text(json.dumps(doc))
    _refused(replay(forged, "--baseline-commit", MAIN_SHA), "the signature does not verify")
    # a header whose stated identity is not what its key was computed from (copied key, other model)
    rekeyed = _baseline(tmp_path / "rekeyed", None)
    doc = json.loads((main / "baseline.json").read_text())
    doc["identity"]["rope_base"] = 500000.0
    (rekeyed / "baseline.json").write_text(json.dumps(doc))
    _refused(replay(rekeyed, "--baseline-commit", MAIN_SHA), "key is not the one recomputed")


@pytest.mark.parametrize("content", ["{not json", "[]", '{"format": "gate/baseline/v1"}', "fifo"])
def test_a_malformed_baseline_is_one_line_exit_2(tmp_path: Path, trust: Path, content: str) -> None:
    import os

    baseline = tmp_path / "b"
    baseline.mkdir()
    if content == "fifo":
        os.mkfifo(baseline / "baseline.json")
    else:
        (baseline / "baseline.json").write_text(content)
    _refused(_replay(tmp_path, baseline, trust, "--baseline-commit", MAIN_SHA), "baseline.json")


def test_out_never_moves_or_deletes_a_folder_that_is_not_a_gate_output(tmp_path: Path, keys: dict[str, Path]) -> None:
    mine = tmp_path / "keys-folder"
    mine.mkdir()
    (mine / "ci.key").write_text("precious")
    manifest = Path(__file__).parents[2] / "examples" / "reference-static-layout.yaml"
    result = CliRunner().invoke(cli, ["run", str(manifest), "--out", str(mine), "-q"])
    assert result.exit_code == 2 and "is not a gate output" in result.output, result.output
    assert (mine / "ci.key").read_text() == "precious" and not Path(f"{mine}.previous").exists()
    # nor a <out>.previous of the user's, which the next run would delete
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("{}")
    theirs = tmp_path / "out.previous"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    result = CliRunner().invoke(cli, ["run", str(manifest), "--out", str(out), "-q"])
    assert result.exit_code == 2 and "would have it deleted" in result.output, result.output
    assert (theirs / "notes.txt").read_text() == "mine" and (out / "results.json").is_file()


def test_the_previous_dossier_is_aside_before_torch_is_even_imported(tmp_path: Path) -> None:
    """A kill in the first seconds (here: the moment torch is imported) finds no dossier in --out."""
    import os
    import subprocess
    import sys

    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text('{"verdict": "pass"}')
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, sys\n"
        "class Kill:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch':\n"
        f"            open({str(tmp_path / 'seen')!r}, 'w').write(str(os.path.exists({str(out / 'results.json')!r})))\n"
        "            os._exit(137)\n"
        "sys.meta_path.insert(0, Kill())\n"
    )
    manifest = Path(__file__).parents[2] / "examples" / "reference-static-layout.yaml"
    env = {**os.environ, "PYTHONPATH": str(hook), "GATE_THREADS": "1"}
    gate_cli = Path(sys.executable).parent / "gate"
    done = subprocess.run([str(gate_cli), "run", str(manifest), "--out", str(out), "-q"], env=env, timeout=120)
    assert done.returncode == 137
    assert (tmp_path / "seen").read_text() == "False"  # the previous run was already in out.previous
    assert (tmp_path / "out.previous" / "results.json").is_file()


def test_a_matrix_of_100000_seeds_is_refused_at_parse_time(tmp_path: Path) -> None:
    manifest = Path(__file__).parents[2] / "examples" / "reference-static-layout.yaml"
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(f"manifests: [{manifest}]\nseeds: [{', '.join(str(i) for i in range(100_000))}]\n")
    result = CliRunner().invoke(cli, ["run", "--matrix", str(matrix), "--out", str(tmp_path / "out")])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "more than 20000 nodes" in lines[0], result.output


@pytest.mark.parametrize("content", ["devzero", "{not json", '{"checkpoint": 3}'])
def test_a_held_checkpoint_that_is_a_device_or_malformed_is_one_line_exit_2(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, content: str
) -> None:
    _run(tmp_path, keys, ledger, "r", NEW)
    held = Path("/dev/zero") if content == "devzero" else tmp_path / "held.json"
    if content != "devzero":
        held.write_text(content)
    result = CliRunner().invoke(cli, ["audit", "verify", "--ledger", str(ledger), "--checkpoint", str(held)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and str(held) in lines[0], result.output
