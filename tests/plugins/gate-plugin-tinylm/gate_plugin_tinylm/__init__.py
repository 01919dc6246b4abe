"""A third-party gate adapter for a small language model that is not gate's.

`tinylm.py` is the model as its authors would write it (learned positions, a KV cache that is a
list of growing tensors, a `bug` switch for the tests). This file is all gate needs: Options, a
DecodePath with sessions, and the two optional capabilities that buy more generic negative
controls (`reload_weights` on the path, `cache_length`/`crop` on sessions). It offers no faults of
its own: gate's protocol-level controls (gate.engine.generic_faults) give its checks their power.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field


class Options(BaseModel):
    """How to build one tinylm path."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    engine: Literal["kv-cache", "recompute"] = "kv-cache"
    """kv-cache: sessions keep K/V and append against it. recompute: every call runs the whole
    sequence again (no cache: gate's generic controls have nothing to act on)."""
    bug: Literal["none", "positions-restart", "head-roll"] = "none"
    """A planted bug in tinylm's own cache code (positions-restart: appended tokens are encoded
    from position 0; head-roll: in cached steps query head h reads head h + 1's keys and values)."""
    layers: int = Field(default=2, ge=1, le=8)
    """Decoder layers."""
    max_len: int = Field(default=192, ge=8, le=4096)
    """Longest sequence (learned position table size)."""
    trace: bool = False
    """Offer LayerTracing (gate.protocols): per layer the K/V attention read, the last query's
    per-head query and attention output and the block output, recorded by forward hooks on
    tinylm's modules (the model code is unchanged); the prefix can be replayed in a check's cuts."""
    probe: bool = False
    """Offer AttentionProbe (gate.protocols): given q, k, v run through tinylm's own cache concatenation,
    causal mask offset and attention call (the model's `attention` function, its head-roll bug
    included); tinylm plants no mask faults, so none of mask-oracle's controls can run on it."""


class TinyLMAdapter:
    """Builds DecodePaths over tinylm.TinyLM; both paths of a manifest share weights via the seed."""

    name: ClassVar[str] = "tinylm"
    Options: ClassVar[type[BaseModel]] = Options

    def build(self, options: BaseModel, *, device: str, dtype: str, seed: int) -> Any:
        import torch

        from gate_plugin_tinylm.tinylm import Config, TinyLM

        opts = options if isinstance(options, Options) else Options.model_validate(options.model_dump())
        config = Config(n_layers=opts.layers, max_len=opts.max_len)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = TinyLM(config).to(device=device, dtype=getattr(torch, dtype)).eval()
        if opts.probe:
            return (TinyLMTracingProbePath if opts.trace else TinyLMProbePath)(model, opts, device)
        return (TinyLMTracingPath if opts.trace else TinyLMPath)(model, opts, device)


class TinyLMPath:
    """gate.protocols.DecodePath over a TinyLM."""

    dtype: str

    def __init__(self, model: Any, options: Options, device: str) -> None:
        self.model, self.options, self.device = model, options, device
        self.name = f"tinylm:{options.engine}" + ("" if options.bug == "none" else f"+{options.bug}")
        self.vocab_size, self.max_len = model.config.vocab_size, model.config.max_len
        self.uses_cache = options.engine == "kv-cache"
        self.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        self._built = {k: v.clone() for k, v in model.state_dict().items()}

    def identity(self) -> dict[str, Any]:
        digest = hashlib.sha256()
        for key, tensor in sorted(self.model.state_dict().items()):
            digest.update(
                key.encode() + tensor.detach().cpu().contiguous().view(-1).view(dtype=_u8()).numpy().tobytes()
            )
        config = json.dumps(self.model.config.__dict__, sort_keys=True)
        return {
            "model": "gate_plugin_tinylm.tinylm",
            "config_sha256": hashlib.sha256(config.encode()).hexdigest(),
            "weights_sha256": digest.hexdigest(),
            "engine": self.options.engine,
            "bug": self.options.bug,
        }

    def full_logits(self, tokens: Any) -> Any:
        import torch

        with torch.no_grad():
            return self.model(tokens.to(self.device)).float()

    def new_session(self, batch_size: int) -> Any:
        from gate_plugin_tinylm.tinylm import CachedSession, RecomputeSession

        if self.uses_cache:
            bug = self.options.bug
            return CachedSession(self.model, restart_positions=bug == "positions-restart", head_roll=bug == "head-roll")
        return RecomputeSession(self.model)

    def faults(self) -> tuple[str, ...]:
        return ()

    def with_fault(self, fault: str) -> Any:
        from gate.errors import UnknownFault

        raise UnknownFault(f"tinylm plants no faults of its own ({fault!r})")

    def reload_weights(self, version: int) -> None:
        """0: the weights as built; other versions: every weight nudged by a seeded perturbation."""
        import torch

        state = {k: v.clone() for k, v in self._built.items()}
        if version:
            gen = torch.Generator().manual_seed(version)
            for value in state.values():
                if value.is_floating_point():
                    value.add_(0.05 * torch.randn(value.shape, generator=gen).to(value))
        self.model.load_state_dict(state)


class TinyLMTracingPath(TinyLMPath):
    """A TinyLMPath that is also a gate.protocols.LayerTracing (option `trace: true`)."""

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
                    session.append(tokens[:, start:end])
            with _trace(self.model) as states:
                session.append(tokens[:, prefix_len : prefix_len + width])
        return states

    def full_layer_states(self, tokens: Any, prefix_len: int) -> list[dict[str, Any]]:
        """The same quantities from one full pass over tokens[:, : prefix_len + 1]."""
        import torch

        with torch.no_grad(), _trace(self.model) as states:
            self.model(tokens[:, : prefix_len + 1].to(self.device))
        return states


class TinyLMProbePath(TinyLMPath):
    """A TinyLMPath that is also a gate.protocols.AttentionProbe (option `probe: true`)."""

    def attention_probe(self, requests: Sequence[Sequence[tuple[Any, Any, Any]]], *, poison_tail: bool = False) -> Any:
        """Each request's chunks through tinylm's attention over a cache that grows by concatenation
        (it allocates no tail, so there is nothing to poison); grouped KV heads are shared by their
        query heads. A fresh cache per request is tinylm's reset."""
        import torch

        from gate_plugin_tinylm.tinylm import attention

        outputs = []
        for chunks in requests:
            past = None
            answers = []
            for q, k, v in chunks:
                groups = q.shape[1] // k.shape[1]
                k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
                with torch.no_grad():
                    y, past = attention(q, k, v, past, self.options.bug == "head-roll")
                answers.append(y)
            outputs.append(answers)
        return outputs


class TinyLMTracingProbePath(TinyLMTracingPath, TinyLMProbePath):
    """Both options: `trace: true` and `probe: true`."""


@contextmanager
def _trace(model: Any) -> Iterator[list[dict[str, Any]]]:
    """Per layer (the last call wins): `k`, `v` as attention read them ([B, H, S, D], what the
    attention module returns as its cache), the last query's `q` (from the qkv projection) and
    `attn` (the per-head output the out projection receives), both [B, H, 1, D], and `hidden`,
    the block output at the last token ([B, d_model])."""
    states: list[dict[str, Any]] = [{} for _ in model.blocks]
    handles = []
    for i, block in enumerate(model.blocks):
        heads = block.attn.n_heads

        def query(_mod: Any, _args: Any, out: Any, i: int = i, heads: int = heads) -> None:
            states[i]["q"] = _last_per_head(out[..., : out.shape[-1] // 3], heads)

        def read(_mod: Any, _args: Any, out: Any, i: int = i) -> None:
            k, v = out[1]
            states[i]["k"], states[i]["v"] = k.float().clone(), v.float().clone()

        def attended(_mod: Any, args: Any, i: int = i, heads: int = heads) -> None:
            states[i]["attn"] = _last_per_head(args[0], heads)

        def hidden(_mod: Any, _args: Any, out: Any, i: int = i) -> None:
            states[i]["hidden"] = out[0][:, -1].float().clone()

        handles += [
            block.attn.qkv.register_forward_hook(query),
            block.attn.register_forward_hook(read),
            block.attn.out.register_forward_pre_hook(attended),
            block.register_forward_hook(hidden),
        ]
    try:
        yield states
    finally:
        for handle in handles:
            handle.remove()


def _last_per_head(x: Any, heads: int) -> Any:
    """[B, T, H * D] -> the last row per head, [B, H, 1, D]."""
    return x[:, -1:].reshape(x.shape[0], 1, heads, -1).transpose(1, 2).float().clone()


def _u8() -> Any:
    import torch

    return torch.uint8
