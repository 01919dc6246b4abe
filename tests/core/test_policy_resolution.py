"""Policy override resolution is explicit: replace, extend, and same-directory ambiguity."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from gate.cli.main import cli
from gate.core.policy import load_policies


def _policy(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(f"apiVersion: gate/policy/v1\nname: {name}\nversion: '7'\n" + textwrap.dedent(body))
    return path


REPLACE = """\
interventions:
  prefix-reuse:
    claims:
      tolerance:
        admissible: true
        rule: site rule - parity only
        checks:
          - {check: prefix-reuse-parity, step: 4, why: site wants parity only, params: {lengths: [1, 2]}}
"""

EXTEND = """\
interventions:
  prefix-reuse:
    claims:
      tolerance:
        admissible: true
        mode: extend
        rule: site rule - add the plugin check
        checks:
          - {check: finite-logits, step: 4, why: site requires finite logits}
          - {check: invalidation, step: 8, severity: warn, why: site downgrades invalidation}
"""


def test_replace_overrides_whole_rule(tmp_path: Path) -> None:
    _policy(tmp_path / "site", "site", REPLACE)
    resolved = load_policies([tmp_path / "site"]).interventions
    claim = resolved[next(k for k in resolved if k.value == "prefix-reuse")].claims
    rule = next(v for k, v in claim.items() if k.value == "tolerance")
    assert [c.check for c, _ in rule.checks] == ["prefix-reuse-parity"]
    assert "site.yaml" in rule.history[-1] and "replaces" in rule.history[-1]
    assert "replaces policies/prefix-reuse.yaml (sha256 " in rule.history[-1]
    assert rule.history[-1].startswith("site/site.yaml (sha256 ")


def test_plans_name_policies_relative_to_their_root_with_the_digest(tmp_path: Path, write_manifest) -> None:  # type: ignore[no-untyped-def]
    """Plans (and so dossiers, which render the plan and the result) never carry a machine-local
    path of a policy file: the file under its policy root, and its digest."""
    _policy(tmp_path / "site", "site", EXTEND)
    result = CliRunner().invoke(
        cli, ["plan", str(write_manifest()), "--policy-dir", str(tmp_path / "site"), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    digests = {d["path"]: d["sha256"] for d in plan["policies"]}
    assert "policies/prefix-reuse.yaml" in digests and "site/site.yaml" in digests
    sources = [plan["claim_source"], *(c["source"] for c in plan["checks"]), *plan["site_policy"]]
    sources += [line for c in plan["checks"] for line in c["resolution"]]
    assert not [s for s in sources if str(tmp_path) in s or str(Path(__file__).parents[2]) in s]
    assert f"site/site.yaml (sha256 {digests['site/site.yaml'][:12]})" in plan["claim_source"]
    text = CliRunner().invoke(cli, ["plan", str(write_manifest()), "--policy-dir", str(tmp_path / "site")])
    assert text.exit_code == 0 and "/site/site.yaml" not in text.output and "site/site.yaml (sha256" in text.output


def test_extend_merges_by_check_name_and_plan_shows_it(tmp_path: Path, write_manifest) -> None:  # type: ignore[no-untyped-def]
    _policy(tmp_path / "site", "site", EXTEND)
    result = CliRunner().invoke(
        cli, ["plan", str(write_manifest()), "--policy-dir", str(tmp_path / "site"), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    names = [c["check"] for c in plan["checks"]]
    assert names[-1] == "finite-logits"
    invalidation = next(c for c in plan["checks"] if c["check"] == "invalidation")
    assert invalidation["severity"] == "warn" and "site" in invalidation["source"]
    assert any("extends" in line for line in invalidation["resolution"])
    text = CliRunner().invoke(cli, ["plan", str(write_manifest()), "--policy-dir", str(tmp_path / "site")]).output
    assert "resolved:" in text and "extends" in text
    assert any("site.yaml" in p["path"] for p in plan["policies"])


def test_same_directory_duplicate_is_an_error(tmp_path: Path, write_manifest) -> None:  # type: ignore[no-untyped-def]
    _policy(tmp_path / "site", "a", REPLACE)
    _policy(tmp_path / "site", "b", REPLACE)
    result = CliRunner().invoke(cli, ["plan", str(write_manifest()), "--policy-dir", str(tmp_path / "site")])
    assert result.exit_code == 2
    assert "also defined in" in result.output and "b.yaml" in result.output


def test_invalid_policy_file_is_located(tmp_path: Path, write_manifest) -> None:  # type: ignore[no-untyped-def]
    path = _policy(tmp_path / "site", "bad", REPLACE.replace("step: 4", "step: 9"))
    result = CliRunner().invoke(cli, ["plan", str(write_manifest()), "--policy-dir", str(tmp_path / "site")])
    assert result.exit_code == 2
    assert result.output.startswith(
        f"gate: {path}:11:42: interventions.prefix-reuse.claims.tolerance.checks[0].step: "
        "Input should be less than or equal to 8"
    )


def test_missing_check_implementation_exits_3(tmp_path: Path, write_manifest) -> None:  # type: ignore[no-untyped-def]
    _policy(tmp_path / "site", "site", REPLACE.replace("prefix-reuse-parity", "no-such-check"))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli, ["run", str(write_manifest()), "--out", str(out), "--policy-dir", str(tmp_path / "site")]
    )
    assert result.exit_code == 3
    assert "check no-such-check required by policy" in result.output and "is not available" in result.output
    assert not out.exists()
