"""The `hf` adapter: gate judges real Hugging Face transformers code.

One small plugin, registered like any third-party one:

    [project.entry-points."gate.adapters"]
    hf = "gate.adapters.hf:HFAdapter"

Importing this package imports no torch and no transformers (only the Options model), so a
manifest can be validated without them; `build` imports the heavy modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel

from gate.adapters.hf.options import Options

if TYPE_CHECKING:
    from gate.protocols import DecodePath

__all__ = ["HFAdapter", "Options"]


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
