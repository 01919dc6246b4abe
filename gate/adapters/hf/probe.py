"""The tracing and probing Hugging Face paths, which see through the model's own code.

`TracingHFPath` (gate.protocols.LayerTracing): per layer, the cache's K/V, the layer's output and the
last query and per-head output of the model's own attention function, captured around one forward
without changing its answers. The probe, quantized and prefix-reuse paths build on it.

`ProbingHFPath.attention_probe` (gate.protocols.AttentionProbe): the mask oracle's q, k, v go through
transformers' own code. Per chunk, as a decoder layer does it: the masking utils build the mask from the
path's Cache *before* the write, `cache.update(k, v, 0)` writes the chunk, and the configured attention
function reads what the cache returned under that mask. Faults act through the `Tamper` hooks.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import torch

from gate.adapters.hf import compat
from gate.adapters.hf.paths import HFPath
from gate.adapters.hf.presets import decoder_layers
from gate.adapters.hf.sessions import CacheSession


class TracingHFPath(HFPath):
    """A cache path that also offers per-layer states (gate.protocols.LayerTracing)."""

    def layer_states(
        self, tokens: torch.Tensor, prefix_len: int, *, cuts: Sequence[int] = (), width: int = 1
    ) -> list[dict[str, torch.Tensor]]:
        """gate.protocols.LayerTracing through this path's sessions: k, v of the cache [B, H_kv, kept, D],
        and `q`, `attn` [B, H, 1, D] only where the attention function was seen (_capture_attention)."""
        session = self.new_session(tokens.shape[0])
        assert isinstance(session, CacheSession)
        edges = [*sorted({c for c in cuts if 0 < c < prefix_len}), prefix_len]
        session.prefill(tokens[:, : edges[0]])
        for start, end in itertools.pairwise(edges):
            session.append(tokens[:, start:end])
        with _capture_layer_outputs(self.model) as hidden, _capture_attention(self.model) as read:
            session.append(tokens[:, prefix_len : prefix_len + width])
        cache: Any = session.cache
        rows = getattr(session, "tracked_rows", None)  # a beam session: the requests' hypothesis rows

        def pick(t: torch.Tensor) -> torch.Tensor:
            return t if rows is None else t.index_select(0, rows.to(t.device))

        return [
            {"k": pick(k).float(), "v": pick(v).float(), "hidden": pick(h)[:, -1].float()}
            | {name: pick(t) for name, t in read.get(i, {}).items()}
            for i, ((k, v), h) in enumerate(
                zip((compat.layer_kv(cache, i) for i in range(len(cache.layers))), hidden, strict=True)
            )
        ]

    def full_layer_states(self, tokens: torch.Tensor, prefix_len: int) -> list[dict[str, torch.Tensor]]:
        """The same quantities from one full pass over tokens[:, : prefix_len + 1]."""
        cache = compat.dynamic_cache(self.model.config)
        with torch.no_grad(), _capture_layer_outputs(self.model) as hidden, _capture_attention(self.model) as read:
            compat.forward(self.model, tokens[:, : prefix_len + 1].to(self.device), cache, None)
        return [
            {"k": k.float(), "v": v.float(), "hidden": h[:, -1].float()} | read.get(i, {})
            for i, ((k, v), h) in enumerate(
                zip((compat.layer_kv(cache, i) for i in range(len(cache.layers))), hidden, strict=True)
            )
        ]


@contextmanager
def _capture_attention(model: Any) -> Iterator[dict[int, dict[str, torch.Tensor]]]:
    """Per layer index, the last query `q` and per-head attention output `attn` ([B, H, 1, D]) the model's
    attention function (wrapped for the duration) was given and returned during the next forward; `q` is
    scaled so that 1/sqrt(D) applies the model's own `scaling`. Layers with no `layer_idx` record nothing."""
    seen: dict[int, dict[str, torch.Tensor]] = {}
    original = compat.attention_function(model)

    def traced(
        module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args: Any, **kwargs: Any
    ) -> Any:
        result = original(module, query, key, value, *args, **kwargs)
        index = getattr(module, "layer_idx", None)
        out = result[0] if isinstance(result, tuple) else result
        if isinstance(index, int) and out.dim() == 4 and out.shape[1] == query.shape[2]:
            scaling = kwargs.get("scaling") or query.shape[-1] ** -0.5
            seen[index] = {
                "q": (query[:, :, -1:].float() * (scaling * query.shape[-1] ** 0.5)).clone(),
                "attn": out[:, -1:].transpose(1, 2).float().clone(),  # [B, T, H, D] -> the last query per head
            }
        return result

    impl = model.config._attn_implementation
    if impl != "eager" and impl in compat.ATTENTION_FUNCTIONS:
        local = compat.ATTENTION_FUNCTIONS._local_mapping
        before = local.get(impl)
        local[impl] = traced
        try:
            yield seen
        finally:
            if before is None:
                local.pop(impl, None)
            else:
                local[impl] = before
        return
    modules = {sys.modules[type(m).__module__] for m in model.modules() if hasattr(m, "layer_idx")}
    modules = {m for m in modules if getattr(m, "eager_attention_forward", None) is original}
    for module in modules:
        module.eager_attention_forward = traced  # type: ignore[attr-defined]
    try:
        yield seen
    finally:
        for module in modules:
            module.eager_attention_forward = original  # type: ignore[attr-defined]


@contextmanager
def _capture_layer_outputs(model: Any) -> Iterator[list[torch.Tensor]]:
    """Record each decoder block's output hidden states [B, n, d] during the next forward."""
    captured: list[torch.Tensor] = []

    def hook(_module: Any, _args: Any, output: Any) -> None:
        captured.append((output[0] if isinstance(output, tuple) else output).detach())

    with ExitStack() as hooks:
        for layer in decoder_layers(model):
            hooks.enter_context(layer.register_forward_hook(hook))
        yield captured


Chunk = tuple[torch.Tensor, torch.Tensor, torch.Tensor]

PROBE_KINDS = ("dynamic", "static", "sliding-window", "offloaded", "prefix-reuse")
"""Kinds whose cache holds K/V exactly as written, so the oracle's exact answers apply."""


class ProbeAttention(torch.nn.Module):
    """What transformers' attention functions read from their module, with the oracle's head counts."""

    def __init__(self, config: Any, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.config = config
        self.num_key_value_groups = heads // kv_heads
        self.is_causal = True
        self.layer_idx = 0
        self.eval()


class ProbeSession(CacheSession):
    """One oracle request against the path's cache, offering the state a `Tamper` hook reads and edits."""

    def __init__(self, path: ProbingHFPath, batch_size: int) -> None:
        super().__init__(path, batch_size)
        self.cache = path.make_cache(batch_size)
        self.positions_from_cache = True
        """No position encoding here: the cache's own counter is the only position state."""
        self.chunk: tuple[torch.Tensor, torch.Tensor] | None = None
        """The K/V [B, H_kv, n, D] of the chunk being written (a cross-request fault replays it)."""

    def other_request_cache(self) -> Any:
        """The chunk just written into a new cache, each batch row taking the next row's K/V."""
        assert self.chunk is not None
        k, v = self.chunk
        decoy = self.path.make_cache(self.batch_size)
        decoy.update(k.roll(-1, dims=0), v.roll(-1, dims=0), 0)
        return decoy

    def step(self, phase: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, poison_tail: bool) -> torch.Tensor:
        """One chunk: q [B, H, n, D], k/v [B, H_kv, n, D] -> attention output [B, H, n, D]."""
        q, k, v = (t.to(self.device) for t in (q, k, v))
        tamper = self.path.tamper
        n = q.shape[2]
        positions = torch.arange(self.pos, self.pos + n, device=self.device).expand(self.batch_size, n)
        self.pending_positions = tamper.positions(phase, positions)
        if poison_tail:
            poison_unused(self.cache, k, v)
        tamper.before_forward(phase, self, n)
        mask = self._mask(phase, q, n)
        self.chunk = (k, v)
        cache: Any = self.cache
        keys, values = cache.update(k, v, 0)  # what the layer reads: all of it, a static buffer included
        module = ProbeAttention(self.model.config, q.shape[1], k.shape[1])
        out, _weights = compat.attention_function(self.model)(
            module, q, keys, values, mask, scaling=q.shape[-1] ** -0.5
        )
        self.pos += n
        tamper.after_write(phase, self, n)
        result: torch.Tensor = out.transpose(1, 2)  # the functions return [B, n, H, D]
        return result

    def _mask(self, phase: str, q: torch.Tensor, n: int) -> Any:
        """transformers' mask for the next n queries against this cache (a fault's 4D mask goes through as is)."""
        planted = self.path.tamper.attention_mask(phase, self, n)
        if planted is not None:
            planted = planted.to(q.dtype)
        config = self.model.config
        sliding = (getattr(config, "layer_types", None) or ["full_attention"])[0] == "sliding_attention"
        masking = compat.masking_utils
        return compat.causal_mask(
            masking.create_sliding_window_causal_mask if sliding else masking.create_causal_mask,
            config=config,
            inputs_embeds=torch.empty(self.batch_size, n, 1, dtype=q.dtype, device=self.device),  # shape, dtype only
            attention_mask=planted,
            cache=self.cache,
            positions=self.pending_positions,
        )


TAIL_POISON = 1.0e4
"""What `poison_tail` writes into a static cache's unused slots: finite (NaN under a zero attention
weight would still turn every output NaN), far outside the fixture's values."""


def poison_unused(cache: Any, k: torch.Tensor, v: torch.Tensor) -> None:
    """TAIL_POISON into the allocated-but-unused slots of a static cache (allocating it first)."""
    for layer in cache.layers:
        if not isinstance(layer, compat.cache_utils.StaticLayer):
            continue
        if not layer.is_initialized:
            layer.lazy_initialization(k, v)
        used = int(layer.get_seq_length())
        layer.keys[:, :, used:] = TAIL_POISON
        layer.values[:, :, used:] = TAIL_POISON


class ProbingHFPath(TracingHFPath):
    """A cache path that also runs the mask oracle through its cache (gate.protocols.AttentionProbe)."""

    @torch.no_grad()
    def attention_probe(
        self, requests: Sequence[Sequence[Chunk]], *, poison_tail: bool = False
    ) -> list[list[torch.Tensor]]:
        """Each request in order through one session, reset between requests by the path's own reset."""
        session = ProbeSession(self, requests[0][0][0].shape[0])
        outputs: list[list[torch.Tensor]] = []
        for index, chunks in enumerate(requests):
            if index:
                self.tamper.reset(session)
            outputs.append(
                [session.step("prefill" if c == 0 else "append", *qkv, poison_tail) for c, qkv in enumerate(chunks)]
            )
        return outputs
