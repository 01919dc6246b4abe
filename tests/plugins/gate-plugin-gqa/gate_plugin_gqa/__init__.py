"""A third-party gate adapter for gqa.GQALM, written from docs/plugins.md and gate.protocols alone.

It offers the protocol's minimum: a DecodePath with sessions. No faults of its own, no attention
probe, no weight reloading, no cache cropping: every negative control its checks get is one of
gate's generic stand-ins (gate.engine.generic_faults), chosen at run time. With `trace: true` the
path is also a LayerTracing (per layer: the K/V attention read, the last query's per-head query
and attention output, the block output), watched through forward hooks on the model's modules,
so a failed check's diagnosis can compare layers; a layer trace is not a probe.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from gate_plugin_gqa.bugs import Bug


class Options(BaseModel):
    """How to build one gqa path."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    engine: Literal["static-cache", "recompute"] = "static-cache"
    """static-cache: sessions write K/V into a preallocated, NaN-poisoned buffer and read its valid
    prefix. recompute: every call runs the whole sequence again."""
    bug: Bug = "none"
    """A mistake planted in gqa's own session code (see gate_plugin_gqa.bugs.BUGS)."""
    layers: int = Field(default=2, ge=1, le=8)
    """Decoder layers."""
    max_len: int = Field(default=8256, ge=16, le=16384)
    """Static cache capacity (positions)."""
    prefill_chunk: int = Field(default=0, ge=0)
    """Run each call longer than this as consecutive chunks of at most this many tokens (chunked
    prefill); 0: each call in one piece."""
    probe: bool = False
    """Offer AttentionProbe (gate.protocols): given q, k, v run through the session's own cache, masks,
    chunking and attention core (gate_plugin_gqa.gqa.probe), its bug included."""
    trace: bool = False
    """Offer LayerTracing (gate.protocols): per-layer K/V read, per-head query and attention output and
    block output, recorded by forward hooks on gqa's modules (the model code is unchanged)."""


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
        if opts.probe:
            return (GQATracingProbePath if opts.trace else GQAProbePath)(model, opts, device)
        return (GQATracingPath if opts.trace else GQAPath)(model, opts, device)


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
            return StaticSession(self.model, batch_size, self.options.bug, self.options.prefill_chunk)
        return RecomputeSession(self.model)

    def faults(self) -> tuple[str, ...]:
        return ()

    def with_fault(self, fault: str) -> Any:
        from gate.errors import UnknownFault

        raise UnknownFault(f"gqa plants no faults of its own ({fault!r})")


class GQATracingPath(GQAPath):
    """A GQAPath that is also a gate.protocols.LayerTracing (option `trace: true`)."""

    def layer_states(
        self, tokens: Any, prefix_len: int, *, cuts: Sequence[int] = (), width: int = 1
    ) -> list[dict[str, Any]]:
        """Per layer, what attention read and returned during the appended step of `width` tokens at
        `prefix_len`, after the prefix went in as a prefill up to the first of `cuts` and one append
        per following cut (the schedule a check ran)."""
        import torch

        tokens = tokens.to(self.device)
        session = self.new_session(tokens.shape[0])
        edges = [0, *sorted({c for c in cuts if 0 < c < prefix_len}), prefix_len]
        with torch.no_grad():
            for start, end in itertools.pairwise(edges):
                if end > start:
                    (session.prefill if start == 0 else session.append)(tokens[:, start:end])
            with _trace(self.model) as states:
                step = tokens[:, prefix_len : prefix_len + width]
                (session.prefill if prefix_len == 0 else session.append)(step)
        return states

    def full_layer_states(self, tokens: Any, prefix_len: int) -> list[dict[str, Any]]:
        """The same quantities from one full pass over tokens[:, : prefix_len + 1]."""
        with _trace(self.model) as states:
            self.model(tokens[:, : prefix_len + 1].to(self.device))
        return states


class GQAProbePath(GQAPath):
    """A GQAPath that is also a gate.protocols.AttentionProbe (option `probe: true`)."""

    def attention_probe(self, requests: Sequence[Sequence[tuple[Any, Any, Any]]], *, poison_tail: bool = False) -> Any:
        """Each request's chunks through gqa's session code (gate_plugin_gqa.gqa.probe); its cache
        tail always holds NaN, so `poison_tail` changes nothing."""
        from gate_plugin_gqa.gqa import probe

        return [
            probe(
                self.model,
                [tuple(t.to(self.device) for t in c) for c in chunks],
                self.options.bug,
                self.options.prefill_chunk,
            )
            for chunks in requests
        ]


class GQATracingProbePath(GQATracingPath, GQAProbePath):
    """Both options: `trace: true` and `probe: true`."""


@contextmanager
def _trace(model: Any) -> Iterator[list[dict[str, Any]]]:
    """Per layer (the last call inside the block wins): `k`, `v` as attention read them (rotated,
    [B, Hkv, S, D]), the last query's `q` and `attn` per head ([B, H, 1, D]) from the attention
    core's inputs and output, and `hidden`, the block's output at the last token ([B, d_model]),
    which is what the next block's first norm (or the final norm) receives."""
    blocks = list(model.blocks)
    states: list[dict[str, Any]] = [{} for _ in blocks]
    handles = []
    for i, block in enumerate(blocks):

        def read(_mod: Any, args: tuple[Any, ...], out: Any, i: int = i) -> None:
            q, k, v = args[0], args[1], args[2]
            states[i].update(
                k=k.float().clone(),
                v=v.float().clone(),
                q=q[:, :, -1:].float().clone(),
                attn=out[:, :, -1:].float().clone(),
            )

        def hidden(_mod: Any, args: tuple[Any, ...], i: int = i) -> None:
            states[i]["hidden"] = args[0][:, -1].float().clone()

        handles.append(block.attn.core.register_forward_hook(read))
        after = blocks[i + 1].n1 if i + 1 < len(blocks) else model.norm
        handles.append(after.register_forward_pre_hook(hidden))
    try:
        yield states
    finally:
        for handle in handles:
            handle.remove()
