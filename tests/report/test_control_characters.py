"""Control characters and bidi overrides never reach a reader raw: not in the dossier, not on the terminal."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

import tests.report.results as fx
from gate._util.text import has_unsafe, printable
from gate.cli.main import cli
from gate.report import build_report, render_html, render_markdown
from gate.report.junit import junit_xml
from gate.trust.ledger import Ledger

TROJAN = "approved\u202e\u2066 by cto\u2069\x1b[2J\x07\x00 done"


def _with_trojan() -> object:
    result = fx.passing_run()
    manifest = {**result.manifest, "name": f"evil {TROJAN}", "description": TROJAN}
    checks = [c.model_copy(update={"message": f"{c.message} {TROJAN}"}) for c in result.checks]
    return result.model_copy(update={"manifest": manifest, "checks": checks, "summary": TROJAN})


def test_printable_escapes_controls_and_bidi_and_keeps_newlines_and_tabs() -> None:
    assert printable("a\u202eb\x1bc\td\ne") == "a\\u202eb\\u001bc\td\ne"
    assert printable(3) == 3 and not has_unsafe(printable(TROJAN))


def test_the_dossier_shows_them_as_escapes() -> None:
    result = _with_trojan()
    data = build_report(result)  # type: ignore[arg-type]
    for text in (render_html(data), render_markdown(data), junit_xml(result, data).decode()):  # type: ignore[arg-type]
        assert "\u202e" not in text and "\x1b" not in text and "\x00" not in text and "\u2066" not in text
        assert "\\u202e" in text


def test_the_terminal_shows_them_as_escapes(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    with Ledger.open(ledger) as opened:
        opened.append("waiver", {"check": TROJAN, "manifest_name": TROJAN, "approver": TROJAN, "expires": "2030-01-01"})
    for command in (["audit", "list"], ["audit", "show", "1"]):
        result = CliRunner().invoke(cli, [*command, "--ledger", str(ledger)])
        assert result.exit_code == 0, result.output
        assert not has_unsafe(result.output) and "\\u202e" in result.output
