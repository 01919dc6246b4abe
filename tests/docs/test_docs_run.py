"""Every command README.md and docs/*.md print, run as printed (tests/docs/commands.py reads them).

Each document runs in its own farm: a fresh git repository whose examples/, policies/, benchmarks/
... are links to this checkout's, `.venv` linked as `make demo` leaves it, nothing else. Its commands
run in document order in one bash session (so `. .venv/bin/activate` and `export` carry over, and a
later command reads what an earlier one wrote), each under a timeout, the interpreter's bin first
on PATH, GATE_THREADS=1. Each must exit with the code its comment documents (`# exit N`, else 0).
A block marked `<!-- gate-docs: skip REASON -->` is not run; each is reported as a skipped test
with its reason. Slow (many `gate run`s): marked `docs`, run by .ci/docs.sh (`make docs`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.docs.commands import REPO_ROOT, SHELL, Block, Command, all_blocks

pytestmark = pytest.mark.docs

LINKED = ["examples", "policies", "scenarios", "benchmarks", "checks", "evals", "templates"]
LINKED += ["Makefile", "pyproject.toml", "action.yml", "action", ".venv"]
"""What the farm links from this checkout: read, never written, by the documented commands
(`schemas/` and `out/` are not linked: `gate schema --out schemas` and every --out write there)."""
TIMEOUT_S = 300
"""Each command's limit (the longest here, an int8 run beside other jobs, took about a minute)."""
INLINE = {"export", ".", "source", "cd", "unset", "set"}
"""Commands that change the session itself: run in it, not in a child bash under `timeout`."""

BLOCKS = all_blocks()
DOCUMENTS = sorted({b.file for b in BLOCKS if b.lang in SHELL and b.skip is None and b.commands})
SKIPPED = [b for b in BLOCKS if b.skip is not None]


def farm(root: Path) -> Path:
    root.mkdir()
    for name in LINKED:
        if (REPO_ROOT / name).exists():
            (root / name).symlink_to(REPO_ROOT / name)
    git = ["git", "-c", "user.name=docs", "-c", "user.email=docs@example.invalid", "-c", "init.defaultBranch=main"]
    git += ["-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a clone"], cwd=root, check=True)
    return root


def script(blocks: list[Block], logs: Path) -> tuple[str, list[Command]]:
    """One bash session: each command's output to logs/N.log, its exit code to logs/N.rc, its seconds to logs/N.s."""
    lines, at = ["set +e"], shlex.quote(str(logs))
    ran: list[Command] = []
    for block in blocks:
        if block.writes:
            lines.append(
                f"cat > {shlex.quote(block.writes)} <<'GATE_DOCS_EOF'\n" + "\n".join(block.body) + "\nGATE_DOCS_EOF"
            )
        if block.lang not in SHELL or block.skip is not None:
            continue
        for command in block.commands:
            n = len(ran)
            ran.append(command)
            first = command.text.split(None, 1)[0]
            body = command.text if first in INLINE else f"timeout -k 5 {TIMEOUT_S} bash -c {shlex.quote(command.text)}"
            lines += [
                "__start=$EPOCHREALTIME",
                f"{{ {body}\n}} >{at}/{n}.log 2>&1 </dev/null",
                f"echo $? >{at}/{n}.rc",
                f'echo "$__start $EPOCHREALTIME" >{at}/{n}.s',
            ]
    return "\n".join(lines) + "\n", ran


def environment(home: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GATE_", "CI", "RUNNER_"))}
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return {**keep, "PATH": path, "HOME": str(home), "GATE_THREADS": "1", "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_command_runs_as_printed(document: str, tmp_path: Path) -> None:
    blocks = [b for b in BLOCKS if b.file == document]
    root, logs = farm(tmp_path / "clone"), tmp_path / "logs"
    logs.mkdir()
    text, ran = script(blocks, logs)
    (tmp_path / "session.sh").write_text(text)
    start = time.monotonic()
    subprocess.run(
        ["bash", str(tmp_path / "session.sh")], cwd=root, env=environment(tmp_path), timeout=TIMEOUT_S * len(ran)
    )
    wrong, report = [], [f"{document}: {len(ran)} commands in {time.monotonic() - start:.0f} s"]
    for n, command in enumerate(ran):
        rc_file = logs / f"{n}.rc"
        rc = int(rc_file.read_text()) if rc_file.exists() else None
        clock = (logs / f"{n}.s").read_text().split() if (logs / f"{n}.s").exists() else ["0", "0"]
        seconds = float(clock[1]) - float(clock[0])
        first = command.text.splitlines()[0][:90]
        report.append(f"  {command.where}  exit {rc} (documented {command.expect})  {seconds:6.1f} s  {first}")
        if rc != command.expect:
            output = (logs / f"{n}.log").read_text() if (logs / f"{n}.log").exists() else ""
            said = "timed out" if rc == 124 else f"exit {rc}"
            wrong.append(f"{command.where}: {said}, documented {command.expect}: {command.text}\n{output[-3000:]}")
    print("\n".join(report))
    skipped = [b.where for b in BLOCKS if b.file == document and b.skip is not None]
    print(f"  not run here (marked): {', '.join(skipped) or 'none'}")
    assert not wrong, "\n\n".join(wrong)


@pytest.mark.parametrize("block", SKIPPED, ids=[b.where for b in SKIPPED])
def test_marked_block_is_not_run(block: Block) -> None:
    """Listed in the run's output (`-rs`) with its reason: each block the docs say cannot run here."""
    assert block.commands, f"{block.where}: a skip marker on a block with no command"
    pytest.skip(f"{block.where} not run: {block.skip}")
