"""Approvals on the CI road: dossiers with samples, paths after the staged rename, the commands the
dossier prints, approvals bound to the evidence (an identical re-run stays approved), a revoked
waiver as history, and a site policy that dropped the envelope checks, named."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gate.cli.main import cli
from gate.core.result import GateResult
from gate.trust.attest import ENVELOPE_NAME, sign_directory, verify_envelope
from gate.trust.keys import generate_keypair, load_private_key
from tests.trust.runs import SAMPLES, quant_manifest, signed_run
from tests.trust.trusted import in_days, write_trust

COMMIT = "5e1f0c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f"


def gate(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    found = {}
    for name in ("ci", "alice", "bob"):
        found[f"{name}.key"], found[f"{name}.pub"], _ = generate_keypair(tmp_path / "keys" / name)
    return found


@pytest.fixture
def trust(tmp_path: Path, keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """trust.yaml, given by --trust only (no $GATE_TRUST, no ./trust.yaml): ci signs, alice approves,
    bob waives quality-slices and revokes."""
    monkeypatch.delenv("GATE_TRUST", raising=False)
    monkeypatch.delenv("GATE_LEDGER", raising=False)
    monkeypatch.chdir(tmp_path)
    return write_trust(tmp_path / "policy" / "trust.yaml", keys, approvers=("alice",))


def printed(dossier: Path, verb: str) -> list[str]:
    """The `gate VERB ...` commands the dossier's What-next box prints, as words."""
    lines = [line.strip() for line in (dossier / "dossier.md").read_text().splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith(f"gate {verb} ")]  # type: ignore[misc]


def fake_gate_run(monkeypatch: pytest.MonkeyPatch, key: Path, **run: Any) -> None:
    """`gate run` with the check results stubbed (tests/trust/runs.py): the pipeline, its staging,
    rendering, signing, ledger and carried approvals are the real ones."""
    from gate.engine import runner

    runs = iter(range(1, 100))

    def fake(path: Path, out_dir: Path, _options: object, **_sinks: object) -> GateResult:  # each a second later
        return signed_run(out_dir, path, key, started_at=f"2030-06-01T10:00:{next(runs):02d}+00:00", **run)[1]

    monkeypatch.setattr(runner, "run_manifest", fake)


# 1. samples --------------------------------------------------------------------------------------


def test_a_dossier_with_samples_is_approved_and_verified(tmp_path: Path, keys: dict[str, Path], trust: Path) -> None:
    ledger = tmp_path / "audit.sqlite"
    manifest = quant_manifest(tmp_path / "m.yaml", COMMIT)
    out, _ = signed_run(tmp_path / "out", manifest, keys["ci.key"], ledger=ledger, samples=True)
    approved = gate("approve", out, "--key", keys["alice.key"], "--reason", "ok", "--ledger", ledger, "--trust", trust)
    assert approved.exit_code == 0, approved.output
    verified = gate("verify", out, "--trust", trust, "--ledger", ledger)
    assert verified.exit_code == 0, verified.output
    assert f"ok   {SAMPLES}: sha256 matches the signed statement" in verified.output
    assert "verdict APPROVED by alice" in verified.output
    traced = gate("audit", "trace", COMMIT, "--ledger", ledger, "--trust", trust)
    assert traced.exit_code == 0 and f"{SAMPLES}: sha256 matches the ledger" in traced.output, traced.output
    (out / SAMPLES).write_text('{"id": 1, "agree": true}\n')  # an edited sample is caught
    assert gate("verify", out, "--trust", trust).exit_code == 1


@pytest.mark.parametrize("name", ["../outside.jsonl", "samples/../../outside.jsonl", "/etc/passwd", "a\\b", "a//b"])
def test_a_subject_outside_the_dossier_is_refused(tmp_path: Path, keys: dict[str, Path], name: str) -> None:
    from gate.trust.attest import envelope_for, statement, write_envelope
    from gate.trust.statement import Subject

    out, _ = signed_run(tmp_path / "out", quant_manifest(tmp_path / "m.yaml", COMMIT), keys["ci.key"])
    (tmp_path / "outside.jsonl").write_text("x\n")
    signed = statement(out, ["manifest.yaml", "results.json", "dossier.html", "dossier.md"], "manifest.yaml")
    signed.subject.append(Subject(name=name, digest={"sha256": "0" * 64}))
    write_envelope(out / ENVELOPE_NAME, envelope_for(signed, load_private_key(keys["ci.key"])))
    report = verify_envelope(out, [keys["ci.pub"]])
    assert not report.valid and any("not a file name inside the dossier" in f for f in report.failures)


def test_a_link_out_of_the_dossier_is_refused(tmp_path: Path, keys: dict[str, Path]) -> None:
    out, _ = signed_run(tmp_path / "out", quant_manifest(tmp_path / "m.yaml", COMMIT), keys["ci.key"])
    (tmp_path / "secret").write_text("x\n")
    os.symlink(tmp_path / "secret", out / "samples.jsonl")
    names = [*verify_envelope(out, [keys["ci.pub"]]).statement.files(), "samples.jsonl"]  # type: ignore[union-attr]
    sign_directory(out, names, "manifest.yaml", load_private_key(keys["ci.key"]))
    report = verify_envelope(out, [keys["ci.pub"]])
    assert any("leads out of the dossier directory" in f for f in report.failures), report.failures


# 2., 3., 6. the CI road through `gate run` -------------------------------------------------------


def test_an_identical_rerun_stays_approved_and_other_evidence_needs_a_new_approval(
    tmp_path: Path, keys: dict[str, Path], trust: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gate_run(monkeypatch, keys["ci.key"])
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    ledger = tmp_path / "ci" / "audit.sqlite"
    manifest = quant_manifest(tmp_path / "m.yaml", COMMIT)
    out = tmp_path / "ci" / "dossier"
    run = ("run", manifest, "--out", out, "--sign-key", keys["ci.key"], "--ledger", ledger, "--trust", trust)
    first = gate(*run)
    assert first.exit_code == 4, first.output
    assert f"Dossier: {out}/dossier.html" in first.output  # awaiting: the notice names the signed dossier
    # 2. nothing printed or recorded names the staging folder the run was written in
    assert ".partial-" not in first.output and f"{out}/dossier.html" in first.output
    for name in ("dossier.md", "dossier.html", "ledger.json", "junit.xml"):
        assert ".partial-" not in (out / name).read_text(), name
    entry = json.loads(gate("audit", "list", "--json", "--ledger", ledger).output.splitlines()[0])
    assert entry["dossier"]["dir"] == str(out.resolve()) and entry["dossier"]["evidence_sha256"]
    # 6. the approve command the dossier prints names the run's ledger and trust policy, and runs as printed
    (approve,) = printed(out, "approve")
    assert approve[approve.index("--ledger") + 1] == str(ledger) and approve[approve.index("--trust") + 1] == str(trust)
    approved = gate(*[str(keys["alice.key"]) if w == "YOUR.key" else w for w in approve])
    assert approved.exit_code == 0, approved.output
    assert "site policy: none" in approved.output and "evidence digest sha256:" in approved.output
    (verify,) = printed(out, "verify")
    assert gate(*verify).exit_code == 0
    assert not (tmp_path / ".gate").exists()  # nothing written where no one asked
    # 3. the identical re-run: APPROVED, exit 0, no new signature
    again = gate(*run)
    assert again.exit_code == 0, again.output
    assert "verdict: APPROVED by alice" in again.output and "count for this run" in again.output
    # its CI notice names the approved rendering, whose banner says how the run exits (0), not the signed 4
    (notice,) = [line for line in again.output.splitlines() if line.startswith("::notice title=gate verdict::")]
    assert notice.startswith("::notice title=gate verdict::APPROVED (SIGNED)") and notice.endswith(
        f"Dossier: {out}/dossier.approved.html"
    ), notice
    banner = (out / "dossier.approved.md").read_text().split("\n\n")[1]
    assert "(exit code 0 once approved; the signed run recorded 4, awaiting approval)" in banner, banner
    assert "(exit code 4)" not in (out / "dossier.approved.html").read_text()
    assert "(exit code 4)" in (out / "dossier.md").read_text()  # the signed rendering is the run's as it was
    verified = gate("verify", out, "--trust", trust, "--ledger", ledger)
    assert verified.exit_code == 0 and "verdict APPROVED by alice" in verified.output, verified.output
    assert "so it carries over" in verified.output
    traced = gate("audit", "trace", COMMIT, "--ledger", ledger, "--trust", trust)  # no --dossier
    assert traced.exit_code == 0 and traced.output.rstrip().endswith("VERIFIED"), traced.output
    assert "status    APPROVED by alice" in traced.output
    assert f"dossier   {out}.previous" in traced.output  # the first run, kept aside by the re-run
    third = gate(*run)  # a third run: the first run's dossier is gone, the trace says so and verifies
    assert third.exit_code == 0, third.output
    traced = gate("audit", "trace", COMMIT, "--ledger", ledger, "--trust", trust)
    assert traced.exit_code == 0 and "status    SUPERSEDED by run #4" in traced.output, traced.output
    assert traced.output.count("status    APPROVED by alice") == 2
    # the carried approval in the re-run's dossier cannot be moved to a run with other evidence
    other = quant_manifest(tmp_path / "m2.yaml", "6a" * 20)
    changed = gate("run", other, "--out", tmp_path / "ci" / "other", "--sign-key", keys["ci.key"],
                   "--ledger", ledger, "--trust", trust)  # fmt: skip
    assert changed.exit_code == 4, changed.output
    for name in ("approval.json", "approval.dsse.json"):
        (tmp_path / "ci" / "other" / name).write_bytes((out / name).read_bytes())
    forged = gate("verify", tmp_path / "ci" / "other", "--trust", trust)
    assert forged.exit_code == 1 or "AWAITING APPROVAL (0 of 1" in forged.output, forged.output
    assert "APPROVED by" not in forged.output


def test_a_refused_approval_writes_no_ledger(tmp_path: Path, keys: dict[str, Path], trust: Path) -> None:
    out, _ = signed_run(tmp_path / "out", quant_manifest(tmp_path / "m.yaml", COMMIT), keys["ci.key"], quality="fail")
    refused = gate("approve", out, "--key", keys["alice.key"], "--reason", "ok", "--trust", trust)
    assert refused.exit_code == 1 and "it failed" in refused.output, refused.output
    assert not (tmp_path / ".gate").exists()


def test_gate_run_says_when_it_records_into_the_default_ledger(
    tmp_path: Path, keys: dict[str, Path], trust: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gate.trust.ledger import Ledger
    from gate.trust.ledger_paths import DEFAULT_LEDGER

    fake_gate_run(monkeypatch, keys["ci.key"])
    Ledger.open(DEFAULT_LEDGER).close()
    ran = gate("run", quant_manifest(tmp_path / "m.yaml", COMMIT), "--out", tmp_path / "o", "--trust", trust)
    assert ran.exit_code == 4
    assert f"recorded as entry #1 in {DEFAULT_LEDGER} (the default ledger: {DEFAULT_LEDGER} exists" in ran.output


# 4. a revoked waiver is history -------------------------------------------------------------------


def test_a_revoked_waiver_leaves_the_audit_verified(tmp_path: Path, keys: dict[str, Path], trust: Path) -> None:
    ledger = tmp_path / "audit.sqlite"
    manifest = quant_manifest(tmp_path / "m.yaml", COMMIT)
    waived = gate("waive", "quality-slices", "--manifest", manifest, "--reason", "relabelled", "--expires", in_days(3),
                  "--key", keys["bob.key"], "--ledger", ledger, "--trust", trust)  # fmt: skip
    assert waived.exit_code == 0, waived.output
    revoked = gate("revoke", "--waiver", 1, "--reason", "slice fixed", "--key", keys["bob.key"],
                   "--ledger", ledger, "--trust", trust)  # fmt: skip
    assert revoked.exit_code == 0, revoked.output
    audit = gate("audit", "verify", "--ledger", ledger, "--trust", trust)
    assert audit.exit_code == 0 and audit.output.rstrip().endswith("VERIFIED"), audit.output
    assert "entry #1 (waiver): it was revoked by bob (ledger #2: slice fixed)" in audit.output
    # a revocation by someone who may not revoke is still an untrusted entry
    mallory = tmp_path / "keys" / "mallory"
    generate_keypair(mallory)
    gate("revoke", "--waiver", 1, "--reason", "x", "--by", "bob", "--key", f"{mallory}.key", "--ledger", ledger,
         "--trust", trust)  # fmt: skip
    assert gate("audit", "verify", "--ledger", ledger, "--trust", trust).exit_code in (0, 1)


# 5. a site policy that dropped every envelope check -----------------------------------------------

SITE_POLICY = """\
apiVersion: gate/policy/v1
name: site-lax
version: "1"
description: a site policy that drops the envelope checks of quantisation
interventions:
  quantisation:
    claims:
      bounded-degradation:
        admissible: true
        rule: the site runs only its performance check
        checks:
          - {check: phase-performance, step: 6, severity: warn, why: "the site only times it"}
"""


def test_an_approval_names_the_site_policy_that_dropped_the_envelope_checks(
    tmp_path: Path, keys: dict[str, Path], trust: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "lax.yaml").write_text(SITE_POLICY)
    ledger = tmp_path / "audit.sqlite"
    manifest = quant_manifest(tmp_path / "m.yaml", COMMIT)
    out, result = signed_run(tmp_path / "out", manifest, keys["ci.key"], ledger=ledger, policy_dirs=[site])
    assert [c.check for c in result.checks] == ["phase-performance"]
    assert "every envelope held" not in result.summary and "no check judged the claim's envelopes" in result.summary
    approved = gate("approve", out, "--key", keys["alice.key"], "--reason", "ok", "--ledger", ledger, "--trust", trust)
    assert approved.exit_code == 0, approved.output
    assert "site policy site-lax@1" in approved.output, approved.output
    dropped = "checks dropped: quality-slices, quant-invariants, reset-isolation, invalidation"
    assert dropped in approved.output, approved.output
    assert "every envelope held" not in (out / "dossier.approved.md").read_text()
    assert "no check judged the claim's envelopes" in (out / "dossier.approved.md").read_text()
    # the site policy is main's here: the verifier names it, so the trace judges the plan as main's
    traced = gate("audit", "trace", COMMIT, "--ledger", ledger, "--trust", trust, "--policy-dir", site)
    assert traced.exit_code == 0, traced.output
    assert "site policy site-lax@1" in traced.output and "checks dropped: quality-slices" in traced.output
    # without it, main's policies are the built-in ones, which this plan was not built from
    assert gate("audit", "trace", COMMIT, "--ledger", ledger, "--trust", trust).exit_code == 7
    entry = json.loads(gate("audit", "list", "--json", "--kind", "approval", "--ledger", ledger).output)
    assert "site-lax@1" in entry["site_policy"][0]


def test_the_evidence_digest_changes_with_every_bound_field() -> None:
    from gate.trust.evidence import evidence_digest

    results: dict[str, Any] = {
        "verdict": "awaiting-approval",
        "manifest": {"name": "m", "change": {"commit": "a" * 40}},
        "manifest_digest": {"sha256": "1" * 64},
        "plan": {"checks": [{"check": "quality-slices"}]},
        "policies": [{"path": "/x/policies/q.yaml", "sha256": "2" * 64}],
        "subjects": {"candidate": {"weights": "3" * 64}},
        "checks": [
            {"check": "quality-slices", "status": "pass", "severity": "deny", "step": 7,
             "metrics": {"numbers.greedy-match.bound": 0.93, "samples_per_s": 16.4}},
            {"check": "phase-performance", "status": "pass", "severity": "deny", "step": 6,
             "metrics": {"tpot_p95_ratio": 1.6}, "controls": [{"fault": "f", "outcome": "detected"}]},
        ],
        "started_at": "2030-01-01T00:00:00+00:00",
    }  # fmt: skip
    base = evidence_digest(results, {SAMPLES: "4" * 64, "dossier.html": "5" * 64})

    def changed(**edit: Any) -> str:
        return evidence_digest({**json.loads(json.dumps(results)), **edit}, {SAMPLES: "4" * 64})

    assert changed() == base  # the dossier's own files, times: not evidence
    assert changed(started_at="2031-01-01T00:00:00+00:00") == base
    results["plan"]["checks"][0]["policy_rule"] = "/x/policies/q.yaml: interventions.quantisation.claims"
    base = evidence_digest(results, {SAMPLES: "4" * 64, "dossier.html": "5" * 64})
    moved = json.loads(json.dumps(results))
    moved["policies"][0]["path"] = "/y/q.yaml"  # the same policy installed elsewhere
    moved["plan"]["checks"][0]["policy_rule"] = "/y/q.yaml: interventions.quantisation.claims"
    moved["checks"][0]["metrics"]["samples_per_s"] = 18.3  # throughput of the quality check
    moved["checks"][1]["metrics"]["tpot_p95_ratio"] = 1.9  # step 6 clocks
    moved["checks"][1]["status"] = "warn"  # read alike by the verdict
    assert evidence_digest(moved, {SAMPLES: "4" * 64}) == base
    for edit in (
        {"manifest": {"name": "m", "change": {"commit": "b" * 40}}},
        {"manifest_digest": {"sha256": "9" * 64}},
        {"plan": {"checks": []}},
        {"policies": [{"sha256": "8" * 64}]},
        {"site_policy": ["site policy x"]},
        {"subjects": {"candidate": {"weights": "7" * 64}}},
        {"datasets": {"numbers": "6" * 64}},
        {"baseline": {"sha256": "5" * 64}},
    ):
        assert changed(**edit) != base, edit
    bound = json.loads(json.dumps(results))
    bound["checks"][0]["metrics"]["numbers.greedy-match.bound"] = 0.92
    assert evidence_digest(bound, {SAMPLES: "4" * 64}) != base
    assert evidence_digest(results, {SAMPLES: "0" * 64}) != base


def test_a_batch_counts_an_approved_rerun_as_its_exit_code_says() -> None:
    from gate.engine.batch import batch_verdict
    from gate.engine.tasks import TaskRecord

    def record(name: str, verdict: str, code: int, approved_by: list[str]) -> TaskRecord:
        return TaskRecord(name, f"{name}.yaml", name, verdict, code, "", approved_by=approved_by)

    approved = record("int8", "awaiting-approval", 0, ["alice"])
    verdict, code, line = batch_verdict([record("layout", "pass", 0, []), approved])
    assert (verdict.value, code) == ("pass", 0) and "1 of them approved" in line
    verdict, code, _ = batch_verdict([approved, record("int4", "awaiting-approval", 4, [])])
    assert (verdict.value, code) == ("awaiting-approval", 4)


def test_gate_approve_records_where_the_run_was_recorded_and_says_so(
    tmp_path: Path, keys: dict[str, Path], trust: Path
) -> None:
    ledger = tmp_path / "ci" / "audit.sqlite"
    out, _ = signed_run(tmp_path / "out", quant_manifest(tmp_path / "m.yaml", COMMIT), keys["ci.key"], ledger=ledger)
    approved = gate("approve", out, "--key", keys["alice.key"], "--reason", "ok", "--trust", trust)
    assert approved.exit_code == 0, approved.output
    assert (
        f"ledger {ledger.resolve()} (the ledger the run was recorded in, from {out / 'ledger.json'})" in approved.output
    )
    assert not (tmp_path / ".gate").exists()
    assert "APPROVED" in gate("audit", "list", "--kind", "approval", "--ledger", ledger).output
