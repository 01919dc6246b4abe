"""The token-space vocabulary of the synthetic slices (models without a tokenizer).

Ids below `FIRST_WORD` are structural markers and digits; every id from `FIRST_WORD` to
vocab_size - 1 is a "word" (filler, keys, values, spans). The copy model in gate/models/weights
is trained on exactly this layout (gate/models/train.py).
"""

from __future__ import annotations

from dataclasses import dataclass

PAD = 0
BOS = 1
SEP = 2
KEY = 3
QUERY = 4
COPY = 5
EQ = 6
NL = 7
INDENT = 8
OPEN = (9, 10, 11)  # ( [ {
CLOSE = (12, 13, 14)  # ) ] }
PROG = 15  # starts an arithmetic progression of digits
DIGITS = tuple(range(16, 26))  # 0..9
FIRST_WORD = 32
MIN_VOCAB = 64

NAMES = {
    PAD: "<pad>",
    BOS: "<bos>",
    SEP: "|",
    KEY: "KEY",
    QUERY: "QUERY",
    COPY: "COPY",
    EQ: "=",
    NL: "\\n",
    INDENT: "_",
    PROG: "PROG",
}
NAMES.update(zip((*OPEN, *CLOSE), "([{)]}", strict=True))
NAMES.update({d: str(i) for i, d in enumerate(DIGITS)})


@dataclass(frozen=True)
class TokenSpace:
    """A model with no tokenizer: slices are built directly in token ids."""

    vocab_size: int
    max_len: int

    def __post_init__(self) -> None:
        if self.vocab_size < MIN_VOCAB:
            raise ValueError(f"token-space slices need vocab_size >= {MIN_VOCAB}, got {self.vocab_size}")

    @property
    def n_words(self) -> int:
        return self.vocab_size - FIRST_WORD

    def key(self) -> str:
        return f"tokens-v{self.vocab_size}-L{self.max_len}"


def render(tokens: list[int]) -> str:
    """Human-readable form of a token-space sequence, for worst-sample evidence."""
    return " ".join(NAMES.get(t, f"w{t - FIRST_WORD}") for t in tokens)
