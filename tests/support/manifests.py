"""A valid manifest to start from, and a writer for manifests under a test's tmp_path."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

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
