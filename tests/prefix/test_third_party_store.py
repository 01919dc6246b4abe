"""The prefix-reuse checks judge a store gate did not write: BlockStore (tests/plugins/
gate-plugin-blockstore, its own keys, verification, eviction, snapshots and invalidation, no import
of gate.prefix), installed by `make test` as a separate package. Correct, it passes the default
policy with `unproven` only where it lacks a capability; with any of three planted bugs it fails."""

from __future__ import annotations

import ast
import json
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gate.cli.main import cli
from gate.errors import EXIT_PARTIAL

HERE = Path(__file__).parent / "blockstore"
STORE = Path(__file__).parents[1] / "plugins" / "gate-plugin-blockstore" / "gate_plugin_blockstore"


def run(manifest: str, out: Path, *extra: str) -> tuple[int, dict[str, Any], dict[str, dict[str, Any]]]:
    result = CliRunner().invoke(cli, ["run", str(HERE / manifest), "--out", str(out), *extra])
    record = json.loads((out / "results.json").read_text())
    return result.exit_code, record, {c["check"]: c for c in record["checks"]}


def test_the_store_is_a_separate_package_that_never_imports_gates_cache() -> None:
    dist = distribution("gate-plugin-blockstore")
    assert any(ep.group == "gate.adapters" and ep.name == "blockstore" for ep in dist.entry_points)
    tree = ast.parse((STORE / "store.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(name == "gate" or name.startswith("gate.") for name in imported), imported


def test_the_correct_store_passes_with_unproven_only_where_it_lacks_a_capability(tmp_path: Path) -> None:
    code, record, checks = run("correct.yaml", tmp_path / "out")
    assert code == 0 and record["verdict"] == "pass", record["summary"]
    assert {c for c, r in checks.items() if r["status"] == "unproven"} == {
        "cache-identity",
        "invalidation",
        "hash-collision",
    }
    for check in checks.values():
        assert check["status"] in ("pass", "unproven"), check["message"]
        lacking = check["evidence"]["unproven_assertions"]
        if check["status"] == "unproven":  # named, warned by policy, and power shown by the store's faults
            assert lacking and check["unproven"] == "warn"
            assert all("siblings" in why or "adapters" in why for why in lacking.values()), lacking
            assert any(c["outcome"] == "detected" for c in check["controls"])
        else:
            assert not lacking
    identity = checks["cache-identity"]["evidence"]["unproven_assertions"]
    assert set(identity) == {"model-revision", "adapter", "tokenizer", "rope-scaling", "attention-window", "kv-dtype"}
    assert checks["cache-identity"]["evidence"]["identity_report_checked"] is True
    budget = checks["prefix-reuse-parity"]["evidence"]["budget"]
    assert budget["max_bytes_held"] <= budget["byte_budget"] < budget["bytes_served"] and budget["evicted"] > 0
    restart = checks["invalidation"]["evidence"]["restart"]
    assert restart["other_checkpoint"]["admitted"] == 0 and restart["same_checkpoint"]["reused_tokens"] > 0
    assert checks["hash-collision"]["metrics"]["cross_identity_collisions_detected"] > 0
    assert checks["tenant-isolation"]["metrics"]["weak_hash_cross_tenant_collisions"] > 0
    assert len(checks["hash-collision"]["evidence"]["store_starts_in_run"]) == 7
    banner = (tmp_path / "out" / "dossier.md").read_text().split("### ", 1)[0]
    assert "cache-identity: 6 of its assertions need what the candidate lacks (model-revision, adapter" in banner


@pytest.mark.parametrize(
    "bug,check,words",
    [
        ("verify-ignores-identity", "tenant-isolation", "under the weak hash"),
        ("verify-ignores-identity", "hash-collision", "without comparing the stored identity (tenant, adapter)"),
        ("ignore-byte-budget", "prefix-reuse-parity", "under a declared budget of"),
        ("restore-trusts-label", "invalidation", "under the same revision label admitted 6 of 6 saved blocks"),
    ],
)
def test_the_store_with_a_planted_bug_fails_naming_it(tmp_path: Path, bug: str, check: str, words: str) -> None:
    code, record, checks = run(f"{bug}.yaml", tmp_path / "out", "--check", check)  # the rest: as when correct
    assert code == 1 and record["verdict"] == "fail", record["summary"]
    assert checks[check]["status"] == "fail" and words in checks[check]["message"], checks[check]["message"]


def test_a_long_hash_leaves_verify_ignores_identity_below_the_checks_power_never_missed(tmp_path: Path) -> None:
    """Under an 8-bit hash, the 18 pairs of first blocks of the same tokens under different identities
    (deeper blocks are keyed below their parent) share a bucket with chance 0.07: the store's own
    verify-ignores-identity, passed, is below the check's power (unobservable, naming the settings
    that would show it), never "no power against" it; the generic stand-in then shows power. At the
    default 2 bits the same fault is detected (above)."""
    code, _, checks = run(
        "correct.yaml", tmp_path / "out", "--check", "hash-collision", "--param", "hash-collision.bits=8"
    )
    assert code == EXIT_PARTIAL  # a run of one check that did not fail: no verdict on the manifest
    collision = checks["hash-collision"]
    assert collision["status"] != "fail" and "no power" not in collision["message"], collision["message"]
    control = next(c for c in collision["controls"] if c["fault"] == "verify-ignores-identity")
    assert control["stand_in"] and "below the check's power" in control["stand_in"], control
    assert "18 pairs of first blocks" in control["stand_in"]
    assert "chance 0.07 < 0.9: lower bits to 2" in control["stand_in"]
    assert control["kind"] == "generic" and control["outcome"] == "detected", control["message"]
