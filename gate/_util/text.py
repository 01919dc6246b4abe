"""Text that is safe to show: control characters and bidirectional overrides made visible.

Terminal escapes and Unicode bidi controls ("Trojan Source") in a name or message are written as
`\\u202e` escapes, in the dossier and on the terminal; newlines and tabs stay. `one_line` also
escapes newlines and tabs in text another program wrote, so it can never begin a line of gate's log
(where a CI runner would read `::notice ...` as a workflow command).
"""

from __future__ import annotations

import re
from typing import Any

from gate.errors import InputError

_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 (but tab and newline), DEL, C1
    "\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff"  # bidi marks, embeddings, overrides, isolates
    "\u2028\u2029]"  # line and paragraph separators
)


def printable(value: Any) -> Any:
    """`value` with unsafe characters written as `\\uXXXX`; non-strings (and Markup) pass unchanged."""
    if not isinstance(value, str) or (type(value) is not str and hasattr(value, "__html__")):
        return value
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", value)


def one_line(value: Any, limit: int | None = None) -> str:
    """`str(value)` made safe to quote inside one line of gate's output: `printable`, with newlines and
    tabs written as `\\n` and `\\t` too; cut to `limit` characters (before escaping) where given."""
    text = str(value)
    if limit is not None and len(text) > limit:
        text = text[:limit] + "..."
    return str(printable(text)).replace("\n", "\\n").replace("\t", "\\t")


def has_unsafe(text: str) -> bool:
    return _UNSAFE.search(text) is not None


def single_line_problem(text: str) -> str | None:
    """Why `text` cannot be stored as one line of someone's words (a reason, a name), or None: a
    control character or a bidi override, refused where it is written so it can never begin a log line."""
    found = _UNSAFE.search(text) or re.search("[\n\t]", text)
    if found is None:
        return None
    return f"holds the control character {one_line(found.group())!r} at {found.start()}; give one line of plain text"


def require_single_lines(*fields: tuple[str, str]) -> None:
    """Refuse (InputError, exit 2) the first `(option, text)` whose text is not one line (single_line_problem)."""
    for option, text in fields:
        if (problem := single_line_problem(text)) is not None:
            raise InputError(option, problem)


__all__ = ["has_unsafe", "one_line", "printable", "require_single_lines", "single_line_problem"]
