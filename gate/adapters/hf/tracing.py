"""The tracing Hugging Face path (gate.protocols.LayerTracing): per layer, the cache's K/V, the layer's
output and the last query and per-head output of the model's own attention function, captured around
one forward without changing its answers. The probe, quantized and prefix-reuse paths build on it."""

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
