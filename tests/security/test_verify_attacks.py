"""Nothing a pull request controls decides its own verdict at verification: each attack is played
through the real CLI (real runs of the reference decoder, real keys, a real SQLite ledger), and the
deploy job's verifier, naming main's trust policy and main's policies, answers NOT DEPLOYABLE (exit 7)
or refuses (exit 2) in one line naming the file and its digest. docs/security.md ("At verification and
deploy") lists them.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from gate.cli.main import cli
from gate.trust.baseline import seal_baseline
from gate.trust.keys import keyid, load_private_key
from tests.trust.runs import exact_manifest, quant_manifest, signed_run
from tests.trust.trusted import make_keys, write_trust

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "examples" / "reference-static-layout.yaml"
OFF_BY_ONE = ROOT / "examples" / "reference-fault-off-by-one-pos.yaml"
MAIN_SHA = "9c0ffee1" * 5
PR_SHA = "e5f6a7b8" * 5


def gate(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def not_deployable(result: Result, *words: str) -> str:
    """Exit 7 and one line on stderr, `NOT DEPLOYABLE: ...` holding every word; that line."""
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 7, result.output
    assert len(lines) == 1 and lines[0].startswith("NOT DEPLOYABLE: "), result.output
    assert all(w in lines[0] for w in words), (words, lines[0])
    return lines[0]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rel(policy: Path) -> str:
    """A policy file as plans and verdicts name it: relative to its policy root (never machine-local)."""
    return f"{policy.parent.name}/{policy.name}"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def main_trust(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, Path]) -> Path:
    """Main's trust.yaml: ci alone signs runs (frank is an approver)."""
    return write_trust(tmp_path_factory.mktemp("main") / "trust.yaml", keys)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, Path]) -> Path:
    """A real baseline of the static-layout example, recorded and signed with frank's key (once)."""
    root = tmp_path_factory.mktemp("recorded")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GATE_COMMIT", MAIN_SHA)
        done = gate("record", STATIC, "--out", root / "base", "--sign-key", keys["frank.key"])
    assert done.exit_code == 0, done.output
    return root / "base"


def replay_manifest(path: Path, baseline: Path, name: str = "reference-static-layout") -> Path:
    text = STATIC.read_text().replace(
        "    adapter: reference\n    options: {preset: tiny, path: dynamic}",
        f"    adapter: recorded\n    options: {{baseline: {baseline}}}",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace("name: reference-static-layout", f"name: {name}"))
    return path


# 1. a baseline signed under the PR's trust policy ------------------------------------------------


def test_verify_a_baseline_signed_under_the_prs_trust_policy_is_not_deployable_under_mains(
    tmp_path: Path, keys: dict[str, Path], main_trust: Path, recorded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the PR adds frank as a run signer in its own trust.yaml, records "main's" baseline with frank's key
    pr_trust = write_trust(tmp_path / "pr" / "trust.yaml", keys, run_signers=("ci", "frank"))
    monkeypatch.setenv("GATE_COMMIT", PR_SHA)
    ledger, out = tmp_path / "audit.sqlite", tmp_path / "out"
    ran = gate(
        "run", replay_manifest(tmp_path / "replay.yaml", recorded), "--out", out, "-q", "--sign-key", keys["ci.key"],
        "--trust", pr_trust, "--baseline-commit", MAIN_SHA, "--ledger", ledger,
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output  # under the PR's own trust policy, a PASS (the attack)
    frank = keyid(load_private_key(keys["frank.key"]).public_key())
    words = (f"{recorded}/baseline.json (sha256 {sha(recorded / 'baseline.json')})", frank[:16], "not a run signer")
    # the deploy recipe under main's trust.yaml
    not_deployable(gate("verify", out, "--trust", main_trust, "--commit", PR_SHA, "--ledger", ledger), *words)
    not_deployable(gate("audit", "trace", PR_SHA, "--trust", main_trust, "--ledger", ledger), *words)
    # the PR job may still show what the PR's own files say
    assert gate("verify", out, "--trust", pr_trust).exit_code == 0


def test_verify_a_baseline_signed_by_a_revoked_run_signer_key_is_not_deployable(
    tmp_path: Path, keys: dict[str, Path], recorded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Main's own run signer recorded the baseline with a key revoked since before the run."""
    from gate.trust.keys import generate_keypair

    old_key, old_pub, _ = generate_keypair(tmp_path / "ci-2025")
    trust = write_trust(tmp_path / "trust.yaml", keys, extra_ci_keys=(old_pub,))
    baseline = tmp_path / "baseline"
    shutil.copytree(recorded, baseline)
    seal_baseline(baseline, old_key, MAIN_SHA)
    monkeypatch.setenv("GATE_COMMIT", PR_SHA)
    ledger, out = tmp_path / "audit.sqlite", tmp_path / "out"
    ran = gate(
        "run", replay_manifest(tmp_path / "replay.yaml", baseline), "--out", out, "-q", "--sign-key", keys["ci.key"],
        "--trust", trust, "--baseline-commit", MAIN_SHA, "--ledger", ledger,
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    assert gate("verify", out, "--trust", trust, "--ledger", ledger).exit_code == 0  # not revoked yet
    revoked = gate(
        "revoke", "--key-id", old_pub, "--from", "2020-01-01T00:00:00+00:00", "--reason", "leaked",
        "--key", keys["alice.key"], "--trust", trust, "--ledger", ledger,
    )  # fmt: skip
    assert revoked.exit_code == 0, revoked.output
    words = (f"baseline {baseline}/baseline.json (sha256 {sha(baseline / 'baseline.json')})", "whose key was revoked")
    not_deployable(gate("verify", out, "--trust", trust, "--ledger", ledger), *words)
    not_deployable(gate("audit", "trace", PR_SHA, "--trust", trust, "--ledger", ledger), *words)


# 2. a baseline main signed for another manifest -------------------------------------------------


def test_verify_a_baseline_main_signed_for_another_manifest_is_refused_at_replay(
    tmp_path: Path, keys: dict[str, Path], main_trust: Path, recorded: Path
) -> None:
    main_baseline = tmp_path / "main-baseline"
    shutil.copytree(recorded, main_baseline)
    seal_baseline(main_baseline, keys["ci.key"], MAIN_SHA)  # genuinely main's, for reference-static-layout
    manifest = replay_manifest(tmp_path / "pr.yaml", main_baseline, name="pr-other-model")
    ran = gate("run", manifest, "--out", tmp_path / "out", "--trust", main_trust, "--baseline-commit", MAIN_SHA)
    lines = ran.output.strip().splitlines()
    assert ran.exit_code == 2 and len(lines) == 1, ran.output
    assert f"{main_baseline}/baseline.json: manifest: signed for manifest 'reference-static-layout'" in lines[0]
    assert "(reference reference " in lines[0] and "not for 'pr-other-model'" in lines[0], lines[0]
    assert not (tmp_path / "out").exists()  # nothing ran


# 3. a site policy from the PR's checkout ---------------------------------------------------------


def weakened(directory: Path, keep: str = "reset-isolation") -> Path:
    """A copy of policies/layout.yaml whose every rule keeps one check."""
    doc = yaml.safe_load((ROOT / "policies" / "layout.yaml").read_text())
    for rule in doc["interventions"]["layout"]["claims"].values():
        if "checks" in rule:
            rule["checks"] = [c for c in rule["checks"] if c["check"] == keep]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "layout.yaml").write_text(yaml.safe_dump(doc))
    return directory / "layout.yaml"


def test_verify_a_site_policy_from_the_prs_checkout_is_not_deployable(
    tmp_path: Path, keys: dict[str, Path], main_trust: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lax = weakened(tmp_path / "pr-policies")
    monkeypatch.setenv("GATE_COMMIT", PR_SHA)
    ledger, out = tmp_path / "audit.sqlite", tmp_path / "out"
    ran = gate(
        "run", OFF_BY_ONE, "--out", out, "-q", "--policy-dir", lax.parent, "--sign-key", keys["ci.key"],
        "--trust", main_trust, "--ledger", ledger,
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output  # the known-broken example is PASS under the PR's policy (the attack)
    words = (f"policy {rel(lax)} (sha256 {sha(lax)})", "not one of main's policy files")
    not_deployable(gate("verify", out, "--trust", main_trust, "--ledger", ledger), *words)
    not_deployable(gate("audit", "trace", PR_SHA, "--trust", main_trust, "--ledger", ledger), *words)
    # main's policies named: the built-in ones again, as a site directory (the deploy recipe's --policy-dir)
    not_deployable(gate("verify", out, "--trust", main_trust, "--policy-dir", ROOT / "policies"), *words)
    # the PR job may show what its own files say
    assert gate("verify", out, "--trust", main_trust, "--policy-dir", lax.parent).exit_code == 0


def test_verify_a_run_that_left_out_mains_site_policy_is_not_deployable(
    tmp_path: Path, keys: dict[str, Path], main_trust: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Main keeps a site policy (here: the quantisation rule with one more envelope check); a run
    planned without it did not run main's plan."""
    monkeypatch.setenv("GATE_TRUST", str(main_trust))
    site = tmp_path / "main-policies"
    site.mkdir()
    strict = site / "quant.yaml"
    strict.write_text(
        "apiVersion: gate/policy/v1\nname: site-strict\nversion: '1'\ndescription: main's own\ninterventions: {}\n"
    )
    out, _ = signed_run(tmp_path / "out", quant_manifest(tmp_path / "m.yaml", PR_SHA), keys["ci.key"])
    assert gate("verify", out, "--trust", main_trust, "--policy-dir", site, "--any-verdict").exit_code == 0
    not_deployable(
        gate("verify", out, "--trust", main_trust, "--policy-dir", site),
        f"policy {rel(strict)} (sha256 {sha(strict)}): main's policy file took no part in the run's plan",
    )


def test_verify_mains_site_policies_named_by_digest_in_the_trust_policy(
    tmp_path: Path, keys: dict[str, Path], main_trust: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --policy-dir, main's trust.yaml may name its site policy files by sha256 (`site-policies`)."""
    site = tmp_path / "site"
    site.mkdir()
    policy = site / "ours.yaml"
    policy.write_text(
        "apiVersion: gate/policy/v1\nname: site-ours\nversion: '1'\ndescription: main's own\ninterventions: {}\n"
    )
    listing = tmp_path / "listing" / "trust.yaml"
    listing.parent.mkdir()
    listing.write_text(main_trust.read_text() + f"site-policies: [sha256:{sha(policy)}]\n")
    monkeypatch.setenv("GATE_TRUST", str(listing))
    manifest = exact_manifest(tmp_path / "m.yaml", PR_SHA)
    with_site, _ = signed_run(tmp_path / "with", manifest, keys["ci.key"], policy_dirs=[site])
    without, _ = signed_run(tmp_path / "without", manifest, keys["ci.key"])
    ok = gate("verify", with_site, "--trust", listing)
    assert ok.exit_code == 0 and "verdict PASS" in ok.output, ok.output
    not_deployable(gate("verify", with_site, "--trust", main_trust), f"policy {rel(policy)} (sha256 {sha(policy)})")
    not_deployable(
        gate("verify", without, "--trust", listing),
        f"(site-policies of {listing}) (sha256 {sha(policy)}): main's policy file took no part",
    )
    listing.write_text(main_trust.read_text() + "site-policies: [not-a-digest]\n")
    bad = gate("verify", with_site, "--trust", listing)
    assert bad.exit_code == 2 and "site-policies" in bad.output and "not a sha256" in bad.output, bad.output


def test_verify_names_answers_read_from_an_unsigned_reference_cache(
    tmp_path: Path, keys: dict[str, Path], main_trust: Path
) -> None:
    """A reference cache is not signed by anyone: verify says how many answers came from it."""
    site = weakened(tmp_path / "site", keep="greedy-parity").parent  # one check that asks the reference: quick
    cache = tmp_path / "cache"
    run = ("run", STATIC, "-q", "--policy-dir", site, "--reference-cache", cache, "--trust", main_trust)
    assert gate(*run, "--out", tmp_path / "first").exit_code == 0  # computes and stores the answers
    assert gate(*run, "--out", tmp_path / "second", "--sign-key", keys["ci.key"]).exit_code == 0  # reads them
    verified = gate("verify", tmp_path / "second", "--trust", main_trust, "--policy-dir", site)
    assert verified.exit_code == 0, verified.output
    assert f"answers from reference cache {cache}/" in verified.output
    assert "which no run signer signed" in verified.output
