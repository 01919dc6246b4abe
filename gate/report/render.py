"""Rendering ReportData through the Jinja templates under templates/ (HTML and Markdown).

HTML: autoescape on, StrictUndefined, control characters written as `\\uXXXX` (gate._util.text).
Markdown: every `{{ }}` value passes through `markdown_text`, so a manifest string cannot inject
markup, links, tables or mentions into a pull-request comment.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from gate._util.resources import data_dir
from gate._util.text import printable
from gate.report.model import ReportData

MARKDOWN_LIMIT = 1_000_000
"""Bytes: GitHub refuses a step summary over 1 MiB; stay under it with room for other steps' lines."""

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_MD_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "@": "&#64;"}


def markdown_text(value: Any) -> Any:
    """Make one value inert in GitHub Markdown: escape emphasis, links, tables, HTML and @mentions."""
    if value is None or isinstance(value, Markup):
        return "" if value is None else value
    text = " ".join(printable(str(value)).split())
    text = "".join(_MD_ENTITIES.get(ch, ch) for ch in text)
    return _MD_SPECIAL.sub(r"\\\1", text)


def markdown_code(value: Any) -> Markup:
    """A command for a fenced code block: nothing renders there but a closing fence, so backticks
    and line breaks are removed and nothing else is escaped (it must stay copy-pasteable)."""
    return Markup(" ".join(str(value).replace("`", "'").split()))


def markdown_code_block(value: Any) -> Markup:
    """Lines of code for a fenced block: line breaks kept, backticks removed (only a closing fence
    could end the block), control characters shown as escapes, nothing else escaped."""
    return Markup("\n".join(printable(line).replace("`", "'") for line in str(value).splitlines()))


@cache
def html_environment() -> Environment:
    return _environment(
        autoescape=select_autoescape(enabled_extensions=("html", "html.j2", "svg.j2", "xml"), default=True),
        finalize=printable,  # control characters and bidi overrides shown as \uXXXX, then escaped
    )


@cache
def markdown_environment() -> Environment:
    env = _environment(autoescape=False, finalize=markdown_text)
    env.filters["safe_command"] = markdown_code
    env.filters["code_block"] = markdown_code_block
    return env


def _environment(**options: Any) -> Environment:
    loader = FileSystemLoader(str(data_dir("templates")))
    return Environment(loader=loader, undefined=StrictUndefined, keep_trailing_newline=True, **options)


def render_html(data: ReportData) -> str:
    return html_environment().get_template("dossier.html.j2").render(r=data)


def render_markdown(data: ReportData, limit: int = MARKDOWN_LIMIT) -> str:
    """The Markdown dossier, compacted (and at worst cut) to stay under `limit` bytes of UTF-8."""
    template = markdown_environment().get_template("dossier.md.j2")
    text = template.render(r=data, compact=False)
    if len(text.encode()) <= limit:
        return text
    text = template.render(r=data, compact=True)
    if len(text.encode()) <= limit:
        return text
    note = "\n\n_Summary cut at GitHub's size limit; see dossier.html for the rest._\n"
    cut = text.encode()[: limit - len(note.encode())].decode(errors="ignore")
    return cut + note
