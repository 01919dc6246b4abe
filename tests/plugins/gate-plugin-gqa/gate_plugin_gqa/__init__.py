"""A third-party gate adapter for gqa.GQALM, written from docs/plugins.md and gate.protocols alone.

It offers the protocol's minimum: a DecodePath with sessions. No faults of its own, no attention
probe, no weight reloading, no cache cropping: every negative control its checks get is one of
gate's generic stand-ins (gate.engine.generic_faults), chosen at run time.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field


class Options(BaseModel):
    """How to build one gqa path."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    engine: Literal["static-cache", "recompute"] = "static-cache"
    """static-cache: sessions write K/V into a preallocated, NaN-poisoned buffer and read its valid
    prefix. recompute: every call runs the whole sequence again."""
    bug: Literal["none", "chunk-mask-origin", "kv-head-map", "reset-position", "read-past-end"] = "none"
    """A mistake planted in gqa's own session code (see gate_plugin_gqa.gqa.BUGS)."""
    layers: int = Field(default=2, ge=1, le=8)
    """Decoder layers."""
    max_len: int = Field(default=8256, ge=16, le=16384)
    """Static cache capacity (positions)."""


class GQAAdapter:
    """Builds DecodePaths over gqa.GQALM; both paths of a manifest share weights via the seed."""

    name: ClassVar[str] = "gqa"
    Options: ClassVar[type[BaseModel]] = Options

    def build(self, options: BaseModel, *, device: str, dtype: str, seed: int) -> Any:
        import torch

        from gate_plugin_gqa.gqa import GQALM, Config

        opts = options if isinstance(options, Options) else Options.model_validate(options.model_dump())
        config = Config(n_layers=opts.layers, max_len=opts.max_len)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = GQALM(config).to(device=device, dtype=getattr(torch, dtype)).eval()
        return GQAPath(model, opts, device)


class GQAPath:
    """gate.protocols.DecodePath over a GQALM."""

    dtype: str

    def __init__(self, model: Any, options: Options, device: str) -> None:
        self.model, self.options, self.device = model, options, device
        self.name = f"gqa:{options.engine}" + ("" if options.bug == "none" else f"+{options.bug}")
        self.vocab_size, self.max_len = model.config.vocab_size, model.config.max_len
        self.uses_cache = options.engine == "static-cache"
        self.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")

    def identity(self) -> dict[str, Any]:
        import torch

        digest = hashlib.sha256()
        for key, tensor in sorted(self.model.state_dict().items()):
            raw = tensor.detach().cpu().contiguous().view(-1).view(dtype=torch.uint8)
            digest.update(key.encode() + raw.numpy().tobytes())
        config = json.dumps(self.model.config.__dict__, sort_keys=True)
        return {
            "model": "gate_plugin_gqa.gqa",
            "config_sha256": hashlib.sha256(config.encode()).hexdigest(),
            "weights_sha256": digest.hexdigest(),
            "engine": self.options.engine,
            "bug": self.options.bug,
        }

    def full_logits(self, tokens: Any) -> Any:
        return self.model(tokens.to(self.device)).float()

    def new_session(self, batch_size: int) -> Any:
        from gate_plugin_gqa.gqa import RecomputeSession, StaticSession

        if self.uses_cache:
            return StaticSession(self.model, batch_size, self.options.bug)
        return RecomputeSession(self.model)

    def faults(self) -> tuple[str, ...]:
        return ()

    def with_fault(self, fault: str) -> Any:
        from gate.errors import UnknownFault

        raise UnknownFault(f"gqa plants no faults of its own ({fault!r})")
