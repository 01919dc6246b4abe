"""The `reference` adapter: execution paths through gate's own small decoder.

    subject:
      reference: {adapter: reference, options: {path: full}}
      candidate: {adapter: reference, options: {path: chunked, chunk_size: 64}}

Paths (`path:`) are a table from name to a builder (options.PATHS), imported only when a run needs
it; a new path is one line there plus a builder `fn(model, options, device=, dtype=, seed=)`.
`weights:` loads trained weights instead of seeded random ones; `fault:` applies one fault with
`with_fault`. This module imports no torch, so `gate validate` and `gate plan` stay instant.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from gate.adapters.reference.options import PATHS, PRESET_NAMES, Options
from gate.protocols import PathCapabilities

if TYPE_CHECKING:
    from gate.protocols import DecodePath

WEIGHTS_DIR = Path(__file__).resolve().parents[2] / "models" / "weights"
"""Shipped trained weights (gate.models.trained.WEIGHTS_DIR, named here so planning needs no torch)."""

OFFERS: dict[str, list[str]] = {
    "full": ["sessions", "LayerTracing", "AttentionProbe", "LayoutEdges"],
    "prefix-cache": ["PrefixCaching"],
    "speculative": ["SpeculativePath"],
    "quantized": ["sessions", "LayerTracing", "AttentionProbe", "LayoutEdges", "QuantizedKV"],
}
"""Capabilities by path (a cached path offers what `full` does)."""

__all__ = ["PATHS", "PRESET_NAMES", "Options", "ReferenceAdapter"]


class ReferenceAdapter:
    """Builds DecodePaths through gate.models.reference (seeded weights: both paths of a manifest
    built with the same seed hold identical weights)."""

    name: ClassVar[str] = "reference"
    Options: ClassVar[type[BaseModel]] = Options

    def build(self, options: BaseModel, *, device: str, dtype: str, seed: int) -> DecodePath:
        from importlib import import_module

        from gate.adapters.reference.paths import build_model_for

        if not isinstance(options, Options):
            options = Options.model_validate(options.model_dump())
        module, _, attr = PATHS[options.path].partition(":")
        builder = getattr(import_module(module), attr)
        model = build_model_for(options, device=device, dtype=dtype, seed=seed)
        path: DecodePath = builder(model, options, device=device, dtype=dtype, seed=seed)
        return path.with_fault(options.fault) if options.fault else path

    def capabilities(self, options: BaseModel) -> PathCapabilities:
        """Longest sequence and capabilities from the options alone: the preset and overrides, or the
        trained weights file's config (read from its safetensors header, no tensor loaded)."""
        from gate.models.config import ModelConfig

        if not isinstance(options, Options):
            options = Options.model_validate(options.model_dump())
        if options.weights is not None:
            max_len, source = int(_weights_config(options.weights)["max_len"]), f"weights {options.weights}"
        else:
            max_len = ModelConfig.from_preset(options.preset, **options.overrides()).max_len
            source = "option max_len" if options.max_len is not None else f"preset {options.preset}"
        offers = OFFERS.get(options.path, OFFERS["full"])
        return PathCapabilities(path="reference:" + options.path, max_len=max_len, max_len_from=source, offers=offers)


def _weights_config(name_or_path: str) -> dict[str, Any]:
    """The ModelConfig a trained weights file carries in its safetensors metadata (header only)."""
    shipped = WEIGHTS_DIR / f"{name_or_path}.safetensors"
    path = shipped if shipped.is_file() else Path(name_or_path).expanduser()
    with path.open("rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(size))
    meta = header.get("__metadata__") or {}
    doc = json.loads(meta["gate"]) if "gate" in meta else {"config": json.loads(meta.get("config", "{}"))}
    config: dict[str, Any] = doc["config"]
    return config
