"""Design hazards by name (gate.core.hazards), on BlockStore (tests/plugins/gate-plugin-blockstore),
a store written against docs/plugins.md alone. Its two design choices are options: with every hazard
configured away it passes (exit 0) in float32 and bfloat16; with one hazard on it fails naming that
hazard alone, the configuration that avoids it and the checks that show it, in results.json, on the
verdict line, in the dossier and in JUnit. A planted bug that only looks alike (a key that ignores the tenant)
names no hazard. Served through the single PrefixCaching protocol of earlier releases, the same
store gets the verdict it gets through the split capabilities, its declared budget judged alike."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gate.cli.main import cli
from gate.core.hazards import HAZARDS

BASE = Path(__file__).parent / "blockstore" / "correct.yaml"
ADAPTER = Path(__file__).parents[1] / "plugins" / "gate-plugin-blockstore" / "gate_plugin_blockstore" / "__init__.py"
SAFE = {"verify": "key", "restore_by": "fingerprint"}
"""Every hazard configured away (the plugin's defaults, stated)."""

HAZARD_ON: dict[str, tuple[dict[str, str], set[str]]] = {
    "weak-hash-across-tenants": ({"verify": "tokens"}, {"tenant-isolation", "hash-collision"}),
    "weak-hash-across-contexts": ({"verify": "nothing"}, {"tenant-isolation", "hash-collision"}),
    "restart-admits-same-revision": ({"restore_by": "revision"}, {"invalidation"}),
}
"""Hazard -> the store options that turn it on, and the checks that must fail naming it."""


def run(tmp: Path, dtype: str, *extra: str, **options: Any) -> tuple[int, str, dict[str, Any]]:
    """`gate run` on BlockStore with these options (over the correct manifest's): exit code, output, results."""
    manifest = yaml.safe_load(BASE.read_text())
    manifest["subject"]["dtype"] = dtype
    manifest["subject"]["candidate"]["options"].update(options)
    tmp.mkdir(parents=True, exist_ok=True)
    file = tmp / "manifest.yaml"
    file.write_text(yaml.safe_dump(manifest))
    result = CliRunner().invoke(cli, ["run", str(file), "--out", str(tmp / "out"), *extra])
    return result.exit_code, result.output, json.loads((tmp / "out" / "results.json").read_text())


def checked(record: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in record["checks"] if c["check"] == name)


def named(record: dict[str, Any]) -> dict[str, str]:
    """Check -> the hazard its diagnosis names."""
    return {
        c["check"]: c["diagnosis"]["hazard"]["hazard"] for c in record["checks"] if (c["diagnosis"] or {}).get("hazard")
    }


def test_the_plugin_uses_gates_public_surface_alone() -> None:
    """Written against docs/plugins.md: every gate name it imports comes from gate.plugin."""
    tree = ast.parse(ADAPTER.read_text())
    modules = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in modules if m == "gate" or m.startswith("gate.")} == {"gate.plugin"}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_store_with_every_hazard_configured_away_passes(tmp_path: Path, dtype: str) -> None:
    code, output, record = run(tmp_path, dtype, **SAFE)
    assert code == 0 and record["verdict"] == "pass", record["summary"]
    assert all(c["status"] in ("pass", "unproven") for c in record["checks"]), record["summary"]
    assert not named(record) and "design hazard" not in output


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("hazard", sorted(HAZARD_ON))
def test_each_hazard_fails_naming_it_alone_with_what_avoids_it(tmp_path: Path, dtype: str, hazard: str) -> None:
    options, shown_by = HAZARD_ON[hazard]
    code, output, record = run(tmp_path, dtype, **{**SAFE, **options})
    assert code == 1 and record["verdict"] == "fail", record["summary"]
    failed = {c["check"]: c for c in record["checks"] if c["status"] == "fail"}
    assert set(failed) == shown_by, record["summary"]
    assert named(record) == dict.fromkeys(shown_by, hazard)
    avoid = HAZARDS[hazard].avoid
    for check in failed.values():
        assert check["message"].startswith(f"design hazard {hazard} (avoid it: {avoid})"), check["message"]
        assert check["diagnosis"]["hazard"]["check"] == check["check"]
    verdict = next(line for line in output.splitlines() if line.startswith("verdict: FAIL"))
    assert f"design hazard {hazard} (shown by {', '.join(c for c in failed)}): avoid it: {avoid}" in verdict
    others = set(HAZARDS) - {hazard}
    assert not any(other in output for other in others)
    md = (tmp_path / "out" / "dossier.md").read_text()
    html = (tmp_path / "out" / "dossier.html").read_text()
    assert f"design hazard: **{hazard}**" in md and f"- Avoid it: {avoid}" in md
    assert f"design hazard: <strong>{hazard}</strong>" in html and "<dt>Avoid it</dt>" in html
    assert not any(other in md or other in html for other in others)
    assert f"design hazard: {hazard}; avoid it: {avoid}" in (tmp_path / "out" / "junit.xml").read_text()


def test_a_planted_bug_that_looks_alike_names_no_hazard(tmp_path: Path) -> None:
    """A key without the tenant leaks under the store's own hash too: a bug, not a hazard of the hash."""
    code, output, record = run(tmp_path, "float32", "--check", "tenant-isolation", bug="key-ignores-tenant")
    assert code == 1 and checked(record, "tenant-isolation")["status"] == "fail"
    assert not named(record) and "design hazard" not in output


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_single_protocol_store_gets_the_verdict_of_the_split_one(tmp_path: Path, dtype: str) -> None:
    """It keeps its own capacity, not the budget gate asks through fresh(byte_budget=): that assertion is
    unproven and named (a warning, as for a store without with_budget), never a failure."""
    code, _, split = run(tmp_path / "split", dtype, **SAFE)
    old_code, _, old = run(tmp_path / "old", dtype, **SAFE, api="single-protocol")
    assert (old_code, old["verdict"]) == (code, split["verdict"]) == (0, "pass"), old["summary"]
    statuses = {c["check"]: c["status"] for c in old["checks"]}
    assert statuses == {c["check"]: c["status"] for c in split["checks"]} | {"prefix-reuse-parity": "unproven"}
    parity = checked(old, "prefix-reuse-parity")
    assert "did not take the byte budget asked through fresh(byte_budget=" in parity["message"]
    assert parity["metrics"]["max_bytes_held"] <= parity["metrics"]["declared_byte_budget"]


@pytest.mark.parametrize("api", ["capabilities", "single-protocol"])
def test_a_store_over_the_budget_it_declares_fails_through_either_api(tmp_path: Path, api: str) -> None:
    code, _, record = run(
        tmp_path, "float32", "--check", "prefix-reuse-parity", capacity_bytes=12288, bug="ignore-byte-budget", api=api
    )
    parity = checked(record, "prefix-reuse-parity")
    assert code == 1 and parity["status"] == "fail", parity["message"]
    assert "budget: the store declares a budget of 12288 bytes and held" in parity["message"]
