"""Bad manifests fail with FILE:LINE:COL: field: message, exit 2, no traceback, nothing written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate.cli.main import cli
from tests.support.manifests import BASE_MANIFEST


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args))


def plan_error(write_manifest, text: str):  # type: ignore[no-untyped-def]
    path = write_manifest(text)
    result = invoke("plan", str(path))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return path, result.output.strip()


def test_valid_manifest_plans(write_manifest) -> None:  # type: ignore[no-untyped-def]
    result = invoke("plan", str(write_manifest()))
    assert result.exit_code == 0, result.output
    assert "prefix-reuse-parity" in result.output and "cache-identity" in result.output


def test_unknown_key_points_at_its_line(write_manifest) -> None:  # type: ignore[no-untyped-def]
    text = BASE_MANIFEST.replace("  atol: 0.001\n", "  atol: 0.001\n  tolerence: 3\n")
    path, out = plan_error(write_manifest, text)
    assert out == f"gate: {path}:8:3: claim.tolerence: unknown key 'tolerence'"


def test_misspelled_key_is_named_with_a_did_you_mean(write_manifest) -> None:  # type: ignore[no-untyped-def]
    """A misspelled required key is an unknown key with a suggestion, not a missing field."""
    path, out = plan_error(write_manifest, BASE_MANIFEST.replace("intervention:", "intervension:"))
    assert out == f"gate: {path}:4:1: intervension: unknown key 'intervension' (did you mean 'intervention'?)"
    assert "missing" not in out


def test_misspelled_optional_key_gets_a_did_you_mean_from_the_model(write_manifest) -> None:  # type: ignore[no-untyped-def]
    path, out = plan_error(write_manifest, BASE_MANIFEST.replace("  seed: 3", "  sed: 3"))
    assert out == f"gate: {path}:17:3: subject.sed: unknown key 'sed' (did you mean 'seed'?)"


def test_every_error_in_a_file_is_listed_one_line_each(write_manifest) -> None:  # type: ignore[no-untyped-def]
    text = BASE_MANIFEST.replace("atol: 0.001", "atol: -1").replace("intervention:", "intervension:")
    text += "bogus: 1\n"
    path, out = plan_error(write_manifest, text)
    lines = out.splitlines()
    assert len(lines) == 3, out
    assert all(re.match(rf"gate: {re.escape(str(path))}:\d+:\d+: [\w.\[\]-]+: ", line) for line in lines), out
    assert "did you mean 'intervention'" in lines[0] and "claim.atol" in out and "unknown key 'bogus'" in lines[-1]


def test_invalid_value_points_at_field(write_manifest) -> None:  # type: ignore[no-untyped-def]
    path, out = plan_error(write_manifest, BASE_MANIFEST.replace("atol: 0.001", "atol: -1"))
    assert out.startswith(f"gate: {path}:7:3: claim.atol: ")
    assert "greater than or equal to 0" in out


def test_malformed_yaml(write_manifest) -> None:  # type: ignore[no-untyped-def]
    path, out = plan_error(write_manifest, BASE_MANIFEST.replace("claim:\n", "claim: [\n"))
    assert re.match(rf"gate: {re.escape(str(path))}:\d+:\d+: invalid YAML", out), out


def test_duplicate_key_rejected(write_manifest) -> None:  # type: ignore[no-untyped-def]
    path, out = plan_error(write_manifest, BASE_MANIFEST + "name: again\n")
    assert "duplicate key 'name'" in out and out.startswith(f"gate: {path}:")


def test_unknown_intervention(write_manifest) -> None:  # type: ignore[no-untyped-def]
    path, out = plan_error(write_manifest, BASE_MANIFEST.replace("prefix-reuse", "telepathy"))
    assert out.startswith(f"gate: {path}:4:1: intervention: ")


def test_over_claim_quotes_the_policy_rule(write_manifest) -> None:  # type: ignore[no-untyped-def]
    text = BASE_MANIFEST.replace("intervention: prefix-reuse", "intervention: quantisation")
    path, out = plan_error(write_manifest, text)
    assert out.startswith(f"gate: {path}:6:3: claim.level: intervention 'quantisation' cannot claim 'tolerance'")
    assert "quantisation.yaml says:" in out and "earns only the envelope actually evaluated" in out
    assert "Admissible claims: bounded-degradation" in out


def test_missing_identity_field_names_field_and_reason(write_manifest) -> None:  # type: ignore[no-untyped-def]
    path, out = plan_error(write_manifest, BASE_MANIFEST.replace("kv-dtype, tenant]", "kv-dtype]"))
    assert out.startswith(f"gate: {path}:8:1: identity: identity must declare 'tenant'")
    assert "permission to share state across tenants" in out


def test_every_missing_identity_field_is_named_in_one_line(write_manifest) -> None:  # type: ignore[no-untyped-def]
    path, out = plan_error(write_manifest, BASE_MANIFEST.replace("adapter, ", "").replace("kv-dtype, tenant]", "]"))
    assert out.startswith(f"gate: {path}:8:1: identity: identity must declare 'adapter'")
    assert out.strip().endswith("(also missing: 'kv-dtype', 'tenant')") and out.strip().count("\n") == 0


def test_missing_file_and_non_mapping(tmp_path: Path) -> None:
    result = invoke("validate", str(tmp_path / "absent.yaml"))
    assert result.exit_code == 2 and "no such manifest file" in result.output
    scalar = tmp_path / "s.yaml"
    scalar.write_text("just a string\n")
    result = invoke("plan", str(scalar))
    assert result.exit_code == 2 and "expected a YAML mapping" in result.output


@pytest.mark.parametrize("name", ["/dev/zero", "a directory"])
def test_a_path_that_is_not_a_regular_file_is_named_for_what_it_is(tmp_path: Path, name: str) -> None:
    target = name if name.startswith("/") else str(tmp_path)
    result = invoke("validate", target)
    assert result.exit_code == 2 and "not a regular file" in result.output, result.output
    assert "no such manifest file" not in result.output and result.output.count("\n") == 1


def test_bad_input_writes_nothing_and_keeps_earlier_result(write_manifest, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    out.mkdir()
    earlier = out / "results.json"
    earlier.write_text('{"earlier": true}\n')
    path = write_manifest(BASE_MANIFEST.replace("level: tolerance", "level: nonsense"))
    result = invoke("run", str(path), "--out", str(out))
    assert result.exit_code == 2
    assert not out.exists()  # a failed run never leaves an earlier result looking current...
    kept = tmp_path / "out.previous" / "results.json"  # ...and the earlier result is kept aside
    assert kept.read_text() == '{"earlier": true}\n'
    assert sorted(p.name for p in kept.parent.iterdir()) == ["results.json"]
