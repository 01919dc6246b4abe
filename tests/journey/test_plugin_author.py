"""A plugin author's journey: a decoder written only against `gate.plugin` (tests/plugins/gate-plugin-tinylm)
offers more than the minimum, one optional capability at a time, and a correct decoder stays green.

Every combination of the optional capabilities a decoder may add (`AttentionProbe`, `LayerTracing`) in
float32 and bfloat16, as a whole `gate run` through the CLI: exit 0, verdict pass, nothing failed, and
mask-oracle judged the same with or without the probe (a warning: none of its own controls can run on
this decoder). Offering more never makes a correct run worse. The bare float32 decoder and its probed
twin are in tests/engine/test_probe_never_worse.py (make test); the wrong decoders, each with its class
under every combination, in tests/checks/test_classes_without_tracing.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate.cli.main import cli
from tests.support.repo import REPO

pytestmark = pytest.mark.journey

MANIFEST = REPO / "tests" / "engine" / "tinylm" / "kv-cache.yaml"
COMBINATIONS = [
    ("float32", "trace: true"),
    ("float32", "probe: true, trace: true"),
    ("bfloat16", ""),
    ("bfloat16", "probe: true"),
    ("bfloat16", "trace: true"),
    ("bfloat16", "probe: true, trace: true"),
]


@pytest.mark.parametrize(("dtype", "offers"), COMBINATIONS, ids=[f"{d}-{o or 'bare'}" for d, o in COMBINATIONS])
def test_a_correct_decoder_passes_whatever_optional_capabilities_it_offers(
    tmp_path: Path, dtype: str, offers: str
) -> None:
    text = MANIFEST.read_text().replace("dtype: float32", f"dtype: {dtype}")
    if offers:
        text = text.replace("options: {engine: kv-cache}", f"options: {{engine: kv-cache, {offers}}}")
    manifest = tmp_path / "tinylm.yaml"
    manifest.write_text(text)
    assert f"dtype: {dtype}" in text and (not offers or offers in text)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["run", str(manifest), "--out", str(out)])
    record = json.loads((out / "results.json").read_text())
    assert result.exit_code == 0 and record["verdict"] == "pass", record["summary"]
    checks = {c["check"]: c for c in record["checks"]}
    assert not [name for name, c in checks.items() if c["status"] in ("fail", "error")], record["summary"]
    oracle = checks["mask-oracle"]
    assert oracle["status"] == "unproven" and oracle["unproven"] == "warn", oracle["message"]
    # with the probe the oracle ran and what it showed is kept; without it, nothing to show
    assert ("without_its_controls" in oracle["evidence"]) == ("probe" in offers), oracle["evidence"].keys()
    # the run decided on what the built decoder offers: each capability offered, and only those
    offered = set(record["plan"]["checks"][0]["capabilities"]["offered"])
    assert ("AttentionProbe" in offered) == ("probe" in offers) and ("LayerTracing" in offered) == ("trace" in offers)
