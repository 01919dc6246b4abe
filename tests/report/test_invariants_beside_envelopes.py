"""A lossy example's dossier shows the invariants its cache was held to (held or broken) right under
its envelope table, in Markdown and HTML, so the approver reads what the change loses beside whether
the cache does what it claims (issue 47). Real runs of two reference examples through the CLI, cut
to the two checks that matter (a partial run: the quality slices on 16 samples each)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate.cli.main import cli
from tests.support.repo import EXAMPLES

QUANT = ["quant-residual-overflow", "quant-error-bound", "quant-config-mismatch"]
EVICT = ["evict-protected", "evict-ranking", "evict-budget", "evict-position", "evict-short"]


@pytest.mark.parametrize(
    ("name", "check", "broken"),
    [
        ("reference-quant-int8", "quant-invariants", set()),  # a correct int8 cache: every invariant held
        ("reference-evict-fault-drop-sink", "evict-invariants", {"evict-protected"}),  # its first sink dropped
    ],
)
def test_a_lossy_dossier_shows_its_invariants_under_its_envelopes(
    tmp_path: Path, name: str, check: str, broken: set[str]
) -> None:
    out = tmp_path / name
    args = ["run", str(EXAMPLES / f"{name}.yaml"), "--out", str(out), "--check", "quality-slices", "--check", check]
    run = CliRunner().invoke(cli, [*args, "--param", "quality-slices.samples=16", "--threads", "1", "-q"])
    assert run.exit_code in (1, 5), run.output  # partial; FAIL where an invariant or an underpowered slice fails
    results = json.loads((out / "results.json").read_text())
    judged = next(c for c in results["checks"] if c["check"] == check)
    names = QUANT if check == "quant-invariants" else EVICT
    assert judged["evidence"]["invariants"] == {n: "broken" if n in broken else "held" for n in names}
    markdown = (out / "dossier.md").read_text()
    decision = markdown.index("### The decision: each envelope on its one-sided bound")
    beside = markdown.index("### Beside the envelopes: what the cache promises, after every step")
    assert decision < beside < markdown.index("### What next")  # right under the envelopes, first screen
    assert "| local-control |" in markdown[decision:beside]  # an envelope row above them
    for n in names:
        word = "❌ BROKEN" if n in broken else "✅ held"
        assert f"| {check} | {n} | {word} |" in markdown[beside:]
    html = (out / "dossier.html").read_text()
    section = html[html.index('<section class="decision" id="invariants">') :]
    section = section[: section.index("</section>")]
    assert html.index('id="decision"') < html.index('id="invariants"')
    for n in names:
        assert f'<td class="mono">{n}</td>' in section
    assert section.count("BROKEN") == len(broken) and section.count(">held</span>") == len(names) - len(broken)
