"""Declared needs are read and shown: docs/plugins.md's capability table is what the check packages
declare (`gate checks --capabilities`), and `gate plan` shows per check what it needs, what the
candidate offers and what that means."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from gate.checks.planning import DECLARED, capability_table
from gate.cli.main import cli
from gate.protocols import Capability
from tests.support.repo import REPO

DOC = REPO / "docs" / "plugins.md"
TABLE = re.compile(r"<!-- capability-table:[^\n]*-->\n(.*?)<!-- /capability-table -->", flags=re.S)


def gate(*args: str | Path) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_doc_table_is_the_generated_one() -> None:
    (committed,) = TABLE.findall(DOC.read_text())
    printed = gate("checks", "--capabilities")
    assert committed == printed == capability_table(), "docs/plugins.md is stale: paste `gate checks --capabilities`"


def test_the_table_follows_the_declarations() -> None:
    rows = {line.split("|")[1].strip(" `"): line for line in capability_table().splitlines()[2:]}
    assert "mask-oracle" in rows["AttentionProbe"] and "spec-greedy" in rows["SpeculativePath"]
    assert "phase-performance (instead)" in rows["EngineServing"]  # an engine's API stands for sessions
    assert "batch-invariance: requests join and leave a running batch" in rows["ContinuousBatching"]
    for name, declared in DECLARED.items():
        for capability in declared.needs:
            assert name in rows[capability.value], (name, capability)
    assert set(rows) <= {c.value for c in Capability}


def plan_of(manifest: Path) -> dict[str, dict[str, object]]:
    record = json.loads(gate("plan", manifest, "--format", "json"))
    return {c["check"]: c["capabilities"] for c in record["checks"]}


def test_plan_shows_what_each_check_needs_what_the_candidate_offers_and_what_that_means() -> None:
    examples = REPO / "examples"
    probed = plan_of(examples / "reference-static-layout.yaml")  # the reference adapter offers the probe
    assert probed["mask-oracle"]["needs"] == ["AttentionProbe"] and "AttentionProbe" in probed["mask-oracle"]["offered"]
    assert probed["mask-oracle"]["runs"] == "own-controls"  # no generic fault stands in for a mask fault
    sweep = probed["prefix-sweep"]
    assert sweep["runs"] == "stand-ins" and "missing-start-pos (cache-dropped)" in sweep["meaning"]
    assert "LayoutBoundaries would add" in sweep["meaning"]
    hf = plan_of(examples / "hf-dynamic.yaml")  # states no probe before a run
    assert hf["mask-oracle"]["runs"] == "not-applicable"
    assert "offering AttentionProbe would make the check run" in hf["mask-oracle"]["meaning"]
    engine = plan_of(examples / "engine-vllm-prefix.yaml")  # phase-performance through the engine's API
    assert engine["phase-performance"]["runs"] != "not-applicable", engine["phase-performance"]
    third_party = plan_of(REPO / "tests" / "engine" / "tinylm" / "kv-cache.yaml")  # no capabilities(): run time
    assert third_party["prefix-sweep"]["runs"] == "at-run-time" and third_party["prefix-sweep"]["offered"] is None


def test_the_text_plan_says_it_in_words() -> None:
    text = gate("plan", REPO / "examples" / "hf-dynamic.yaml")
    assert "   needs:    AttentionProbe; the candidate offers: DecodePath" in text
    assert "   means:    not-applicable: not applicable: the candidate's adapter does not state AttentionProbe" in text
