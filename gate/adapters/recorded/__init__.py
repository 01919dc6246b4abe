"""The `recorded` adapter: a baseline (`gate record`) replayed as a reference path.

    subject:
      reference: {adapter: recorded, options: {baseline: baselines/main}}
      candidate: {adapter: hf, options: {...}}      # this build

Every answer comes from the baseline; a question it was not recorded for is MissingRecording, never
a silent recompute. Clocks and per-layer traces come from the live reference the baseline names
(`live_reference`), never a verdict's logits. This module imports no torch.
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
    live_reference: bool = True
    """Build the reference the baseline names (its adapter and options) in this job, on first use,
    for what stored answers cannot give: phase-performance's clocks (timed side by side with the
    candidate) and the per-layer trace behind a failed check's diagnosis. Its model identity must
    equal the recorded one; its answers never stand in for recorded ones. false: no live reference
    (phase-performance is then unproven, and a diagnosis says it saw no layer trace)."""


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
        header = store.header

        def counterpart() -> Any:
            from gate.core.registry import load_adapter
            from gate.errors import UnavailableError

            try:
                adapter = load_adapter(str(header.get("adapter")))()
                spec = adapter.Options.model_validate(header.get("options", {}))
                return adapter.build(spec, device=device, dtype=dtype, seed=seed)
            except (AdapterUnavailable, UnavailableError, ImportError, RuntimeError, ValueError) as err:
                raise AdapterUnavailable(
                    f"the baseline's reference (adapter {header.get('adapter')!r}) cannot be built here: "
                    f"{err.__class__.__name__}: {err}"
                ) from err

        return StoredPath(
            store,
            None,
            name=f"recorded:{header['shape']['name']}",
            counterpart=counterpart if opts.live_reference else None,
        )
