"""action.yml documents what gate does: every exit code of gate/errors.py, every verdict run.sh reports."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import gate.errors
from gate.core.result import Verdict

ACTION = Path(__file__).resolve().parents[2] / "action.yml"


def documented_exit_codes() -> dict[int, str]:
    """The `#  N  meaning` lines of action.yml's exit-code list (several per line allowed)."""
    text = ACTION.read_text()
    block = text[text.index("# Exit codes") :].split("\n#\n", 1)[0].split("\n# Exit 4 becomes", 1)[0]
    found: dict[int, str] = {}
    for line in block.splitlines()[1:]:
        for code, meaning in re.findall(r"(?:^#|\s{2,})\s*(\d+)\s+([a-z][^0-9]*?)(?=\s{2,}\d|$)", line):
            found[int(code)] = meaning.strip()
    return found


def test_action_yml_lists_every_exit_code_gate_has_and_no_other() -> None:
    codes = {v for k, v in vars(gate.errors).items() if k.startswith("EXIT_") and isinstance(v, int)}
    documented = documented_exit_codes()
    assert set(documented) == codes, (sorted(set(documented) - codes), sorted(codes - set(documented)))
    assert documented[4].startswith("awaiting approval") and documented[8].startswith("other commit")


def test_action_yml_verdicts_output_names_every_verdict_the_run_step_reports() -> None:
    described = yaml.safe_load(ACTION.read_text())["outputs"]["verdicts"]["description"]
    named = set(re.findall(r"[a-z]+(?:-[a-z]+)*", described.split("(", 1)[1]))
    reported = {v.value for v in Verdict} | {"approved", "bad-input"}  # action/run.sh adds these two
    assert reported <= named, sorted(reported - named)
    run_sh = (ACTION.parent / "action" / "run.sh").read_text()
    assert "verdict=approved" in run_sh and "verdict=bad-input" in run_sh


README = ACTION.parent / "README.md"


def readme_lines(*verbs: str) -> list[tuple[str, int]]:
    """README's `gate VERB ...` command lines (comment stripped) with the exit code they say (`# exit N`)."""
    found = []
    for line in README.read_text().splitlines():
        command, _, comment = line.partition("  #")
        said = re.match(r"\s*exit (\d+)", comment)
        if any(command.startswith(f"gate {verb} ") for verb in verbs):
            found.append((command.strip(), int(said.group(1)) if said else 0))
    return found


def test_readme_validate_and_keygen_lines_run_as_printed(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    lines = readme_lines("validate", "keygen")
    assert [c for c, _ in lines if c.startswith("gate keygen --out key")], lines
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command, expect in lines:
        where = tmp_path if command.startswith("gate keygen") else ACTION.parent  # keys land in tmp
        done = subprocess.run(["bash", "-c", command], cwd=where, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == expect, f"{command}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    assert (tmp_path / "key.key").is_file() and (tmp_path / "key.pub").is_file()
    rejected = [p for p in (ACTION.parent / "examples").glob("*.yaml") if "gate-expect: rejected" in p.read_text()]
    assert len(rejected) == 3 and all(p.read_text().startswith("# gate-expect: rejected") for p in rejected)
