"""sha256 of a file, read in 1 MiB blocks (a model file may be many gigabytes), and the short refs that
name a commit or a digest."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


MIN_REF = 7
"""Shortest commit or digest prefix accepted (git's short hash)."""


def ref_matches(value: str | None, asked: str) -> bool:
    """A commit or digest `asked` (7+ characters, any case, optional sha256: prefix) names `value`."""
    ref = asked.strip().lower().removeprefix("sha256:")
    return value is not None and len(ref) >= MIN_REF and value.lower().startswith(ref)
