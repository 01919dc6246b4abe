"""Deterministic row builders: (slice, seed, index) -> one sample, in token space.

Row i depends only on (seed, slice name, i): a larger build extends a smaller one, so a slice can
be topped up without changing the samples already judged. Every prompt is exactly its cell's
context length, so rows of one length batch together. Each builder returns the prompt, the
ground-truth answer and the sample's kind (a slice may mix kinds, e.g. numbers).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gate.quality import vocab as V
from gate.quality.spec import SliceSpec


@dataclass(frozen=True)
class Row:
    """One sample in token space."""

    prompt: list[int]
    answer: list[int]
    kind: str
    context_len: int
    depth: float
    evidence_at: int
    """Index in `prompt` where the evidence the answer needs starts (distance = len - this)."""


def row_rng(seed: int, name: str, index: int) -> np.random.Generator:
    """The generator for row `index` of slice `name`: independent of how many rows are built."""
    return np.random.default_rng([seed, zlib.crc32(name.encode()), index])


def cell(spec: SliceSpec, max_len: int, index: int) -> tuple[int, float]:
    """(context length, depth) of row `index`: rows cycle through every length, then every depth."""
    lengths = spec.lengths_for(max_len)
    return lengths[index % len(lengths)], spec.depths[(index // len(lengths)) % len(spec.depths)]


def distinct_words(rng: np.random.Generator, space: V.TokenSpace, n: int) -> list[int]:
    if n > space.n_words:
        raise ValueError(f"vocab too small: need {n} distinct words, have {space.n_words}")
    return [V.FIRST_WORD + int(w) for w in rng.choice(space.n_words, size=n, replace=False)]


def filler(rng: np.random.Generator, space: V.TokenSpace, n: int, exclude: set[int]) -> list[int]:
    """n random word ids, none of them in `exclude` (so the evidence stays unambiguous)."""
    words = V.FIRST_WORD + rng.integers(0, space.n_words, size=n)
    bad = np.isin(words, list(exclude)) if exclude else np.zeros(n, dtype=bool)
    while bad.any():
        words[bad] = V.FIRST_WORD + rng.integers(0, space.n_words, size=int(bad.sum()))
        bad = np.isin(words, list(exclude))
    return [int(w) for w in words]


def retrieval(rng: np.random.Generator, space: V.TokenSpace, L: int, depth: float, p: dict[str, Any]) -> Row:
    """BOS haystack[KEY k v1..vm]haystack QUERY k -> v1..vm, the needle at `depth`."""
    m = int(p.get("value_len", 4))
    key, *values = distinct_words(rng, space, m + 1)
    needle, query = [V.KEY, key, *values], [V.QUERY, key]
    free = L - 1 - len(needle) - len(query)
    if free < 0:
        raise ValueError(f"context {L} too short for retrieval")
    hay = filler(rng, space, free, {key, *values})
    at = round(depth * free)
    return Row([V.BOS, *hay[:at], *needle, *hay[at:], *query], values, "retrieval", L, depth, 1 + at)


def copy_span(rng: np.random.Generator, space: V.TokenSpace, L: int, depth: float, p: dict[str, Any]) -> Row:
    """BOS filler | s1..sn | filler COPY s1..sc -> s(c+1)..sn, the span at `depth`."""
    n, cue = int(p.get("span_len", 16)), int(p.get("cue", 2))
    span = distinct_words(rng, space, n)
    tail = [V.COPY, *span[:cue]]
    free = L - 1 - (n + 2) - len(tail)
    if free < 0:
        raise ValueError(f"context {L} too short for a {n}-token span")
    fill = filler(rng, space, free, set(span))
    at = round(depth * free)
    return Row([V.BOS, *fill[:at], V.SEP, *span, V.SEP, *fill[at:], *tail], span[cue:], "copy", L, depth, 1 + at + 1)


def local(rng: np.random.Generator, space: V.TokenSpace, L: int, depth: float, p: dict[str, Any]) -> Row:
    """The copy task with its span in the last few tokens: BOS filler | s1..sn | COPY s1..sc -> rest."""
    n, cue = int(p.get("span_len", 8)), int(p.get("cue", 2))
    span = distinct_words(rng, space, n)
    tail = [V.SEP, *span, V.SEP, V.COPY, *span[:cue]]
    free = L - 1 - len(tail)
    if free < 0:
        raise ValueError(f"context {L} too short for the local control")
    prompt = [V.BOS, *filler(rng, space, free, set(span)), *tail]
    return Row(prompt, span[cue:], "local-copy", L, 1.0, L - len(tail) + 1)


def numbers(rng: np.random.Generator, space: V.TokenSpace, L: int, depth: float, p: dict[str, Any]) -> Row:
    """Digit strings recalled from far back, or an arithmetic progression (mod 10) continued.

    recall:      BOS hay[KEY k d1..dm]hay QUERY k -> d1..dm (the retrieval format, digit values)
    progression: BOS filler PROG a, a+s, ..., a+(q-1)s -> the next m terms (mod 10)
    """
    m = int(p.get("digits", 6))
    if rng.random() < float(p.get("recall_share", 0.5)):
        (key,) = distinct_words(rng, space, 1)
        digits = [V.DIGITS[int(d)] for d in rng.integers(0, 10, size=m)]
        record, query = [V.KEY, key, *digits], [V.QUERY, key]
        free = L - 1 - len(record) - len(query)
        hay = filler(rng, space, free, {key})
        at = round(depth * free)
        return Row([V.BOS, *hay[:at], *record, *hay[at:], *query], digits, "digit-recall", L, depth, 1 + at)
    q = int(p.get("shown_terms", 8))
    start, step = int(rng.integers(0, 10)), int(rng.integers(1, 10))
    terms = [V.DIGITS[(start + i * step) % 10] for i in range(q + m)]
    free = L - 1 - 1 - q
    prompt = [V.BOS, *filler(rng, space, free, set()), V.PROG, *terms[:q]]
    return Row(prompt, terms[q:], "progression", L, 1.0, L - q - 1)


def closure(rng: np.random.Generator, space: V.TokenSpace, L: int, depth: float, p: dict[str, Any]) -> Row:
    """Brackets opened far back, one per line with growing indentation and a name, closed after a
    long body: the closing line of one scope repeats its indentation and name, and the answer is
    the bracket that closes what that line opened.

    BOS filler (NL _*j name_j OPEN_j for j < D) (NL _*D w..w)* NL _*i name_i -> CLOSE_i NL
    """
    levels, width = int(p.get("levels", 4)), int(p.get("line_words", 6))
    kinds = [int(k) for k in rng.integers(0, len(V.OPEN), size=levels)]
    names = distinct_words(rng, space, levels)
    head: list[int] = []
    for j, (kind, name) in enumerate(zip(kinds, names, strict=True)):
        head += [V.NL, *[V.INDENT] * j, name, V.OPEN[kind]]
    close = int(rng.integers(0, levels))
    tail = [V.NL, *[V.INDENT] * close, names[close]]
    free = L - 1 - len(head) - len(tail)
    if free < levels + 2:
        raise ValueError(f"context {L} too short for {levels} nested brackets")
    at = round(depth * (free - (levels + 1 + width)))
    pre = filler(rng, space, at, set(names))
    body: list[int] = []
    line = [V.NL, *[V.INDENT] * levels]
    while len(body) < free - at:
        body += line + filler(rng, space, width, set(names))
    body = body[: free - at]
    return Row([V.BOS, *pre, *head, *body, *tail], [V.CLOSE[kinds[close]], V.NL], "closure", L, depth, 1 + at)


BUILDERS: dict[str, Callable[[np.random.Generator, V.TokenSpace, int, float, dict[str, Any]], Row]] = {
    "retrieval": retrieval,
    "copy": copy_span,
    "local": local,
    "numbers": numbers,
    "closure": closure,
}


def build_row(spec: SliceSpec, space: V.TokenSpace, seed: int, index: int) -> Row:
    """Row `index` of `spec` for a model of `space.max_len` positions."""
    length, depth = cell(spec, space.max_len, index)
    row = BUILDERS[spec.builder](row_rng(seed, spec.name, index), space, length, depth, spec.params)
    if len(row.prompt) != length:
        raise AssertionError(f"{spec.name}: built {len(row.prompt)} tokens for a {length}-token cell")
    return row


def build_rows(spec: SliceSpec, space: V.TokenSpace, seed: int, n: int) -> list[Row]:
    return [build_row(spec, space, seed, i) for i in range(n)]
