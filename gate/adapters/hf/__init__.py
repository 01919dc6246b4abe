"""The `hf` adapter: gate judges real Hugging Face transformers code.

A plugin registered like any third-party one (`gate.adapters` entry point `hf`). Importing this
package imports no torch and no transformers, so a manifest can be validated without them; `build`
imports the heavy modules.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from gate.adapters.hf.options import PRESET_MAX_POSITIONS, Options
from gate.errors import AdapterUnavailable
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
        """Load the model and wrap it in the path the options name (heavy imports happen here);
        AdapterUnavailable when this machine cannot run it (and says why)."""
        import torch

        from gate.adapters.hf import compat, presets
        from gate.adapters.hf.paths import HFPath
        from gate.adapters.hf.probe import PROBE_KINDS, ProbingHFPath, TracingHFPath

        if not isinstance(options, Options):
            options = Options.model_validate(options.model_dump() if isinstance(options, BaseModel) else options)
        compat.check_version()
        if str(device).startswith("cuda") and not torch.cuda.is_available():
            raise AdapterUnavailable(f"device {device!r} requested but torch sees no CUDA device here")
        loaded = presets.load(
            options.model, options.attn_implementation, device=device, dtype=dtype, seed=seed, init_std=options.init_std
        )
        path: HFPath
        if options.path in ("generate-static", "generate-paged", "generate-cache"):
            from gate.adapters.hf.generation import GeneratePath

            path = GeneratePath(loaded, options, device=device, dtype=dtype, seed=seed)
        elif options.path in ("assisted", "prompt-lookup"):
            from gate.adapters.hf.speculative import HFSpeculativePath

            path = HFSpeculativePath(loaded, options, device=device, dtype=dtype, seed=seed)
        elif options.path == "kvpress":
            from gate.adapters.hf.kvpress_path import PressPath

            path = PressPath(loaded, options, device=device, dtype=dtype, seed=seed)
        elif options.path == "prefix-reuse":
            from gate.adapters.hf.prefix_worker import PrefixReuseProbingPath, PrefixReuseTracingPath

            kind = PrefixReuseProbingPath if compat.probe_supported() else PrefixReuseTracingPath
            path = kind(loaded, options, device=device, dtype=dtype, seed=seed)
        elif options.path == "full":
            path = HFPath(loaded, options, device=device, dtype=dtype, seed=seed)
        elif options.path == "quantized" and options.backend in ("quanto", "hqq") and not options.beams:
            from gate.adapters.hf.quant_state import QuantizedHFPath

            path = QuantizedHFPath(loaded, options, device=device, dtype=dtype, seed=seed)
        elif options.path in PROBE_KINDS and compat.probe_supported():
            path = ProbingHFPath(loaded, options, device=device, dtype=dtype, seed=seed)
        else:
            path = TracingHFPath(loaded, options, device=device, dtype=dtype, seed=seed)
        return path.with_fault(options.fault) if options.fault else path

    def capabilities(self, options: BaseModel) -> PathCapabilities:
        """Longest sequence from the preset or the local directory's config.json (no transformers
        imported, no weights read); capabilities that depend on the installed release are left out."""
        if not isinstance(options, Options):
            options = Options.model_validate(options.model_dump())
        offers = OFFERS.get(options.path, ["sessions"])
        if options.path == "quantized" and options.backend in ("quanto", "hqq") and not options.beams:
            offers = [*offers, "QuantizedKV"]  # the QuantizedLayer read back (quant_state.py)
        name = f"hf:{options.path}:{options.model}" if options.path != "prefix-reuse" else f"hf:{options.model}"
        stated = partial(PathCapabilities, path=name, offers=offers)
        if options.is_preset:
            return stated(max_len=PRESET_MAX_POSITIONS, max_len_from=f"preset {options.model}")
        config_file = Path(options.model).expanduser() / "config.json"
        try:
            config: dict[str, Any] = json.loads(config_file.read_text())
        except (OSError, ValueError):
            return stated(max_len_from=f"{config_file} is not readable JSON")
        for doc in (config.get("text_config") or {}, config):
            for key in ("max_position_embeddings", "n_positions"):
                if isinstance(doc.get(key), int):
                    return stated(max_len=doc[key], max_len_from=f"{config_file}: {key}")
        return stated(max_len_from=f"{config_file} declares no maximum length")
