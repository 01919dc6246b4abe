"""Every built-in check has a catalogue card, every card a registered check, and steps agree."""

from __future__ import annotations

import tomllib
from click.testing import CliRunner

from gate.cli.main import cli
from gate.core.catalogue import cards
from gate.core.policy import load_policies
from tests.support.repo import REPO


def test_cards_match_the_built_in_entry_points() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["gate.checks"]
    assert set(cards()) == set(declared)
    for name, card in cards().items():
        assert card.implementation == declared[name], name


def test_the_checks_package_holds_exactly_the_carded_checks() -> None:
    modules = {p.stem for p in (REPO / "gate" / "checks").glob("*.py") if not p.stem.startswith("_")}
    modules.discard("api")  # the deprecated import path kept for one release (test_deprecated_imports)
    modules.discard("planning")  # the public face of the private helpers (params models, planned coverage)
    implemented = {card.implementation.split(":")[0].rsplit(".", 1)[1] for card in cards().values()}
    assert modules == implemented


def test_policies_use_each_check_at_its_catalogued_step() -> None:
    catalogue = cards()
    for resolved in load_policies().interventions.values():
        for claim in resolved.claims.values():
            for rule, source in claim.checks:
                assert rule.step == catalogue[rule.check].step, (rule.check, source.path)


def test_gate_checks_lists_cards_and_plugins() -> None:
    result = CliRunner().invoke(cli, ["checks", "-v"])
    assert result.exit_code == 0, result.output
    assert "prefix-sweep" in result.output and "blind to:" in result.output
    assert "finite-logits" in result.output and "no card" in result.output
