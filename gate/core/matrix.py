"""A matrix file: many manifests × seeds × dtypes × devices for one `gate run --matrix` (no torch).

    apiVersion: gate/v1
    kind: matrix
    manifests:                       # paths relative to this file; a glob expands in sorted order
      - ../examples/reference-static-layout.yaml
      - ../examples/reference-prefix-*.yaml
    seeds: [0, 1]                    # each replaces subject.seed (absent: the manifest's own)
    dtypes: [float32, bfloat16]      # each replaces subject.dtype
    devices: [cpu]                   # each replaces subject.device
    retries: 1                       # how often a task whose worker was lost is run again

`expand_matrix` turns it into runs: one per manifest and combination, named
`<manifest name>[-seedS][-DTYPE][-DEVICE]`.
"""

from __future__ import annotations

import glob
import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from gate._util.yamlio import LoadedYaml, parse_model, read_yaml
from gate.core.manifest import DEVICE_PATTERN, INT64_MAX, Record
from gate.errors import InputError

RESERVED_NAMES = frozenset({"_inputs", "summary.json", "summary.md", "junit.xml"})
"""Entries of a batch output directory that are not a manifest's run."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class Matrix(Record):
    """Manifests and the axes each of them is run over."""

    api_version: Literal["gate/v1"] = Field(alias="apiVersion")
    """Schema version of the matrix file."""
    kind: Literal["matrix"]
    """Always `matrix`."""
    manifests: list[str] = Field(min_length=1, max_length=10_000)
    """Manifest files, relative to the matrix file; a glob (`*`, `?`, `[...]`) expands in sorted order."""
    seeds: list[Annotated[int, Field(ge=0, le=INT64_MAX)]] | None = Field(default=None, min_length=1)
    """Seeds each manifest runs with (replacing subject.seed); absent: each manifest's own."""
    dtypes: list[Literal["float32", "bfloat16", "float16"]] | None = Field(default=None, min_length=1)
    """Model dtypes (replacing subject.dtype); absent: each manifest's own."""
    devices: list[str] | None = Field(default=None, min_length=1)
    """torch devices (replacing subject.device): cpu, cuda, cuda:1, mps, xpu; absent: each manifest's own."""
    retries: int = Field(default=1, ge=0, le=5)
    """How many times a run whose worker was lost (killed, out of memory, node gone) is started again."""


@dataclass(frozen=True)
class MatrixRun:
    """One manifest with the axis values a matrix sets for it."""

    name: str
    """Directory name under the batch's --out: the manifest's name and the axis values set."""
    manifest: Path
    """The manifest file as written by its author."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """subject fields to replace (seed, dtype, device); empty: the manifest runs as written."""


def safe_name(name: str) -> str:
    """A manifest name as one directory name (letters, digits, `.`, `_`, `-`)."""
    return (_UNSAFE.sub("-", name).strip("-.") or "manifest")[:200]


def run_name(manifest_name: str, overrides: dict[str, Any]) -> str:
    seed = [f"seed{overrides['seed']}"] if "seed" in overrides else []
    axes = [str(overrides[key]) for key in ("dtype", "device") if key in overrides]
    return safe_name("-".join([manifest_name, *seed, *axes]))


def _manifest_files(doc: LoadedYaml, matrix: Matrix, base: Path) -> list[tuple[Path, int]]:
    files: list[tuple[Path, int]] = []
    for i, entry in enumerate(matrix.manifests):
        pattern = os.path.normpath(base / entry)
        if glob.has_magic(entry):
            found = [Path(p) for p in sorted(glob.glob(pattern)) if Path(p).is_file()]
        else:
            found = [Path(pattern)] if Path(pattern).is_file() else []
        if not found:
            what = "matches no file" if glob.has_magic(entry) else "no such manifest file"
            raise doc.error_at(
                ("manifests", i), f"{entry!r}: {what} (paths are relative to the matrix file)", f"manifests[{i}]"
            )
        files.extend((path, i) for path in found)
    return files


def expand_matrix(path: Path, manifest_name: Any) -> tuple[list[MatrixRun], int]:
    """Every run of the matrix at PATH, in file order, and its `retries`. `manifest_name(path) -> str`
    loads (and validates) a manifest's name; two runs with one name are refused."""
    if not path.is_file():
        raise InputError(str(path), "no such matrix file")
    doc = read_yaml(path)
    matrix: Matrix = parse_model(doc, Matrix)
    for i, device in enumerate(matrix.devices or []):
        if not DEVICE_PATTERN.match(device):
            raise doc.error_at(
                ("devices", i), f"{device!r} is not a torch device (cpu, cuda, cuda:1, mps, xpu)", f"devices[{i}]"
            )
    axes: list[tuple[str, list[Any]]] = [
        (key, values)
        for key, values in (("seed", matrix.seeds), ("dtype", matrix.dtypes), ("device", matrix.devices))
        if values is not None
    ]
    runs: list[MatrixRun] = []
    seen: dict[str, Path] = {}
    for manifest, index in _manifest_files(doc, matrix, path.parent):
        base = manifest_name(manifest)
        for combo in itertools.product(*(values for _key, values in axes)):
            overrides = {key: value for (key, _values), value in zip(axes, combo, strict=True)}
            name = run_name(base, overrides)
            if name in seen or name in RESERVED_NAMES:
                why = (
                    "is reserved in the output directory"
                    if name in RESERVED_NAMES
                    else f"is also the run of {seen[name]}; give the manifests distinct names"
                )
                raise doc.error_at(("manifests", index), f"run name {name!r} {why}", f"manifests[{index}]")
            seen[name] = manifest
            runs.append(MatrixRun(name=name, manifest=manifest, overrides=overrides))
    return runs, matrix.retries
