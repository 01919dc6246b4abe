"""What a model file states about its shape, read without loading it: from a Hugging Face directory's
`config.json` (or its `text_config`) or a GGUF file's header (stdlib only: `gate validate` stays
instant). gate uses it where the engine states nothing (vLLM states no vocabulary size).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class ModelMeta:
    """The model's own statement of its shape (None: it states nothing)."""

    vocab_size: int | None = None
    context_length: int | None = None
    """Trained context length."""
    sliding_window: int | None = None
    """Tokens a local layer attends to (None: full attention, or not stated)."""
    sliding_layers: tuple[int, ...] | None = None
    """The local layers where the model states them per layer (None: all, or not stated)."""
    source: str = ""
    """Where it was read (the file)."""


def read_model_meta(path: str | Path) -> ModelMeta:
    """What a model directory's config.json or a GGUF file states; empty where it is neither or unreadable."""
    where = Path(path)
    try:
        if where.is_dir():
            return _config_meta(where / "config.json")
        if where.is_file():
            with where.open("rb") as f:
                if f.read(4) == b"GGUF":
                    return _gguf_meta(f, where)
    except (OSError, ValueError, struct.error, UnicodeDecodeError):
        pass
    return ModelMeta()


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else None


def _config_meta(config: Path) -> ModelMeta:
    doc = json.loads(config.read_text())
    if not isinstance(doc, dict):
        return ModelMeta()
    nested = doc.get("text_config")
    text: dict[str, object] = nested if isinstance(nested, dict) else {}
    vocab = _whole(doc.get("vocab_size")) or _whole(text.get("vocab_size"))
    context = _whole(doc.get("max_position_embeddings")) or _whole(text.get("max_position_embeddings"))
    window = _whole(doc.get("sliding_window")) or _whole(text.get("sliding_window"))
    return ModelMeta(vocab_size=vocab, context_length=context, sliding_window=window, source=str(config))


def _read(f: BinaryIO, fmt: str) -> int | float | bool:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("truncated GGUF header")
    value: int | float | bool = struct.unpack(fmt, data)[0]
    return value


def _string(f: BinaryIO) -> str:
    n = int(_read(f, "<Q"))
    if n > 1 << 20:
        raise ValueError("GGUF string longer than 1 MiB")
    return f.read(n).decode()


def _skip(f: BinaryIO, kind: int) -> None:
    if kind == _STRING:
        f.seek(int(_read(f, "<Q")), 1)
    elif kind in _SCALARS:
        f.seek(struct.calcsize(_SCALARS[kind]), 1)
    else:
        raise ValueError(f"GGUF value type {kind}")


def _gguf_meta(f: BinaryIO, path: Path) -> ModelMeta:
    version = int(_read(f, "<I"))
    if version < 2:
        raise ValueError(f"GGUF version {version}")
    _read(f, "<Q")  # tensors
    found: dict[str, int] = {}
    pattern: list[bool] | None = None
    arch = ""
    wanted = ("vocab_size", "context_length", "attention.sliding_window")
    for _ in range(int(_read(f, "<Q"))):
        key, kind = _string(f), int(_read(f, "<I"))
        if kind == _ARRAY:
            elem, count = int(_read(f, "<I")), int(_read(f, "<Q"))
            if key == "tokenizer.ggml.tokens":
                found["tokens"] = count
            if key == f"{arch}.attention.sliding_window_pattern" and elem in (1, 7) and count <= 4096:
                pattern = [bool(_read(f, _SCALARS[elem])) for _ in range(count)]
            elif elem in _SCALARS:
                f.seek(struct.calcsize(_SCALARS[elem]) * count, 1)
            else:
                for _ in range(count):
                    _skip(f, elem)
        elif key == "general.architecture" and kind == _STRING:
            arch = _string(f)
        elif kind in _SCALARS and kind not in (6, 7, 12) and key in tuple(f"{arch}.{k}" for k in wanted):
            found[key[len(arch) + 1 :]] = int(_read(f, _SCALARS[kind]))
        else:
            _skip(f, kind)
    vocab = _whole(found.get("vocab_size")) or _whole(found.get("tokens"))
    window = _whole(found.get("attention.sliding_window"))
    layers = tuple(i for i, local in enumerate(pattern) if local) if window and pattern is not None else None
    return ModelMeta(
        vocab_size=vocab,
        context_length=_whole(found.get("context_length")),
        sliding_window=window,
        sliding_layers=layers,
        source=str(path),
    )
