"""The `recorded` adapter: a baseline (`gate record`) replayed as a reference path.

    subject:
      reference: {adapter: recorded, options: {baseline: baselines/main}}
      candidate: {adapter: hf, options: {...}}      # this build

Every answer comes from the baseline; a question it was not recorded for is an error naming the
question (gate.adapters.recorded.store.MissingRecording), never a silent recompute. The path offers the
DecodePath protocol only (full_logits and sessions): checks that need more of the reference
(speculative sampling, prefix caching, per-layer traces) cannot use a recording.
This module imports no torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict


class Options(BaseModel):
    """Where the baseline is."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    baseline: str
    """Baseline directory written by `gate record` (holds baseline.json and objects/)."""


class RecordedAdapter:
    """Builds a StoredPath over a baseline directory, with no live path behind it."""

    name: ClassVar[str] = "recorded"
    Options: ClassVar[type[BaseModel]] = Options

    def build(self, options: BaseModel, *, device: str, dtype: str, seed: int) -> Any:
        from gate.adapters.recorded.store import BaselineStore, StoredPath
        from gate.errors import AdapterUnavailable

        opts = options if isinstance(options, Options) else Options.model_validate(options.model_dump())
        directory = Path(opts.baseline)
        store = BaselineStore.open(directory)
        if not store.header:
            raise AdapterUnavailable(f"{directory}: no baseline here (baseline.json missing); run `gate record` first")
        recorded = store.header.get("shape", {}).get("dtype")
        if recorded != dtype:
            raise AdapterUnavailable(f"{directory}: recorded in {recorded}, the manifest asks for {dtype}")
        return StoredPath(store, None, name=f"recorded:{store.header['shape']['name']}")
