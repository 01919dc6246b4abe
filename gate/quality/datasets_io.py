"""Build a slice's rows into a saved, fingerprinted `datasets.Dataset`.

The fingerprint is the sha256 of the saved Arrow files: the same slice, seed, size and model space
always give the same bytes, so the fingerprint in results.json names exactly the samples judged.
A build is cached under $GATE_CACHE_DIR/evals (default ~/.cache/gate/quality) and re-verified on load.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import datasets

from gate.quality.builders import build_rows
from gate.quality.spec import SliceSpec
from gate.quality.vocab import TokenSpace

if TYPE_CHECKING:
    from gate.quality.text import TextSpace

BUILD_VERSION = 2
"""Bump when a builder changes the rows it produces for the same slice and seed."""


def cache_root() -> Path:
    return Path(os.environ.get("GATE_CACHE_DIR") or Path.home() / ".cache" / "gate") / "evals"


def spec_digest(spec: SliceSpec) -> str:
    """sha256 of the slice definition as validated (changes whenever the YAML's meaning does)."""
    body = json.dumps({"build": BUILD_VERSION, "spec": spec.model_dump(mode="json", by_alias=True)}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def fingerprint(directory: Path) -> str:
    """sha256 over the saved Arrow files of a dataset directory, in file-name order."""
    h = hashlib.sha256()
    files = sorted(directory.glob("*.arrow"))
    if not files:
        raise FileNotFoundError(f"no Arrow files under {directory}")
    for path in files:
        h.update(path.name.encode())
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return "sha256:" + h.hexdigest()


@dataclass
class BuiltSlice:
    spec: SliceSpec
    dataset: datasets.Dataset
    path: Path
    fingerprint: str


def _columns(spec: SliceSpec, space: TokenSpace | TextSpace, seed: int, n: int) -> dict[str, list[Any]]:
    """Column-wise rows; text slices carry their text beside the token columns."""
    names: tuple[str, ...] = ("prompt", "answer", "kind", "context_len", "depth", "evidence_at")
    rows: list[Any]
    if isinstance(space, TokenSpace):
        rows = list(build_rows(spec, space, seed, n))
    else:
        from gate.quality.text import build_text_rows

        rows = list(build_text_rows(spec, space, seed, n))
        names += ("prompt_text", "answer_text")
    return {"index": list(range(n)), **{name: [getattr(r, name) for r in rows] for name in names}}


def build_slice(
    spec: SliceSpec, space: TokenSpace | TextSpace, seed: int, n: int, root: Path | None = None
) -> BuiltSlice:
    """The first n rows of `spec` for `space` under `seed`: loaded from the cache when present,
    else built, saved atomically and loaded back (so the judged rows are the saved bytes)."""
    datasets.disable_progress_bars()
    directory = (root or cache_root()) / f"{spec.name}-{space.key()}-s{seed}-n{n}-{spec_digest(spec)[:16]}"
    if not (directory / "dataset_info.json").is_file():
        directory.parent.mkdir(parents=True, exist_ok=True)
        ds = datasets.Dataset.from_dict(_columns(spec, space, seed, n))
        tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
        try:
            ds.save_to_disk(str(tmp))
            try:
                tmp.rename(directory)
            except OSError:  # another process saved the same build first: theirs is identical
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return BuiltSlice(spec, datasets.load_from_disk(str(directory)), directory, fingerprint(directory))
