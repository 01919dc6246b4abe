"""DecodePath implementations over one transformers model.

`HFPath.kind` picks the cache (or the generation loop) a session runs through; `with_fault` returns a
copy whose sessions consult a fault's `Tamper` and share its model (a fault never edits weights for
good); the reference and candidate of a run never share a model.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from typing import Any

import torch

from gate._util.versions import installed_versions
from gate.adapters.hf import compat
from gate.adapters.hf.beams import BeamSession
from gate.adapters.hf.continuous import ContinuousHFSession
from gate.adapters.hf.faults import (
    BEAM_FAULTS,
    BLOCK,
    CONTINUOUS_FAULTS,
    FAULTS,
    PADDING_FAULTS,
    REUSE_FAULTS,
    Tamper,
    tamper,
)
from gate.adapters.hf.options import Options
from gate.adapters.hf.presets import LoadedModel, kv_shape, max_positions
from gate.adapters.hf.sessions import (
    CacheSession,
    PaddedSession,
    PrefixReuseSession,
    PrefixStore,
    RecomputeSession,
)
from gate.errors import AdapterUnavailable, UnknownFault
from gate.protocols import Session, subject_call

CACHE_KINDS = ("dynamic", "static", "quantized", "sliding-window", "offloaded", "prefix-reuse", "kvpress")
"""Kinds whose sessions run the model's forward against a cache object the adapter builds."""

PADDED_KINDS = ("dynamic", "static", "offloaded")
"""Kinds that pad a batch of requests of different lengths (gate.protocols.BatchedSessions)."""

CONTINUOUS_KINDS = ("dynamic",)
"""Kinds that batch continuously (gate.protocols.ContinuousBatching)."""


def pure_rotary(model: Any) -> bool:
    """Rotary position embeddings and no absolute ones (GPT-2's `wpe`, OPT's `embed_positions`)."""
    absolute = any(n.endswith(("wpe", "embed_positions", "position_embeddings")) for n, _ in model.named_modules())
    return any("Rotary" in type(m).__name__ for m in model.modules()) and not absolute


class HFPath:
    """One execution path through a transformers causal LM."""

    uses_cache: bool

    def __init__(self, loaded: LoadedModel, options: Options, *, device: str, dtype: str, seed: int) -> None:
        self.loaded = loaded
        self.model = loaded.model
        self.options = options
        self.kind = options.path
        self.device = device
        self.dtype = dtype
        self.seed = seed
        self.vocab_size = int(self.model.config.get_text_config(decoder=True).vocab_size)
        self.max_len = max_positions(self.model)
        self.uses_cache = self.kind != "full"
        self.fault: str | None = None
        self.tamper: Tamper = Tamper()
        self.store = PrefixStore()
        self.reused: dict[str, Any] | None = None
        """reuse_after: what the batch served on this path's model object before its first use ran."""
        self.name = f"hf:{self.kind}{f'-beams{options.beams}' if options.beams else ''}:{loaded.name}"
        if self.kind == "sliding-window":
            window = options.window or getattr(self.model.config, "sliding_window", None)
            if not window:
                raise AdapterUnavailable(f"{loaded.name} declares no sliding window: set `window` to evict beyond it")
            self.window = int(window)
        if self.kind == "quantized":
            self.make_cache(1)  # surface a missing backend now, as AdapterUnavailable, not mid-check
        if self.kind == "offloaded" and not str(device).startswith("cuda"):
            raise AdapterUnavailable(
                "offloaded caches need a CUDA device: they move each layer's K/V to host memory and "
                "prefetch it back on a side stream; on a CPU there is nothing to offload to"
            )

    def identity(self) -> dict[str, Any]:
        record = dict(self.loaded.identity)
        record["path"] = self.kind
        record["cache_api"] = vars(compat.cache_api(self.model)).copy()
        record["libraries"] = installed_versions(self.libraries())
        record.update(self.extra_identity())
        record.update({name: value for name in ("beams", "reuse_after") if (value := getattr(self.options, name))})
        return record

    def libraries(self) -> tuple[str, ...]:
        """The distributions whose code this path runs (their versions go into the identity)."""
        backend = {"quanto": ("optimum-quanto",), "hqq": ("hqq",)}.get(str(self.options.backend), ())
        return ("transformers", "torch", "accelerate", *(backend if self.kind == "quantized" else ()))

    def kv_geometry(self) -> tuple[int, int, int]:
        return kv_shape(self.model)

    def extra_identity(self) -> dict[str, Any]:
        options = self.options
        if self.kind == "quantized":
            return {"kv_backend": options.backend, "kv_nbits": 8 if options.backend == "fp8" else options.nbits}
        return {"attention_window": self.window} if self.kind == "sliding-window" else {}

    def full_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """One full causal pass, no cache: logits [B, T, V] float32."""
        self.reuse()
        with torch.no_grad():
            logits: torch.Tensor = compat.forward(self.model, tokens.to(self.device), None, None).logits.float()
        return logits

    def reuse(self) -> None:
        """reuse_after: serve a seeded batch through the release's continuous batching on this path's model
        object before its first forward (once; under the fault, leave the model on the paged kernel)."""
        if not self.options.reuse_after or self.reused is not None:
            return
        compat.require_continuous_batching()
        model = self.model
        generator = torch.Generator().manual_seed(self.seed + 7)
        requests = [torch.randint(0, self.vocab_size, (n,), generator=generator).tolist() for n in BATCH_LENGTHS]
        before = attn_implementation(model)
        forwards = [0]

        def count(*_args: Any) -> None:
            forwards[0] += 1

        with (
            model.register_forward_hook(count),
            torch.no_grad(),
            subject_call("generate_batch (before reuse)", requests=len(requests)),
        ):
            out = compat.generate_batch(model, requests, BATCH_PAGE, self.max_len, BATCH_NEW_TOKENS)
        compat.failed_request(out, {"requests": len(requests)})
        if self.fault in REUSE_FAULTS:
            model.set_attn_implementation(PAGED_KERNEL)
        self.reused = {
            "reused_after": "paged",
            "batch_requests": len(requests),
            "batch_prompt_tokens": list(BATCH_LENGTHS),
            "batch_generated_tokens": sum(len(result.generated_tokens) for result in out.values()),
            "batch_forwards": forwards[0],
            "attn_implementation_before_batch": before,
            "attn_implementation_after_batch": attn_implementation(model),
        }

    def new_session(self, batch_size: int) -> Session:
        self.reuse()
        if self.kind == "full":
            return RecomputeSession(self, batch_size)
        if self.kind == "prefix-reuse":
            return PrefixReuseSession(self, batch_size, self.store, self.options.reuse)
        if self.options.beams:
            return BeamSession(self, batch_size)
        return CacheSession(self, batch_size)

    def faults(self) -> tuple[str, ...]:
        return self.cache_faults() + self.reuse_faults()

    def reuse_faults(self) -> tuple[str, ...]:
        """reuse_after: the state a batch can leave on the model object, where the release lets gate plant it."""
        return REUSE_FAULTS if self.options.reuse_after and compat.can_leave_paged(self.model) else ()

    def cache_faults(self) -> tuple[str, ...]:
        if self.kind not in CACHE_KINDS:
            return ()
        unsupported = set() if self.padding_sides else set(PADDING_FAULTS)
        if not self.continuous_batching:
            unsupported.update(CONTINUOUS_FAULTS)
        if not self.options.beams:
            unsupported.update(BEAM_FAULTS)
        unsupported.add("stale-generate-cache")  # only generate-cache keeps a cache beside its config (generation.py)
        if self.kind != "static":
            unsupported.add("poisoned-tail-read")  # only a preallocated buffer has an unused tail
        if self.kind in ("quantized", "sliding-window") or getattr(self.model.config, "sliding_window", None):
            # transformers cannot crop a quantized cache (QuantizedLayer.crop cuts only its residual)
            # nor a sliding-window layer past its window (it has evicted what the crop would need)
            unsupported.add("truncated-last-block")
        return tuple(f for f in FAULTS if f not in unsupported)

    def position_feeds(self) -> tuple[str, ...]:
        return compat.position_inputs(self.model)

    def invisible_faults(self) -> dict[str, str]:
        """Faults that cannot change this path's outputs, with the reason (gate.protocols.FaultVisibility);
        where the count also goes in as `cache_position` or is the cache's own counter, the fault is live."""
        feeds = self.position_feeds()
        if "reset-keeps-position" not in self.faults() or feeds != ("position_ids",) or not pure_rotary(self.model):
            return {}
        return {
            "reset-keeps-position": "a reset that keeps the position count shifts every position of the next "
            "request by the same amount; this path sends that count to the model as position_ids alone (the "
            "mask and the cache's write index follow the emptied cache's own length), and with rotary "
            "embeddings and no absolute position embeddings attention depends only on relative positions, "
            "so the outputs change by rounding only"
        }

    # ---- BatchedSessions ------------------------------------------------------------------------

    @property
    def padding_sides(self) -> tuple[str, ...]:
        """Sides this path pads a batch on (none for beams: a beam path's sessions are its beam search)."""
        return ("left", "right") if self.kind in PADDED_KINDS and not self.options.beams else ()

    @property
    def pad_token_id(self) -> int:
        """The model's pad token, else its end-of-sequence token, else 0 (a correct mask hides it)."""
        config = self.model.config.get_text_config(decoder=True)
        for name in ("pad_token_id", "eos_token_id"):
            value = getattr(config, name, None)
            value = value[0] if isinstance(value, list) and value else value
            if isinstance(value, int) and 0 <= value < self.vocab_size:
                return value
        return 0

    def new_batched_session(self, batch_size: int, padding: str) -> PaddedSession:
        if padding not in self.padding_sides:
            raise ValueError(f"path {self.name} pads on {self.padding_sides or 'no side'}, not {padding!r}")
        self.reuse()
        return PaddedSession(self, batch_size, padding)

    # ---- ContinuousBatching ---------------------------------------------------------------------

    @property
    def continuous_batching(self) -> bool:
        return self.kind in CONTINUOUS_KINDS and not self.options.beams

    def new_continuous_session(self, slots: int) -> ContinuousHFSession:
        if not self.continuous_batching:
            raise ValueError(f"path {self.name} does not batch continuously (only {', '.join(CONTINUOUS_KINDS)})")
        self.reuse()
        return ContinuousHFSession(self, slots)

    def with_fault(self, fault: str) -> HFPath:
        if fault not in self.faults():
            raise UnknownFault(f"path {self.name} cannot apply fault {fault!r}; it offers {', '.join(self.faults())}")
        faulty = copy.copy(self)
        faulty.fault = fault
        faulty.tamper = Tamper() if fault in REUSE_FAULTS else tamper(fault)
        if fault in REUSE_FAULTS:  # state left on the model object: on a copy of it, batched anew
            faulty.model = copy.deepcopy(self.model)
            faulty.reused = None
        faulty.store = PrefixStore()
        faulty.name = f"{self.name}+{fault}"
        return faulty

    def layout_edges(self) -> dict[str, tuple[int, ...]]:
        """Token counts where this path's cache changes shape, by kind (gate.protocols.LayoutEdges)."""
        found: dict[str, set[int]] = {}
        window = self.window if self.kind == "sliding-window" else getattr(self.model.config, "sliding_window", None)
        if window:
            found["window"] = {int(window) - 1, int(window)}
        if self.kind in ("static", "generate-static") and self.options.max_cache_len:
            found["cache-end"] = {self.options.max_cache_len}
        if self.kind == "quantized" and self.options.backend != "fp8":
            residual = self.options.residual_length if self.options.residual_length is not None else 128
            found["residual"] = set(range(residual, self.max_len, max(residual, 1)))
        if self.fault == "truncated-last-block":
            found["block"] = set(range(BLOCK, self.max_len, BLOCK))
        edges = {kind: tuple(sorted(b for b in v if 0 < b < self.max_len)) for kind, v in found.items()}
        return {kind: v for kind, v in edges.items() if v}

    def layout_boundaries(self) -> tuple[int, ...]:
        return tuple(sorted({b for edges in self.layout_edges().values() for b in edges}))

    def make_cache(self, batch_size: int) -> Any:
        config = self.model.config
        options = self.options
        if self.kind in ("dynamic", "prefix-reuse", "kvpress"):
            return compat.dynamic_cache(config)
        if self.kind in ("static", "generate-static"):
            return compat.static_cache(config, options.max_cache_len or self.max_len)
        if self.kind == "offloaded":
            return compat.dynamic_cache(config, offloading=True)
        if self.kind == "quantized":
            return compat.quantized_cache(
                config,
                options.backend,
                nbits=options.nbits,
                residual_length=options.residual_length,
                q_group_size=options.q_group_size,
            )
        if self.kind == "sliding-window":  # without `window`: the model's own sliding layers
            return compat.dynamic_cache(config) if options.window is None else compat.sliding_cache(config, self.window)
        raise ValueError(f"path kind {self.kind!r} builds no cache of its own")

    def around_forward(self, session: CacheSession, phase: str) -> Any:
        """A context around each forward of a session (a press compresses during prefill)."""
        return nullcontext()

    def extra_exercise(self, session: CacheSession) -> dict[str, Any]:
        return {**(self.reused or {}), **self.kind_exercise(session)}

    def kind_exercise(self, session: CacheSession) -> dict[str, Any]:
        cache = session.cache
        if cache is None:
            return {}
        if self.kind == "quantized":
            return {
                "kv_backend": self.options.backend,
                "kv_nbits": 8 if self.options.backend == "fp8" else (self.options.nbits or 4),
                "quantized_bytes": compat.cache_bytes(cache),
                "unquantized_equivalent_bytes": sum(  # a layer emptied by reset holds no tensor until its next write
                    0 if k is None else 2 * k.numel() * self.model.dtype.itemsize
                    for k in (compat.layer_kv(cache, i)[0] for i in range(len(cache.layers)))
                ),
                "residual_tokens": [
                    int(layer.keys.shape[-2])
                    if getattr(layer, "keys", None) is not None and layer.keys.dim() == 4
                    else 0
                    for layer in cache.layers
                ],
            }
        if self.kind == "sliding-window":
            return {
                "window": self.window,
                "kept_tokens": compat.kept_tokens(cache),
                "evicted_tokens": compat.evicted_tokens(cache, session.pos),
            }
        if self.kind == "prefix-reuse":
            return {
                "hits": self.store.hits,
                "misses": self.store.misses,
                "hit_tokens": self.store.hit_tokens,
                "stored_entries": len(self.store.entries),
                "reuse_mode": self.options.reuse,
            }
        return {}


# ---- reuse_after: paged ---------------------------------------------------------------------------
# The candidate's model object serves a batch through continuous batching first, and every forward the
# path runs afterwards goes through that same object, so whatever the batch leaves on it reaches the
# ordinary forward (docs/hf-adapter.md, "Reused models and stop tokens").

PAGED_KERNEL = "paged|eager"
"""The attention implementation continuous batching switches an eager model to (what the fault leaves)."""

BATCH_LENGTHS = (12, 20)
"""Prompt lengths of the batch served before reuse (two requests packed into each forward)."""

BATCH_PAGE = 16
"""Tokens per page, and per forward, of that batch (the second prompt takes two chunks)."""

BATCH_NEW_TOKENS = 4
"""Greedy tokens each request of the batch generates (decode steps on the paged cache)."""


def attn_implementation(model: Any) -> str | None:
    value = getattr(model.config, "_attn_implementation", None)
    return None if value is None else str(value)
