"""The plugin surface is a contract: every name docs/plugins.md mentions imports, everything a plugin
author needs is exported from `gate.plugin`, the doc's examples run as written, and the import paths
of the previous release still import (with a DeprecationWarning)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import gate.plugin
from gate.cli.main import cli
from tests.support import reference
from tests.support.repo import REPO as ROOT

DOC = ROOT / "docs" / "plugins.md"
TEXT = DOC.read_text()


def _resolve(dotted: str) -> Any:
    """Import the longest module prefix of `dotted`, then walk the rest as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


MENTIONED = sorted(set(re.findall(r"`(gate(?:\.\w+)+)", TEXT)))
"""Every dotted name under gate the doc puts in code quotes (`gate.protocols.subject_call`, ...)."""

BLOCKS = re.findall(r"```(\w+)\n(.*?)```", TEXT, flags=re.S)


def test_the_doc_mentions_names_and_every_one_imports() -> None:
    assert len(MENTIONED) >= 8, MENTIONED
    missing = []
    for dotted in MENTIONED:
        try:
            with warnings.catch_warnings():  # the doc names the deprecated paths too: they must still import
                warnings.simplefilter("ignore", DeprecationWarning)
                _resolve(dotted)
        except (ImportError, AttributeError) as err:
            missing.append(f"{dotted}: {err}")
    assert not missing


FROM_GATE = re.compile(r"^[ \t]*(from (gate[\w.]*) import (?:\([^)]*\)|[^\n]*))", flags=re.M)
"""A `from gate... import ...` line (or parenthesised block) of a doc."""


def doc_imports(text: str) -> list[tuple[str, str]]:
    """(module, statement) of every `from gate... import ...` in the doc's code blocks."""
    blocks = "\n".join(code for _, code in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S))
    return [(module, statement.split("#")[0].strip()) for statement, module in FROM_GATE.findall(blocks)]


@pytest.mark.parametrize("doc", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_every_from_gate_import_in_the_docs_imports(doc: Path) -> None:
    """Each `from gate... import ...` a doc shows imports as printed: a missing name fails here."""
    failed = []
    for _, statement in doc_imports(doc.read_text()):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", DeprecationWarning)  # a doc never teaches a deprecated path
                exec(statement, {})
        except Exception as err:
            failed.append(f"{doc.name}: {statement}: {err.__class__.__name__}: {err}")
    assert not failed


def test_the_plugin_doc_teaches_gate_plugin_imports_only() -> None:
    imports = doc_imports(TEXT)
    assert imports, "docs/plugins.md shows no import"
    assert [s for module, s in imports if module != "gate.plugin"] == []


def test_the_doc_import_scan_finds_a_missing_name_and_a_parenthesised_import() -> None:
    text = "```python\nfrom gate.plugin import (\n    Outcome,\n    NoSuchName,\n)\n"
    text += "from gate.core.check import check\n```\n"
    (first, statement), (second, _) = doc_imports(text)
    assert (first, second) == ("gate.plugin", "gate.core.check")
    with pytest.raises(ImportError, match="NoSuchName"):
        exec(statement, {})


def test_every_name_of_gate_plugin_resolves_and_the_module_imports_no_torch() -> None:
    for name in gate.plugin.__all__:
        assert getattr(gate.plugin, name) is not None, name
    code = "import sys, gate.plugin; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize(
    "name",
    [
        "SpecStats",
        "SpeculativeSample",
        "warp",
        "CacheIdentity",
        "PrefixReply",
        "RequestStats",
        "RestoreReport",
        "AdapterUnavailable",
        "UnknownFault",
        "SubjectCrash",
        "WeightReloading",
        "CacheCropping",
        "FaultVisibility",
        "ControlOutcome",
        "ControlResult",
        "PathCapabilities",
        "subject_call",
    ],
)
def test_a_plugin_authors_names_are_exported_from_gate_plugin(name: str) -> None:
    assert name in gate.plugin.__all__


def _forget_old_speculative_names() -> None:
    """The shim caches a name after its one warning: forget them so each test sees its first use."""
    import gate.speculative as package

    for name in package.MOVED:
        vars(package).pop(name, None)


@pytest.mark.parametrize("name", ["SpecStats", "SpeculativeSample", "warp", "SpeculativeSampler", "VerifyRules"])
def test_the_old_single_module_speculative_names_still_import_with_a_warning(name: str) -> None:
    _forget_old_speculative_names()
    with pytest.warns(DeprecationWarning, match=f"gate.speculative.{name} is deprecated"):
        exec(f"from gate.speculative import {name}", {})
    import gate.speculative.sampler as sampler

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert getattr(importlib.import_module("gate.speculative"), name) is getattr(sampler, name)
    if hasattr(gate.plugin, name):
        assert getattr(gate.plugin, name) is getattr(sampler, name)


def test_the_worked_check_runs_as_written() -> None:
    (check_code,) = [code for kind, code in BLOCKS if kind == "python" and "@check(" in code]
    namespace: dict[str, Any] = {}
    exec(compile(check_code, str(DOC), "exec"), namespace)
    spec = namespace["finite_logits"]
    clean = reference.path("static")
    ctx = reference.ctx(reference.path("full"), clean)
    outcome = spec(ctx, spec.params())
    assert outcome.status == "pass" and outcome.metrics["non_finite"] == 0 and outcome.exercise["cached_steps"] > 0
    poisoned = spec(reference.ctx(reference.path("full"), clean.with_fault("poisoned-tail-read")), spec.params())
    assert poisoned.status == "fail"


def test_the_worked_policy_and_entry_points_are_what_the_plugins_use(tmp_path: Path) -> None:
    policies = [code for kind, code in BLOCKS if kind == "yaml" and "apiVersion: gate/policy/v1" in code]
    (policy,) = policies
    site = tmp_path / "site-policies"
    site.mkdir()
    (site / "extras.yaml").write_text(policy)
    assert yaml.safe_load(policy)["interventions"]["layout"]["claims"]["tolerance"]["mode"] == "extend"
    manifest = ROOT / "tests" / "engine" / "tinylm" / "kv-cache.yaml"
    planned = CliRunner().invoke(cli, ["plan", str(manifest), "--policy-dir", str(site), "--format", "json"])
    assert planned.exit_code == 0, planned.output
    assert "finite-logits" in planned.output
    tomls = [code for kind, code in BLOCKS if kind == "toml"]
    plugins = ROOT / "tests" / "plugins"
    shipped = "".join((p / "pyproject.toml").read_text() for p in plugins.iterdir() if (p / "pyproject.toml").is_file())
    for block in tomls:
        for line in block.splitlines():
            if "=" in line and not line.startswith("#"):
                assert line.strip() in shipped, line


def test_every_protocol_data_type_and_subject_error_is_exported_from_gate_plugin() -> None:
    import inspect

    import gate.errors
    import gate.protocols

    public = [
        name
        for name, obj in vars(gate.protocols).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and obj.__module__ == "gate.protocols"
    ]
    internal = {"OutputError", "Terminated"}  # gate's own outputs and signals, never a plugin's
    errors = [
        name
        for name, obj in vars(gate.errors).items()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == "gate.errors"
    ]
    missing = sorted({*public, *errors} - internal - set(gate.plugin.__all__))
    assert not missing, missing
    for name in ("ControlOutcome", "ControlResult", "PREFIX_CAPABILITIES"):  # the control bookkeeping
        assert name in gate.plugin.__all__
