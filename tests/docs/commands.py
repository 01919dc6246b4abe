"""The shell commands README.md and docs/*.md print, as a test runs them.

A fenced block tagged `sh`, `bash`, `shell` or `console` is runnable: each line is one command
(a line ending in `\\` continues on the next; a line that is only a comment is none), and the
exit code it must give is 0 unless its trailing comment starts with `exit N`. A block that cannot
run on a developer's machine says so on the line before its fence:

    <!-- gate-docs: skip needs a live engine server -->

and a block whose text is a file the commands after it read names that file:

    <!-- gate-docs: file trust.yaml -->

Markers elsewhere (not directly above a fence) are errors, so a marker cannot silently drift away
from the block it describes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHELL = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*gate-docs:\s*(skip|file)\s+(.*?)\s*-->\s*$")
EXIT = re.compile(r"^exit (\d+)\b")


@dataclass(frozen=True)
class Command:
    file: str
    """The document, relative to the repository root."""
    line: int
    """The command's first line, 1-based."""
    text: str
    """The command as bash reads it, continuation lines joined, comment kept."""
    expect: int
    """The exit code its comment documents (`# exit N`), else 0."""

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Block:
    file: str
    line: int
    """The opening fence's line, 1-based."""
    lang: str
    body: list[str]
    skip: str | None = None
    """Why it cannot run here (its `gate-docs: skip` marker), else None."""
    writes: str | None = None
    """The file name its `gate-docs: file` marker gives it, else None."""
    commands: list[Command] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def documents(root: Path = REPO_ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def comment_start(line: str) -> int:
    """Where bash's comment starts in LINE (a `#` at a word's start, outside quotes), else -1."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return i
    return -1


def commands(block: Block) -> list[Command]:
    """The block's commands: continuation lines joined, comment-only and blank lines dropped."""
    found: list[Command] = []
    pending: list[str] = []
    start = 0
    for offset, raw in enumerate(block.body):
        line = raw.strip()
        if not pending:
            if not line or line.startswith("#"):
                continue
            start = block.line + 1 + offset
        pending.append(line)
        if line.endswith("\\"):
            continue
        text = "\n".join(pending)
        last = pending[-1]
        at = comment_start(last)
        said = EXIT.match(last[at + 1 :].strip()) if at >= 0 else None
        found.append(Command(block.file, start, text, int(said.group(1)) if said else 0))
        pending = []
    if pending:
        raise ValueError(f"{block.file}:{start}: a command ends in `\\` with no line after it")
    return found


def blocks(path: Path, root: Path = REPO_ROOT) -> list[Block]:
    """Every fenced block of PATH with its marker; ValueError on a marker not directly above a fence."""
    name = path.relative_to(root).as_posix()
    lines = path.read_text().splitlines()
    found: list[Block] = []
    marker: tuple[int, str, str] | None = None
    current: Block | None = None
    for number, line in enumerate(lines, 1):
        fence = FENCE.match(line)
        if current is not None:
            if fence and not fence.group(2):
                found.append(current)
                current = None
            else:
                current.body.append(line)
            continue
        if marker is not None and not fence:
            raise ValueError(f"{name}:{marker[0]}: a gate-docs marker must be directly above a fenced block")
        if fence:
            current = Block(name, number, fence.group(2), [])
            if marker is not None:
                kind, value = marker[1], marker[2]
                if kind == "skip":
                    current.skip = value
                else:
                    current.writes = value
                marker = None
            continue
        tagged = MARKER.match(line)
        if tagged:
            if not tagged.group(2):
                raise ValueError(f"{name}:{number}: a gate-docs marker needs a reason or a file name")
            marker = (number, tagged.group(1), tagged.group(2))
        elif "gate-docs" in line:
            raise ValueError(f"{name}:{number}: not a gate-docs marker: {line.strip()}")
    if current is not None:
        raise ValueError(f"{name}:{current.line}: a fenced block that never closes")
    for block in found:
        if block.lang in SHELL:
            block.commands = commands(block)
        if block.writes and block.lang in SHELL:
            raise ValueError(f"{block.where}: a shell block cannot be a file (gate-docs: file)")
        if block.skip and block.lang not in SHELL:
            raise ValueError(f"{block.where}: only a shell block can be skipped (gate-docs: skip)")
    return found


def all_blocks(root: Path = REPO_ROOT) -> list[Block]:
    return [block for path in documents(root) for block in blocks(path, root)]
