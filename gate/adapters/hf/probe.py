"""`attention_probe` (gate.protocols.AttentionProbe) for hf cache paths: the mask oracle's q, k, v go
through transformers' own code. Per chunk, as a decoder layer does it: the masking utils build the mask
from the path's Cache *before* the write, `cache.update(k, v, 0)` writes the chunk, and the configured
attention function reads what the cache returned under that mask. Faults act through the `Tamper` hooks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from gate.adapters.hf import compat
from gate.adapters.hf.sessions import CacheSession
from gate.adapters.hf.tracing import TracingHFPath

Chunk = tuple[torch.Tensor, torch.Tensor, torch.Tensor]

PROBE_KINDS = ("dynamic", "static", "sliding-window", "offloaded", "prefix-reuse")
"""Kinds whose cache holds K/V exactly as written, so the oracle's exact answers apply (a quantized
cache is approximate by design; a press and generate() choose their own K/V)."""


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
        layer_types = getattr(config, "layer_types", None) or ["full_attention"]
        make = (
            compat.masking_utils.create_sliding_window_causal_mask
            if layer_types[0] == "sliding_attention"
            else compat.masking_utils.create_causal_mask
        )
        embeds = torch.empty(self.batch_size, n, 1, dtype=q.dtype, device=self.device)  # shape, dtype only
        return compat.causal_mask(
            make,
            config=config,
            inputs_embeds=embeds,
            attention_mask=planted,
            cache=self.cache,
            positions=self.pending_positions,
        )


TAIL_POISON = 1.0e4
"""What `poison_tail` writes into a static cache's unused slots: finite, far outside the fixture's
values. A StaticLayer hands the attention function its whole buffer and masks the tail, so NaN there
would turn every output NaN (0 * NaN); a finite poison changes the answer only where the mask fails."""


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
            results = []
            for c, (q, k, v) in enumerate(chunks):
                q, k, v = (t.to(self.device) for t in (q, k, v))
                results.append(session.step("prefill" if c == 0 else "append", q, k, v, poison_tail))
            outputs.append(results)
        return outputs
