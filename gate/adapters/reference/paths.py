"""DecodePaths through the reference decoder: a full pass, and cached paths over a static or
dynamic KV cache with one-shot or chunked prefill. Implements DecodePath, LayerTracing,
AttentionProbe, KVGeometry, LayoutBoundaries and, on cached paths, BatchedSessions and
ContinuousBatching (gate.protocols).
Faults come from gate.models.faults via `with_fault`.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict, Unpack

import torch

from gate.adapters.reference.options import Options
from gate.adapters.reference.sessions import CachedSession, FullSession, PaddedSession, SlotSession
from gate.errors import UnknownFault
from gate.models.faults import FAULT_NAMES, FAULTS, apply_fault
from gate.models.reference import KVCache, Layout, ModelConfig, SlotCache, Transformer, build_model
from gate.protocols import Session, subject_call
from gate.tensors import DTYPES

Chunk = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class Run(TypedDict):
    """What every path builder is called with: `fn(model, options, device=, dtype=, seed=)`."""

    device: str
    dtype: str
    seed: int


def build_model_for(options: Options, *, device: str, dtype: str, seed: int) -> Transformer:
    if options.weights is not None:  # trained weights carry their own config
        from gate.models.trained import load_trained

        return load_trained(options.weights, device=device, dtype=DTYPES[dtype])
    config = ModelConfig.from_preset(options.preset, **options.overrides())
    return build_model(config, seed=seed, device=device, dtype=DTYPES[dtype])


@dataclass
class ReferencePath:
    """One execution path through a built reference model."""

    name: str
    model: Transformer
    dtype: str
    device: str
    seed: int
    layout: Layout | None = None
    """None: no cache (full recompute)."""
    chunk_size: int | None = None
    """Tokens per model step when prefilling or appending (None: one shot)."""
    block_size: int = 16
    fault: str | None = None
    cache_hooks: list[Callable[[KVCache], None]] = field(default_factory=list)
    """Applied to every new cache (faults patch it here)."""
    session_hooks: list[Callable[[Any], Any]] = field(default_factory=list)
    """Wrap every new session (faults patch it here)."""

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def max_len(self) -> int:
        return self.config.max_len

    @property
    def uses_cache(self) -> bool:
        return self.layout is not None

    # -- DecodePath ------------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        config = json.dumps(self.config.as_dict(), sort_keys=True)
        weights = hashlib.sha256()
        for name, tensor in sorted(self.model.state_dict().items()):
            weights.update(name.encode())
            weights.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        return {
            "model": "gate.models.reference",
            "config": self.config.as_dict(),
            "config_sha256": hashlib.sha256(config.encode()).hexdigest(),
            "weights_sha256": weights.hexdigest(),
            "torch": torch.__version__,
            "seed": self.seed,
            "layout": self.layout,
            "chunk_size": self.chunk_size,
            "block_size": self.block_size,
            "fault": self.fault,
        }

    @torch.no_grad()
    def full_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        with subject_call(f"{type(self.model).__name__}.forward", length=0, tokens=int(tokens.shape[1])):
            logits: torch.Tensor = self.model(tokens.to(self.device))
        return logits.float()

    def make_cache(
        self,
        batch: int,
        *,
        n_layers: int | None = None,
        n_kv_heads: int | None = None,
        head_dim: int | None = None,
        dtype: torch.dtype | None = None,
    ) -> KVCache:
        """A new empty cache of this path's layout (model shape unless overridden)."""
        assert self.layout is not None
        cfg = self.config
        with subject_call(f"{KVCache.__name__}.empty", length=0):  # the library allocates its cache
            cache = KVCache.empty(
                n_layers or cfg.n_layers,
                batch,
                n_kv_heads or cfg.n_kv_heads,
                head_dim or cfg.head_dim,
                max_len=cfg.max_len,
                layout=self.layout,
                block_size=self.block_size,
                dtype=dtype or DTYPES[self.dtype],
                device=self.device,
            )
        for hook in self.cache_hooks:
            hook(cache)
        return cache

    def _hooked(self, session: Any) -> Any:
        """`session` wrapped by every session hook (faults and approximate caches)."""
        for hook in self.session_hooks:
            session = hook(session)
        return session

    def new_session(self, batch_size: int) -> Session:
        session = CachedSession(self, batch_size) if self.uses_cache else FullSession(self, batch_size)
        return self._hooked(session)  # type: ignore[no-any-return]

    def faults(self) -> tuple[str, ...]:
        return FAULT_NAMES if self.uses_cache else ("sliding-window-mask",)

    # -- BatchedSessions -------------------------------------------------------------------

    @property
    def padding_sides(self) -> tuple[str, ...]:
        """Cached paths pad on either side; the full pass keeps no per-row state to pad."""
        return ("left", "right") if self.uses_cache else ()

    def new_batched_session(self, batch_size: int, padding: str) -> PaddedSession:
        if padding not in self.padding_sides:
            raise ValueError(f"path {self.name} pads on {self.padding_sides or 'no side'}, not {padding!r}")
        return self._hooked(PaddedSession(self, batch_size, padding))  # type: ignore[no-any-return]

    # -- ContinuousBatching ----------------------------------------------------------------

    @property
    def continuous_batching(self) -> bool:
        """Cached paths batch continuously; the full pass keeps no per-request state."""
        return self.uses_cache

    def new_continuous_session(self, slots: int) -> SlotSession:
        if not self.continuous_batching:
            raise ValueError(f"path {self.name} does not batch continuously")
        cfg = self.config
        cache = SlotCache(
            cfg.n_layers,
            slots,
            cfg.n_kv_heads,
            cfg.head_dim,
            max_len=cfg.max_len,
            block_size=self.block_size,
            dtype=DTYPES[self.dtype],
            device=self.device,
        )
        for hook in self.cache_hooks:
            hook(cache)
        return SlotSession(self, cache)

    def with_fault(self, fault: str) -> ReferencePath:
        if fault not in self.faults():
            raise UnknownFault(f"path {self.name} cannot apply fault {fault!r} (known: {', '.join(self.faults())})")
        # a model fault patches the model, so it gets its own copy; a cache or session fault
        # leaves the model alone and shares it (copying it cost more than a small check's run)
        path = self._with(fault, model=copy.deepcopy(self.model) if FAULTS[fault].target == "model" else self.model)
        apply_fault(path, fault)
        return path

    def _with(self, fault: str, **changes: Any) -> ReferencePath:
        """A copy carrying `fault` too (in its name and `fault`), with hook lists of its own and `changes`."""
        hooks = {"cache_hooks": list(self.cache_hooks), "session_hooks": list(self.session_hooks)}
        faults = fault if self.fault is None else f"{self.fault}+{fault}"
        return replace(self, **{"name": f"{self.name}+{fault}", "fault": faults, **hooks, **changes})

    # -- KVGeometry ------------------------------------------------------------------------

    def kv_geometry(self) -> tuple[int, int, int]:
        return self.config.n_layers, self.config.n_kv_heads, self.config.head_dim

    # -- LayoutBoundaries ------------------------------------------------------------------

    def layout_edges(self) -> dict[str, tuple[int, ...]]:
        """Where this path changes shape, by kind: dynamic blocks, chunk edges, the window."""
        edges: dict[str, tuple[int, ...]] = {}
        if self.layout == "dynamic":
            edges["block"] = tuple(range(self.block_size, self.max_len, self.block_size))
        if self.chunk_size:
            edges["chunk"] = tuple(range(self.chunk_size, self.max_len, self.chunk_size))
        if self.config.window and self.config.window < self.max_len:
            edges["window"] = (self.config.window,)
        return edges

    def layout_boundaries(self) -> tuple[int, ...]:
        return tuple(sorted({b for edges in self.layout_edges().values() for b in edges}))

    # -- LayerTracing ----------------------------------------------------------------------

    @torch.no_grad()
    def layer_states(
        self, tokens: torch.Tensor, prefix_len: int, *, cuts: Sequence[int] = (), width: int = 1
    ) -> list[dict[str, torch.Tensor]]:
        """gate.protocols.LayerTracing: k and v are what attention actually READ during the appended
        step (a faulty read can be shorter or longer than prefix_len + width)."""
        tokens = tokens.to(self.device)
        session = self.new_session(tokens.shape[0])
        edges = [0, *sorted({c for c in cuts if 0 < c < prefix_len}), prefix_len]
        for start, end in itertools.pairwise(edges):
            if end > start:
                (session.prefill if start == 0 else session.append)(tokens[:, start:end])
        with _trace(self.model) as states:
            session.append(tokens[:, prefix_len : prefix_len + width])
        return states

    @torch.no_grad()
    def full_layer_states(self, tokens: torch.Tensor, prefix_len: int) -> list[dict[str, torch.Tensor]]:
        with _trace(self.model) as states:
            self.model(tokens[:, : prefix_len + 1].to(self.device))
        return states

    # -- AttentionProbe --------------------------------------------------------------------

    @torch.no_grad()
    def attention_probe(
        self, requests: Sequence[Sequence[Chunk]], *, poison_tail: bool = False
    ) -> list[list[torch.Tensor]]:
        core = self.model.blocks[0].attention.core
        q0, k0, _ = requests[0][0]
        cache = (
            self.make_cache(q0.shape[0], n_layers=1, n_kv_heads=k0.shape[1], head_dim=k0.shape[3], dtype=q0.dtype)
            if self.uses_cache
            else None
        )
        outputs: list[list[torch.Tensor]] = []
        for index, chunks in enumerate(requests):
            if index and cache is not None:
                with subject_call(f"{type(cache).__name__}.reset", length=cache.pos):
                    cache.reset()
            seen_k: list[torch.Tensor] = []
            seen_v: list[torch.Tensor] = []
            results = []
            for q, k, v in chunks:
                q, k, v = (t.to(self.device) for t in (q, k, v))
                if cache is None:  # no cache: recompute over everything so far
                    seen_k.append(k)
                    seen_v.append(v)
                    k_all, v_all = torch.cat(seen_k, dim=2), torch.cat(seen_v, dim=2)
                else:
                    if poison_tail:
                        cache.fill_unused(float("nan"))
                    start = cache.pos
                    with subject_call(f"{type(cache).__name__}.update", length=start, tokens=int(k.shape[2])):
                        k_all, v_all = cache.update(0, start, k, v)
                    cache.pos = start + k.shape[2]
                with subject_call(f"{type(core).__name__}.forward", length=int(k_all.shape[2]) - int(q.shape[2])):
                    results.append(core(q, k_all, v_all))
            outputs.append(results)
        return outputs


@contextmanager
def _trace(model: Transformer) -> Iterator[list[dict[str, torch.Tensor]]]:
    """Record, per layer, the K/V attention read ([B, H_kv, T_k, D]), the last position's query and
    attention output per head ([B, H, 1, D]) and its block output ([B, d_model]) during the calls
    inside the block (the last call wins)."""
    states: list[dict[str, torch.Tensor]] = [{} for _ in model.blocks]
    with ExitStack() as hooks:
        for i, layer in enumerate(model.blocks):

            def read(_mod: Any, args: tuple[Any, ...], out: torch.Tensor, i: int = i) -> None:
                states[i]["k"], states[i]["v"] = args[1].float().clone(), args[2].float().clone()
                # the last query's per-head query and attention output: which KV head each head read
                states[i]["q"], states[i]["attn"] = args[0][:, :, -1:].float().clone(), out[:, :, -1:].float().clone()

            def hidden(_mod: Any, _args: tuple[Any, ...], out: torch.Tensor, i: int = i) -> None:
                states[i]["hidden"] = out[:, -1].float().clone()

            hooks.enter_context(layer.attention.core.register_forward_hook(read))
            hooks.enter_context(layer.register_forward_hook(hidden))
        yield states


def build_full(model: Transformer, options: Options, **run: Unpack[Run]) -> ReferencePath:
    return ReferencePath(name="reference:full", model=model, block_size=options.block_size, **run)


def build_cached(model: Transformer, options: Options, **run: Unpack[Run]) -> ReferencePath:
    chunk = options.chunk_size if options.path == "chunked" else None
    name = f"reference:{options.path}" + (f"[{chunk}]" if chunk else "")
    layout: Layout = "dynamic" if options.path == "dynamic" else "static"
    return ReferencePath(name=name, model=model, block_size=options.block_size, layout=layout, chunk_size=chunk, **run)
