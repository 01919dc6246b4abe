"""Row "every exit code is documented" (docs/security.md): a CI step decides on gate's exit code, so
`gate --help` must name every code gate's code can exit with; a code added to gate.errors (or a literal
`sys.exit(N)` in the CLI) without a word in the help fails here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import gate.errors
from tests.security.play import ROOT, gate_env


def _codes_in_code() -> set[int]:
    codes = {value for name, value in vars(gate.errors).items() if name.startswith("EXIT_") and isinstance(value, int)}
    for path in (ROOT / "gate").rglob("*.py"):
        codes |= {int(n) for n in re.findall(r"\b(?:sys\.exit|Exit|ctx\.exit)\((\d+)\)", path.read_text())}
    return codes


def test_help_lists_every_exit_code_the_code_uses() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gate", "--help"], env=gate_env(), capture_output=True, text=True, check=True
    )
    text = " ".join(done.stdout.split())
    section = text[text.index("Exit codes:") : text.index("Shell completion")]
    listed = {int(n) for n in re.findall(r"(?<![\w-])(\d+) [a-z(]", section)}
    used = _codes_in_code()
    assert {7, 10, 16, 130, 143} <= used  # the scan finds what it must
    assert used - listed == set(), f"exit codes used but not in `gate --help`: {sorted(used - listed)}"
    assert listed - used == set(), f"`gate --help` names codes nothing exits with: {sorted(listed - used)}"


def test_the_scan_sees_a_code_the_help_lacks(tmp_path: Path) -> None:
    """The comparison can fail: the help before code 7 was added would be caught."""
    old_help = "Exit codes: 0 pass, 1 gate failed, 2 bad input, 3 error, 4 awaiting, 5 partial, 6 unproven"
    listed = {int(n) for n in re.findall(r"(?<![\w-])(\d+) [a-z(]", old_help)}
    assert 7 in _codes_in_code() - listed
