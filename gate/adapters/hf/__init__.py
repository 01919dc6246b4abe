"""The `hf` adapter: gate judges real Hugging Face transformers code.

A plugin registered like any third-party one (`gate.adapters` entry point `hf`). Importing this
package imports no torch and no transformers, so a manifest can be validated without them; `build`
imports the heavy modules.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from gate.adapters.hf.options import PRESET_MAX_POSITIONS, Options
from gate.protocols import PathCapabilities

if TYPE_CHECKING:
    from gate.protocols import DecodePath

__all__ = ["HFAdapter", "Options"]

OFFERS = {"assisted": ["SpeculativePath"], "prompt-lookup": ["SpeculativePath"], "prefix-reuse": ["PrefixCaching"]}
"""Capabilities by path, where they are not sessions'."""


class HFAdapter:
    """Builds paths through any `AutoModelForCausalLM`: a tiny preset or a local directory."""

    name: ClassVar[str] = "hf"
    Options: ClassVar[type[BaseModel]] = Options

    def build(self, options: BaseModel, *, device: str, dtype: str, seed: int) -> DecodePath:
        """Load the model and wrap it in the path the options name (heavy imports happen here)."""
        from gate.adapters.hf.build import build_path

        if not isinstance(options, Options):
            options = Options.model_validate(options.model_dump() if isinstance(options, BaseModel) else options)
        return build_path(options, device=device, dtype=dtype, seed=seed)

    def capabilities(self, options: BaseModel) -> PathCapabilities:
        """Longest sequence from the preset or the local directory's config.json (no transformers
        imported, no weights read); capabilities that depend on the installed release are left out."""
        if not isinstance(options, Options):
            options = Options.model_validate(options.model_dump())
        offers = OFFERS.get(options.path, ["sessions"])
        if options.path == "quantized" and options.backend in ("quanto", "hqq") and not options.beams:
            offers = [*offers, "QuantizedKV"]  # the QuantizedLayer read back (quant_state.py)
        name = f"hf:{options.path}:{options.model}" if options.path != "prefix-reuse" else f"hf:{options.model}"
        if options.is_preset:
            return PathCapabilities(
                path=name, max_len=PRESET_MAX_POSITIONS, max_len_from=f"preset {options.model}", offers=offers
            )
        config_file = Path(options.model).expanduser() / "config.json"
        try:
            config: dict[str, Any] = json.loads(config_file.read_text())
        except (OSError, ValueError):
            return PathCapabilities(path=name, max_len_from=f"{config_file} is not readable JSON", offers=offers)
        for doc in (config.get("text_config") or {}, config):
            for key in ("max_position_embeddings", "n_positions"):
                if isinstance(doc.get(key), int):
                    return PathCapabilities(
                        path=name, max_len=doc[key], max_len_from=f"{config_file}: {key}", offers=offers
                    )
        return PathCapabilities(path=name, max_len_from=f"{config_file} declares no maximum length", offers=offers)
