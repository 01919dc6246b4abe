"""A third-party adapter (tests/plugins/gate-plugin-tinylm, a small PyTorch model that is not gate's,
installed by `make test`) gets its power from gate's generic controls: a correct cache passes with
generic controls detected, a bug planted in its own code fails, and a candidate that keeps no cache
ends `unproven` (amber, exit 6) under the default policy. Waivers give `pass-with-waivers`, and a
site policy that drops checks or controls says so on the first screen."""

from __future__ import annotations

import json
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gate.cli.main import cli
from tests.trust.trusted import in_days, make_keys, write_trust

HERE = Path(__file__).parent / "tinylm"


def gate(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def run(
    manifest: str, out: Path, *extra: str | Path, env: dict[str, str] | None = None
) -> tuple[Result, dict[str, Any]]:
    result = gate("run", HERE / manifest, "--out", out, *extra, env=env)
    return result, json.loads((out / "results.json").read_text())


def by_check(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in record["checks"]}


def test_the_adapter_is_a_separate_installed_package() -> None:
    dist = distribution("gate-plugin-tinylm")
    assert any(ep.group == "gate.adapters" and ep.name == "tinylm" for ep in dist.entry_points)


def unscoped(tmp: Path) -> str:
    """kv-cache.yaml without its `checks:` section (the sweep scoped to tinylm's 191 positions)."""
    path = tmp / "unscoped.yaml"
    path.write_text((HERE / "kv-cache.yaml").read_text().split("checks:")[0])
    return str(path)


def test_a_policy_wanting_lengths_past_the_engine_is_unproven_exit_6(tmp_path: Path) -> None:
    result, record = run(unscoped(tmp_path), tmp_path / "out")
    assert result.exit_code == 6, result.output
    assert record["verdict"] == "unproven" and "prefix-sweep" in record["summary"]
    sweep = by_check(record)["prefix-sweep"]  # the standard lengths past tinylm's 192 positions: unproven
    assert sweep["status"] == "unproven" and "wants prefix lengths [200, 2000, 8000]" in sweep["message"]
    assert sweep["evidence"]["coverage"]["unreachable"] == [200, 2000, 8000]
    oracle = by_check(record)["mask-oracle"]  # what would stand in for the probe did not hold
    assert oracle["status"] == "unproven" and oracle["unproven"] == "deny"
    assert "AttentionProbe" in oracle["message"] and "prefix-sweep is unproven" in oracle["message"]


def test_a_correct_cache_passes_the_built_in_policy_with_generic_controls_detected(tmp_path: Path) -> None:
    result, record = run("kv-cache.yaml", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert record["verdict"] == "pass" and record["site_policy"] == []
    checks = by_check(record)
    oracle = checks["mask-oracle"]  # no probe: not applicable, observed at model level by the sweep and fuzzer
    assert oracle["status"] == "unproven" and oracle["unproven"] == "warn", oracle["message"]
    assert set(oracle["covered_by"]) == {"prefix-sweep", "schedule-fuzz"}
    assert "unproven-not-applicable" in oracle["message"] and "AttentionProbe" in oracle["message"]
    for name in ("prefix-sweep", "greedy-parity", "batch-invariance", "schedule-fuzz", "reset-isolation"):
        check = checks[name]
        assert check["status"] == "pass", check["message"]
        generic = [c for c in check["controls"] if c["kind"] == "generic"]
        assert generic and all(c["outcome"] == "detected" for c in generic), generic
        assert all(c["stand_in"] for c in generic)
        assert not [c for c in check["controls"] if c["kind"] == "adapter"]  # tinylm plants nothing itself
    applied = {c["applied"] for c in checks["prefix-sweep"]["controls"] if c["kind"] == "generic"}
    assert applied == {"handle-swap", "cache-dropped", "token-skipped", "weights-changed", "block-truncated"}
    assert checks["reset-isolation"]["controls"][0]["applied"] == "reset-ignored"
    assert checks["prefix-sweep"]["exercise"]["cached_steps"] > 0
    html = (tmp_path / "out" / "dossier.html").read_text()
    # mask-oracle's power is unproven (a warning): the banner is amber, never green
    assert "generic: handle-swap" in html and 'class="banner tone-unproven"' in html and "PASS, 1 UNPROVEN" in html


def test_a_bug_in_the_adapters_own_code_fails(tmp_path: Path) -> None:
    result, record = run("planted-bug.yaml", tmp_path / "out")
    assert result.exit_code == 1, result.output
    assert record["verdict"] == "fail"
    assert by_check(record)["prefix-sweep"]["status"] == "fail"


def test_a_candidate_without_a_cache_is_unproven_and_amber_everywhere(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result, record = run("recompute.yaml", out, env={"GITHUB_ACTIONS": "true"})
    assert result.exit_code == 6, result.output
    assert record["verdict"] == "unproven" and "never showed these checks can fail" in record["summary"]
    sweep = by_check(record)["prefix-sweep"]
    assert sweep["status"] == "unproven" and sweep["unproven"] == "deny"
    assert all(c["outcome"] == "unsupported" for c in sweep["controls"])
    assert "recomputes" in sweep["message"]
    html = (out / "dossier.html").read_text()
    banner = html.split('<header class="banner')[1].split("</header>")[0]
    assert banner.startswith(' tone-unproven"') and "tone-good" not in banner
    assert '<span class="pill tone-unproven">UNPROVEN</span>' in html
    assert "🟠 gate: UNPROVEN" in (out / "dossier.md").read_text()
    junit = (out / "junit.xml").read_text()
    assert 'type="unproven"' in junit and 'name="verdict" value="unproven"' in junit
    assert "::warning" in result.output and "prefix-sweep UNPROVEN" in result.output
    assert "verdict: UNPROVEN" in result.output


def test_unproven_warns_when_the_policy_says_so(tmp_path: Path) -> None:
    result, record = run("recompute.yaml", tmp_path / "out", "--policy-dir", HERE / "warn-policy")
    assert result.exit_code == 0, result.output
    (check,) = record["checks"]
    assert check["status"] == "unproven" and check["unproven"] == "warn"
    assert (
        record["verdict"] == "pass"
        and "unproven (a warning by policy, not a pass): reset-isolation" in record["summary"]
    )


def test_a_weakened_site_policy_says_so_in_the_banner(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result, record = run(unscoped(tmp_path), out, "--policy-dir", HERE / "weak-policy")
    assert result.exit_code == 0, result.output
    (line,) = record["site_policy"]
    assert "site policy site-weak@1" in line and "replaced the rule of layout" in line
    # mask-oracle, prefix-sweep, greedy-parity, batch-invariance, schedule-fuzz (5 + 10 + 9 + 5 + 11 controls:
    # layout v5 names the hf beam and generate-cache faults too) and phase-performance; 2 of reset-isolation
    assert "6 checks and 42 controls dropped" in line
    banner = (out / "dossier.html").read_text().split("<header")[1].split("</header>")[0]
    assert "site policy site-weak@1" in banner
    assert "site policy site-weak" in (out / "dossier.md").read_text().split("###")[0]


def test_a_waived_failing_run_is_pass_with_waivers_everywhere(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys", ("ci", "alice", "bob"))
    trust = write_trust(tmp_path / "trust.yaml", keys, waiver_people=("bob",), waiver_checks=("*",))
    ledger = tmp_path / "ledger.sqlite"
    expires = in_days(7)
    for check in ("prefix-sweep", "greedy-parity"):
        waived = gate(
            "waive", check, "--manifest", HERE / "planted-bug.yaml", "--reason", "known position bug, fix in #77",
            "--approver", "bob", "--key", keys["bob.key"], "--expires", expires, "--ledger", ledger, "--trust", trust,
        )  # fmt: skip
        assert waived.exit_code == 0, waived.output
    out = tmp_path / "out"
    result, record = run(
        "planted-bug.yaml", out, "--ledger", ledger, "--trust", trust, "--policy-dir", HERE / "no-probe-policy"
    )
    assert result.exit_code == 0, result.output
    assert record["verdict"] == "pass-with-waivers" and "2 failed and waived" in record["summary"]
    assert "verdict: PASS WITH WAIVERS" in result.output
    banner = (out / "dossier.html").read_text().split("<header")[1].split("</header>")[0]
    assert 'class="banner tone-waived"' in banner and "PASS WITH WAIVERS" in banner
    assert f"waived: prefix-sweep (known position bug, fix in #77); approved by bob, expires {expires}" in banner
    assert "🔷 gate: PASS WITH WAIVERS" in (out / "dossier.md").read_text()
    junit = (out / "junit.xml").read_text()
    assert 'name="verdict" value="pass-with-waivers"' in junit and "approved by bob" in junit
    listed = gate("audit", "list", "--ledger", ledger)
    assert listed.exit_code == 0, listed.output
    assert "PASS-WITH-WAIVERS" in listed.output and "(2 waived)" in listed.output


@pytest.mark.parametrize("manifest", ["kv-cache.yaml"])
def test_generic_controls_leave_the_clean_candidate_clean(tmp_path: Path, manifest: str) -> None:
    """weights-changed reloads the candidate's weights for each append; the next check must see
    the weights as built (same identity before and after the run)."""
    _result, record = run(manifest, tmp_path / "out")
    assert record["subjects"]["candidate"]["weights_sha256"] == record["subjects"]["reference"]["weights_sha256"]
