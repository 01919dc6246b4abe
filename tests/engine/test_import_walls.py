"""The walls worth keeping: the CLI, records and planner import no torch (instant `gate --help`,
`gate plan`), and rendering imports no model code."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.repo import EXAMPLES, REPO

PROBE = """
import sys
from pathlib import Path
from click.testing import CliRunner
from gate.cli.main import cli
runner = CliRunner()
assert runner.invoke(cli, ["--help"]).exit_code == 0
for name in cli.list_commands(None):
    assert runner.invoke(cli, [name, "--help"]).exit_code == 0, name
for manifest in sys.argv[1:]:  # the adapters' capability lists are built without torch too
    assert runner.invoke(cli, ["plan", manifest]).exit_code == 0, manifest
assert runner.invoke(cli, ["validate", sys.argv[1]]).exit_code == 0
import gate.core.matrix, gate.report.batch
import gate.report, gate.trust.attest, gate.trust.ledger, gate.trust.audit
heavy = sorted(m for m in ("torch", "transformers", "datasets", "ray") if m in sys.modules)
print(",".join(heavy))
"""


def test_cli_plan_and_rendering_import_no_torch_and_no_ray() -> None:
    names = ("reference-static-layout", "reference-quant-int8", "hf-dynamic", "engine-llamacpp-prefix")
    manifests = [str(EXAMPLES / f"{name}.yaml") for name in names]
    out = subprocess.run([sys.executable, "-c", PROBE, *manifests], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy modules imported: {out.stdout.strip()}"


def test_no_module_imports_a_conftest() -> None:
    """Fixtures reach tests through pytest (tests/<package>/conftest.py); what several folders share
    is a plain module under tests/support/."""
    tests = REPO / "tests"
    importing = re.compile(r"^\s*(from|import)\s+[\w.]*conftest\b", re.MULTILINE)
    offenders = [str(p.relative_to(tests)) for p in tests.rglob("*.py") if importing.search(p.read_text())]
    assert offenders == []
