"""Text-space slices, for models that come with a tokenizer.

The same five builders as token space, written as English and code-like text, tokenized with the
model's own tokenizer so every prompt is what that model would really read. Filler is generated
from small word lists (bland sentences that carry no answer). Lengths are targets in tokens: the
filler is trimmed until the encoded prompt fits the cell's length.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gate.quality.builders import Row, cell, row_rng
from gate.quality.spec import SliceSpec

Encode = Callable[[str], list[int]]

NAMES = (
    "Avery",
    "Blake",
    "Casey",
    "Devon",
    "Emery",
    "Finley",
    "Harper",
    "Indigo",
    "Jordan",
    "Kendall",
    "Logan",
    "Morgan",
    "Noel",
    "Oakley",
    "Parker",
    "Quinn",
    "Riley",
    "Sawyer",
    "Taylor",
    "Rowan",
)
NOUNS = (
    "river",
    "garden",
    "window",
    "lantern",
    "village",
    "harbour",
    "meadow",
    "engine",
    "letter",
    "bridge",
    "market",
    "forest",
    "kitchen",
    "station",
    "valley",
    "library",
    "tower",
    "orchard",
)
ADJECTIVES = ("quiet", "old", "narrow", "bright", "distant", "small", "green", "busy", "cold", "gentle")
VERBS = ("stands near", "faces", "leads to", "hides behind", "waits beside", "looks over", "follows")
COLOURS = ("red", "blue", "green", "yellow", "purple", "orange", "grey", "white", "black", "brown")
WORDS = (
    "apple",
    "stone",
    "cloud",
    "paper",
    "silver",
    "thunder",
    "maple",
    "copper",
    "violet",
    "anchor",
    "pepper",
    "saddle",
    "candle",
    "marble",
    "feather",
    "harvest",
    "compass",
    "velvet",
    "canyon",
    "ember",
)


@dataclass(frozen=True)
class TextSpace:
    """A model with a tokenizer: slices are text, encoded with `encode` (no special tokens)."""

    encode: Encode
    max_len: int
    tokenizer_id: str
    """Names the tokenizer (name, revision or vocabulary hash): part of the cache key."""
    bos: tuple[int, ...] = ()
    """Token ids the tokenizer puts before every prompt (its BOS), if any."""

    def key(self) -> str:
        return f"text-{hashlib.sha256(self.tokenizer_id.encode()).hexdigest()[:12]}-L{self.max_len}"


@dataclass(frozen=True)
class TextRow(Row):
    prompt_text: str
    answer_text: str


def _sentence(rng: np.random.Generator) -> str:
    a, b = (str(rng.choice(NOUNS)) for _ in range(2))
    return f" The {rng.choice(ADJECTIVES)} {a} {rng.choice(VERBS)} the {b}."


def _lines(space: TextSpace, budget: int, line: Callable[[], str]) -> list[str]:
    """Lines from `line()` until they hold `budget` tokens."""
    out: list[str] = []
    used = 0
    while used < budget:
        out.append(line())
        used += len(space.encode(out[-1]))
    return out


def _compose(
    space: TextSpace, room: int, before: list[str], evidence: str, after: list[str], tail: str
) -> tuple[str, int]:
    """Join the parts, dropping filler (alternately after, then before, the evidence) until the
    encoded prompt fits `room` tokens. Returns the text and the token index of the evidence."""
    while True:
        pre = "".join(before)
        text = pre + evidence + "".join(after) + tail
        if len(space.bos) + len(space.encode(text)) <= room or not (before or after):
            return text, len(space.bos) + len(space.encode(pre))
        (after if len(after) >= len(before) and after else before).pop()


def _row(
    space: TextSpace, prompt_text: str, answer_text: str, kind: str, length: int, depth: float, at: int
) -> TextRow:
    prompt = [*space.bos, *space.encode(prompt_text)]
    joint = [*space.bos, *space.encode(prompt_text + answer_text)]
    answer = joint[len(prompt) :] if joint[: len(prompt)] == prompt else space.encode(answer_text)
    return TextRow(prompt, answer, kind, length, depth, at, prompt_text, answer_text)


def build_text_row(spec: SliceSpec, space: TextSpace, seed: int, index: int) -> TextRow:
    length, depth = cell(spec, space.max_len, index)
    rng = row_rng(seed, spec.name, index)
    t: dict[str, Any] = spec.text

    def count(text: str) -> int:
        return len(space.encode(text))

    if spec.builder == "closure":  # code-like nesting opened near the start, closed after a long indented body
        levels = int(spec.params.get("levels", 4))
        pairs = (("(", ")"), ("[", "]"), ("{", "}"))
        kinds = [int(k) for k in rng.integers(0, 3, size=levels)]
        head = "".join(
            t["opener"].format(indent="    " * j, name=str(rng.choice(WORDS)), bracket=pairs[k][0])
            for j, k in enumerate(kinds)
        )
        indent = "    " * levels
        lines = _lines(
            space,
            length - count(head),
            lambda: t["body"].format(
                indent=indent, a=rng.integers(0, 99), b=rng.integers(0, 99), c=rng.integers(0, 99)
            ),
        )
        pre_count = round(depth * 0.3 * len(lines))
        pre = ["# " + s.strip() + "\n" for s in _lines(space, pre_count * 4, lambda: _sentence(rng))][:pre_count]
        text, at = _compose(space, length, pre, head, lines, "")
        answer = "".join(f"{'    ' * j}{pairs[k][1]}\n" for j, k in reversed(list(enumerate(kinds))))
        return _row(space, text, answer, "closure", length, depth, at)
    evidence = ""  # the filler is cut at `depth` around it
    if spec.builder == "retrieval" or (
        spec.builder == "numbers" and rng.random() < float(spec.params.get("recall_share", 0.5))
    ):
        name = str(rng.choice(NAMES))
        if spec.builder == "retrieval":
            value = str(rng.integers(1000, 10000))
            evidence = " " + t["needle"].format(name=name, value=value)
            tail, answer, kind = t["query"].format(name=name), t["answer"].format(value=value), "retrieval"
        else:
            digits = "".join(str(int(d)) for d in rng.integers(0, 10, size=int(spec.params.get("digits", 6))))
            evidence = " " + t["record"].format(name=name, digits=digits)
            tail, answer, kind = t["query"].format(name=name), f" {digits}.", "digit-recall"
    elif spec.builder == "numbers":
        start, step = int(rng.integers(1, 50)), int(rng.integers(2, 12))
        shown = int(spec.params.get("shown_terms", 8))
        terms = [start + i * step for i in range(shown + 3)]
        tail = t["progression"].format(terms=", ".join(map(str, terms[:shown])))
        answer, kind, depth = " " + ", ".join(map(str, terms[shown:])) + ",", "progression", 1.0
    else:
        n, cue = int(spec.params.get("span_len", 8)), int(spec.params.get("cue", 2))
        span = [str(w) for w in rng.choice(WORDS, size=min(n, len(WORDS)), replace=False)]
        if spec.builder == "local":
            thing, colour = str(rng.choice(NOUNS)), str(rng.choice(COLOURS))
            tail = t["fact"].format(thing=thing, colour=colour)
            answer, kind, depth = t["answer"].format(colour=colour), "local-fact", 1.0
        else:
            index_no = int(rng.integers(1, 100))
            evidence = " " + t["record"].format(index=index_no, span=" ".join(span))
            tail = t["query"].format(index=index_no, cue=" ".join(span[:cue]))
            answer, kind = " " + " ".join(span[cue:]) + ".", "copy"
    filler = _lines(space, length - count(evidence + tail), lambda: _sentence(rng))
    cut = round(depth * len(filler))
    text, at = _compose(space, length, filler[:cut], evidence, filler[cut:], tail)
    return _row(space, text, answer, kind, length, depth, at)


def build_text_rows(spec: SliceSpec, space: TextSpace, seed: int, n: int) -> list[TextRow]:
    return [build_text_row(spec, space, seed, i) for i in range(n)]
