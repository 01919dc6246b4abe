"""`gate plan` states, per sweep check, the lengths the policy wants and the ones the paths reach,
from the adapters' capability lists (built from the options alone: no model built, no torch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from gate.checks.prefix_sweep import PrefixSweepParams, prefix_sweep
from gate.cli.main import cli
from tests.support import reference as ref
from tests.support.manifests import write_subject_manifest
from tests.support.repo import REPO


def _manifest(tmp_path: Path, candidate: dict[str, Any], reference: dict[str, Any] | None = None) -> Path:
    full = {"adapter": "reference", "options": {"path": "full", "max_len": 512}}
    return write_subject_manifest(tmp_path / "plan-coverage.yaml", reference or full, candidate)


def _plan(manifest: Path) -> tuple[str, dict[str, Any]]:
    text = CliRunner().invoke(cli, ["plan", str(manifest)])
    as_json = CliRunner().invoke(cli, ["plan", str(manifest), "--format", "json"])
    assert text.exit_code == 0 and as_json.exit_code == 0, text.output + as_json.output
    return text.output, json.loads(as_json.output)


def test_plan_names_the_wanted_lengths_the_paths_cannot_reach_and_the_run_agrees(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {"adapter": "reference", "options": {"path": "static", "max_len": 512}})
    text, plan = _plan(manifest)
    assert plan["paths"]["candidate"] == {
        "path": "reference:static",
        "max_len": 512,
        "max_len_from": "option max_len",
        "cache_geometry": None,
        "offers": ["sessions", "LayerTracing", "AttentionProbe", "LayoutEdges"],
    }
    (sweep,) = [c for c in plan["checks"] if c["check"] == "prefix-sweep"]
    coverage = sweep["coverage"]
    assert coverage["reachable_longest"] == 511 and coverage["unreachable"] == [2000, 8000]
    assert "lengths:  wanted 0, 1, 2, 16, 64, 200, 2000, 8000; the paths reach 511; out of reach: 2000, 8000" in text
    assert "candidate     reference:static: max_len 512 (option max_len)" in text
    # the run computes the same coverage from the built paths, and is unproven on it
    outcome = prefix_sweep(
        ref.ctx(ref.path("full", max_len=512), ref.path("static", max_len=512)),
        PrefixSweepParams.model_validate({**sweep["params"], "max_lengths": 16, "log_spaced": 2}),
    )
    assert outcome.status == "unproven"
    expected = {k: coverage[k] for k in ("wanted", "scoped_to", "reachable_longest", "unreachable")}
    assert outcome.evidence["coverage"] == expected


def test_plan_reads_a_trained_weights_config_without_loading_it(tmp_path: Path) -> None:
    manifest = _manifest(
        tmp_path,
        {"adapter": "reference", "options": {"path": "static", "weights": "copy-model"}},
        {"adapter": "reference", "options": {"path": "full", "weights": "copy-model"}},
    )
    _, plan = _plan(manifest)
    assert plan["paths"]["reference"]["max_len"] == 512
    assert plan["paths"]["reference"]["max_len_from"] == "weights copy-model"


def test_plan_reads_an_engines_context_from_its_launch_flags(tmp_path: Path) -> None:
    doc = yaml.safe_load((REPO / "examples/engine-llamacpp-prefix.yaml").read_text())
    command = doc["subject"]["candidate"]["options"]["launch"]["command"]
    command.remove("--kv-unified")  # 5 slots share -c 8192 without it: 1638 tokens each
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump(doc))
    text, plan = _plan(path)
    assert plan["paths"]["reference"]["max_len"] == 8192
    assert plan["paths"]["candidate"]["max_len"] == 1638
    assert plan["paths"]["candidate"]["max_len_from"] == "launch flags -c 8192 over -np 5 slots"
    (parity,) = [c for c in plan["checks"] if c["check"] == "engine-prefix-parity"]
    assert parity["coverage"]["reachable_longest"] == 1638 - 4 - 8 - 1
    assert parity["coverage"]["unreachable"] == [2048, 8192]
    assert "out of reach: 2048, 8192 -> clipped" in text


def test_an_adapter_that_states_nothing_leaves_reach_unknown(tmp_path: Path) -> None:
    _, plan = _plan(REPO / "tests/engine/tinylm/kv-cache.yaml")
    assert plan["paths"]["candidate"]["max_len"] is None
    assert plan["paths"]["candidate"]["max_len_from"] == "the adapter states nothing before a run"
    (sweep,) = [c for c in plan["checks"] if c["check"] == "prefix-sweep"]
    assert sweep["coverage"]["reachable_longest"] is None


def test_an_hf_directory_states_its_config_json(tmp_path: Path) -> None:
    from gate.adapters.hf import HFAdapter, Options

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 4096}))
    caps = HFAdapter().capabilities(Options(model=str(model), path="dynamic"))
    assert (caps.max_len, caps.max_len_from) == (4096, f"{model / 'config.json'}: max_position_embeddings")
    preset = HFAdapter().capabilities(Options(model="llama", path="assisted", draft="llama"))
    assert (preset.max_len, preset.offers) == (512, ["SpeculativePath"])
