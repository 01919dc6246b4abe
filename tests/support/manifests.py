"""A valid manifest to start from, and a writer for manifests under a test's tmp_path."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

BASE_MANIFEST = textwrap.dedent(
    """\
    apiVersion: gate/v1
    name: prefix-cache-change
    description: block prefix cache
    intervention: prefix-reuse
    claim:
      level: tolerance
      atol: 0.001
    identity: [token-ids, positions, model-revision, adapter, tokenizer, rope-scaling,
               attention-window, kv-dtype, tenant]
    subject:
      reference:
        adapter: reference
        options: {}
      candidate:
        adapter: reference
        options: {}
      seed: 3
    """
)


def manifest_writer(root: Path) -> Callable[..., Path]:
    """`write(text=BASE_MANIFEST, name="m.yaml")` writes a manifest under `root` and returns its path."""

    def write(text: str = BASE_MANIFEST, name: str = "m.yaml") -> Path:
        path = root / name
        path.write_text(text)
        return path

    return write


def write_subject_manifest(
    path: Path,
    reference: dict[str, Any],
    candidate: dict[str, Any],
    *,
    intervention: str = "layout",
    claim: dict[str, Any] | None = None,
    identity: tuple[str, ...] = ("token-ids", "positions", "kv-dtype"),
    **subject: Any,
) -> Path:
    """Write a manifest judging `candidate` against `reference` (adapter specs) to `path`."""
    doc = {
        "apiVersion": "gate/v1",
        "name": path.stem,
        "intervention": intervention,
        "claim": claim or {"level": "tolerance"},
        "identity": list(identity),
        "subject": {"reference": reference, "candidate": candidate, **subject},
    }
    path.write_text(yaml.safe_dump(doc))
    return path
