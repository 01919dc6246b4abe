"""Every built-in check has a catalogue card, every card a registered check, and steps agree."""

from __future__ import annotations

import importlib
import subprocess
import sys

import tomllib
from click.testing import CliRunner

from gate.cli.main import cli
from gate.core.catalogue import cards
from gate.core.policy import load_policies
from tests.support.repo import REPO

PACKAGES = sorted(
    p.parent.name for p in (REPO / "gate" / "checks").glob("*/__init__.py") if not p.parent.name.startswith("_")
)
"""The checks converted to the package shape (gate.checks._shape); a private package is a helper."""


def test_cards_match_the_built_in_entry_points() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["gate.checks"]
    assert set(cards()) == set(declared)
    for name, card in cards().items():
        assert card.implementation == declared[name], name


def test_the_checks_package_holds_exactly_the_carded_checks() -> None:
    checks = REPO / "gate" / "checks"
    modules = {p.stem for p in checks.glob("*.py") if not p.stem.startswith("_")}
    modules |= set(PACKAGES)
    modules.discard("api")  # the deprecated import path kept for one release (test_deprecated_imports)
    modules.discard("planning")  # the public face of the private helpers (params models, planned coverage)
    modules.discard("faces")  # the faces of every check for the layers above: evidence records, where they are read
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


def test_every_check_package_states_its_card_params_evidence_and_needs() -> None:
    from gate.checks._params import BUILTIN_PARAMS
    from gate.checks.faces import EVIDENCE
    from gate.protocols import Capability
    from gate.report.evidence import readers

    assert set(readers()) == set(EVIDENCE)
    catalogue = cards()
    assert PACKAGES
    for module in PACKAGES:
        package = importlib.import_module(f"gate.checks.{module}")
        card = catalogue[package.CARD]
        assert card.implementation.split(":")[0] == f"gate.checks.{module}", module
        assert BUILTIN_PARAMS.get(package.CARD, package.PARAMS) is package.PARAMS, module
        assert EVIDENCE.get(package.CARD) is package.EVIDENCE, module
        if package.EVIDENCE is not None:  # its record is read into the dossier by the view beside it
            assert readers()[package.CARD] is importlib.import_module(f"gate.checks.{module}.view").read, module
        required = {need for need in card.needs if "(" not in need}
        # cards name the prefix checks' need by the union protocol; what they need of it is serving
        stated = {Capability.PREFIX_SERVING if need == "PrefixCaching" else Capability(need) for need in required}
        assert stated == package.NEEDS, module
        # what adds to it when offered is on the card too, marked as such
        marked = {need.split(" (")[0] for need in card.needs if "(" in need}
        assert {c.value for c in vars(package).get("OPTIONAL", {})} <= marked, module


def test_every_check_package_imports_no_torch_and_reaches_its_check_lazily() -> None:
    """The torch-free part of each check stays torch-free (import-linter cannot say "this
    package's __init__ but not its body"), and its entry point still resolves. One fresh interpreter
    imports every package: torch must be absent after each import."""
    code = (
        "import sys, importlib\n"
        f"for module in {list(PACKAGES)!r}:\n"
        "    package = importlib.import_module('gate.checks.' + module)\n"
        "    assert 'torch' not in sys.modules, (module, [m for m in sys.modules if m.startswith('torch')][:3])\n"
        "    assert package.PARAMS().model_dump() is not None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    for module in PACKAGES:
        implementation = cards()[importlib.import_module(f"gate.checks.{module}").CARD].implementation
        assert getattr(importlib.import_module(f"gate.checks.{module}"), implementation.split(":")[1]).name


def test_the_torch_free_face_contract_names_every_check_package() -> None:
    """`make lint`'s contract "The face of every check package ... imports no torch" lists the check
    packages by hand (import-linter takes no globs); its list is the packages under gate/checks/, and
    adding a check fails here with the exact list to paste."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (face,) = [c for c in contracts if c["name"].startswith("The face of every check package")]
    want = ["gate.checks", *(f"gate.checks.{name}" for name in PACKAGES)]
    block = "source_modules = [\n" + "".join(f'  "{m}",\n' for m in want) + "]"
    assert face["source_modules"] == want, f"pyproject.toml's face contract should read:\n{block}"
