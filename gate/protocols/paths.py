"""What checks see of a model: `DecodePath` and its `Session`, the optional capabilities a path may
offer beside them, what an adapter builds (`Adapter`, `PathCapabilities`), and `subject_call`.
This module imports no torch at run time.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from gate._util import regions
from gate.errors import SubjectCrash
from gate.protocols.engine import CacheGeometry

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    import torch

    from gate.speculative.sampler import SpeculativeSample


@contextmanager
def subject_call(call: str, **where: int | str) -> Iterator[None]:
    """Mark a call into the subject: an exception raised inside becomes `SubjectCrash(call, err, where)`,
    a failure of the subject rather than gate's error. An adapter wraps exactly the library's own code
    (a forward, generate, a cache's crop or reset); `where`: e.g. `length=` tokens seen, `step=`.
    """
    observer = regions.SLOT.observer  # gate run --profile: books the time inside as the subject's
    if observer is not None:
        observer.subject_enter()
    try:
        yield
    except SubjectCrash:
        raise
    except Exception as err:
        raise SubjectCrash(call, err, dict(where)) from err
    finally:
        if observer is not None:
            observer.subject_leave()


@runtime_checkable
class Session(Protocol):
    """One decoding session over a batch of B sequences, with its own KV cache."""

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        """Process a prompt. tokens: [B, T] int64 -> logits [B, T, V] float32."""

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        """Process n new tokens against the cache. tokens: [B, n] -> logits [B, n, V] float32."""

    def reset(self) -> None:
        """Forget the request: stored K/V *and* position state (background: mask oracle)."""

    def exercise(self) -> dict[str, Any]:
        """Proof the cache path ran: at least `cache_len`, `cached_steps` and `cache_bytes`."""


NO_CACHE: Mapping[str, int] = {"cache_len": 0, "cached_steps": 0, "cache_bytes": 0}
"""What `Session.exercise` reports first for a session that keeps no cache (a full recompute per call)."""


@runtime_checkable
class DecodePath(Protocol):
    """An execution path through one model."""

    name: str
    """Human-readable path name, e.g. `reference:static`."""
    vocab_size: int
    """Size of the logit dimension."""
    max_len: int
    """Longest sequence the model accepts."""
    uses_cache: bool
    """False for a plain full forward (the usual reference)."""
    dtype: str
    """Model dtype name (float32, bfloat16, float16)."""

    def identity(self) -> dict[str, Any]:
        """Model identity for the record: config hash, weights sha256, library versions."""

    def full_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """One full causal pass, no cache. tokens: [B, T] -> logits [B, T, V] float32."""

    def new_session(self, batch_size: int) -> Session:
        """A fresh session whose cache layout is this path's."""

    def faults(self) -> tuple[str, ...]:
        """Names of the faults `with_fault` can apply to this path."""

    def with_fault(self, fault: str) -> DecodePath:
        """A copy of this path with a fault applied from outside the model."""


@runtime_checkable
class BatchedSession(Protocol):
    """One session over B requests of different lengths that the path pads into one batch
    (judged by `batch-invariance`). The path chooses the pad token, the position ids and the mask:
    the check sees each request's own rows only."""

    def prefill(self, prompts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """B prompts (1-D int64, lengths >= 1, may differ) in one padded forward -> per prompt its
        logits [T_b, V] float32 (the pad positions' rows are dropped)."""

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        """n more tokens per request [B, n] -> logits [B, n, V] float32 (left padding only: a
        right-padded batch's requests end at different slots, so it is prefill-only)."""

    def exercise(self) -> dict[str, Any]:
        """Proof the padded batch ran: `padding`, `pad_tokens`, `rows`, `cache_len`, `cached_steps`."""


@runtime_checkable
class BatchedSessions(Protocol):
    """Padded batches of requests of different lengths (gate.protocols.BatchedSession)."""

    padding_sides: tuple[str, ...]
    """Sides this path pads on: `left` (prefill then decode) and/or `right` (prefill only); empty
    when this path of the adapter does not pad (the check then batches equal-length requests)."""

    def new_batched_session(self, batch_size: int, padding: str) -> BatchedSession:
        """A fresh padded session of this path's cache layout; `padding` is one of `padding_sides`."""


@runtime_checkable
class ContinuousSession(Protocol):
    """One running batch that requests join and leave while it runs (continuous batching, judged by
    `batch-invariance` and `schedule-fuzz`). Each `step` is ONE forward over every request it feeds:
    a request's first feeds are its prompt (whole, or in chunks: chunked prefill), later ones its
    decode tokens, so one forward mixes prefill and decode. The path chooses slots, pages, pads,
    masks and positions: the check sees each request's own logits only."""

    def join(self) -> int:
        """A new request enters the running batch and takes a free slot (one a request that left has
        freed, where there is one): its handle, unique within the session. Raises `ValueError` when
        every slot is taken."""

    def step(self, feeds: Mapping[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """One forward: per request handle its next tokens (1-D int64, length >= 1; requests left
        out wait) -> per handle the logits of those tokens [n, V] float32, each computed against
        that request's own tokens so far."""

    def leave(self, request: int) -> None:
        """The request ends; its slot (its cache pages) is free for a later join."""

    def exercise(self) -> dict[str, Any]:
        """Proof the running batch ran: `forwards`, `mixed_forwards` (prefill and decode in one),
        `joins`, `leaves`, `slots_reused`, `max_rows`, `cached_steps`."""


@runtime_checkable
class ContinuousBatching(Protocol):
    """Continuous batching: requests join and leave one running batch (gate.protocols.ContinuousSession)."""

    continuous_batching: bool
    """False where this path of the adapter does not batch continuously (the checks then skip it)."""

    def new_continuous_session(self, slots: int) -> ContinuousSession:
        """A fresh running batch of this path's cache layout with room for `slots` requests at once."""


@runtime_checkable
class LayerTracing(Protocol):
    """Per-layer states, so a failed parity check can name the first diverging layer."""

    def layer_states(self, tokens: torch.Tensor, prefix_len: int) -> list[dict[str, torch.Tensor]]:
        """Per layer: `k`, `v` and `hidden` for the token at `prefix_len`, computed by this path
        (prefill `prefix_len` tokens, then append one). Shapes per layer:
        k, v: [B, H_kv, prefix_len + 1, D]; hidden: [B, d_model]. Optional per layer: `q` and
        `attn`, the last query's per-head query and attention output [B, H, 1, D] (a diagnosis
        judges which KV head each query head read). Optional keywords a path may accept:
        `cuts` (the prefix fed as a prefill up to the first cut and one append per following
        cut, the schedule a check ran) and `width` (the traced step appends that many tokens)."""

    def full_layer_states(self, tokens: torch.Tensor, prefix_len: int) -> list[dict[str, torch.Tensor]]:
        """The same quantities from a full pass over tokens[:, : prefix_len + 1]."""


@runtime_checkable
class LiveCounterpart(Protocol):
    """A stored reference (a recorded baseline, a reference cache) that can name the live path it
    stores the answers of, for what a store cannot answer: clocks (phase-performance) and per-layer
    traces (a failed check's diagnosis). Its answers never decide a verdict's logits."""

    mode: str
    """recorded baseline, reference cache or recording."""

    def live_reference(self) -> DecodePath:
        """The live path: built on first use from the adapter and options the baseline names, its
        model identity checked against the recorded one. Raises `AdapterUnavailable` saying why
        when there is none (`timing: none`, the adapter cannot be built here, another model)."""


@runtime_checkable
class KVGeometry(Protocol):
    """The shape of a path's K/V, so live cache bytes can be set against the theoretical
    2 x layers x KV heads x head dim x tokens x bytes per element (background: four clocks)."""

    def kv_geometry(self) -> tuple[int, int, int]:
        """(layers, KV heads, head dim) of the model's K/V; bytes per element follow `dtype`."""


@runtime_checkable
class AttentionProbe(Protocol):
    """Run this path's KV cache, mask and attention kernel on given q, k, v (no projections, no
    position encoding), so `mask-oracle` can feed the mask-oracle fixture through the candidate."""

    def attention_probe(
        self,
        requests: Sequence[Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]],
        *,
        poison_tail: bool = False,
    ) -> list[list[torch.Tensor]]:
        """requests: independent requests in order, each a list of chunks (q [B, H, n, D],
        k and v [B, H_kv, n, D]) fed one after another from position 0; the path's own reset runs
        between requests. poison_tail writes NaN into allocated-but-unused cache slots before each
        chunk. Returns, per request and chunk, the attention output [B, H, n, D]."""


@runtime_checkable
class LayoutBoundaries(Protocol):
    """Token counts where a path's cache layout changes shape, for the prefix sweep to visit ±1."""

    def layout_boundaries(self) -> tuple[int, ...]:
        """Block edges, chunk edges, window sizes (each < max_len)."""


@runtime_checkable
class LayoutEdges(Protocol):
    """Layout boundaries by kind, so a bounded sweep visits every kind and states its coverage."""

    def layout_edges(self) -> dict[str, tuple[int, ...]]:
        """Kind -> token counts (each < max_len): `block`, `chunk`, `window`, `page`, or a kind
        of the path's own (e.g. `residual`, `cache-end`)."""


@runtime_checkable
class SpeculativePath(Protocol):
    """Speculative (draft-then-verify) sampling, judged by `spec-greedy` and `spec-distribution`.

    Temperature and top-k are applied identically to the target's and the draft's logits;
    temperature 0 is greedy. `gate.speculative.sampler.SpeculativeSampler` is a reference implementation."""

    num_draft_tokens: int
    """k: tokens the draft proposes per round (the horizon checked must exceed it)."""

    def sample(
        self, prompts: torch.Tensor, n_tokens: int, *, temperature: float, top_k: int | None, generator: torch.Generator
    ) -> SpeculativeSample:
        """Continue each prompt [B, T0] by n_tokens, seeded by `generator` alone; tokens
        [B, n_tokens] plus counts of draft/target passes and proposed/accepted tokens."""

    def target_next_token_probs(self, contexts: torch.Tensor, *, temperature: float, top_k: int | None) -> torch.Tensor:
        """The target's sampling distribution after each context [N, T] -> [N, V]."""

    def draft_next_token_probs(self, contexts: torch.Tensor, *, temperature: float, top_k: int | None) -> torch.Tensor:
        """The draft's sampling distribution after each context [N, T] -> [N, V] (for power)."""


class Adapter(Protocol):
    """Builds paths from validated options. Registered under entry point group `gate.adapters`.

    An adapter may also offer `capabilities(options) -> PathCapabilities`: what the path will offer,
    stated from the options alone (no model built or run), so `gate plan` can show before a run
    which lengths a sweep wants and which the path can reach. Without it, the plan says reach is
    known only at run time."""

    name: ClassVar[str]
    Options: ClassVar[type[BaseModel]]

    def build(self, options: BaseModel, *, device: str, dtype: str, seed: int) -> DecodePath:
        """Build the path the options describe. Heavy imports happen here, not at module import."""


class PathCapabilities(BaseModel):
    """What a path will offer, as its adapter states it from the options alone: no model built or run."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    path: str
    """The path's name as the adapter will build it (e.g. `reference:static`)."""
    max_len: int | None = None
    """Longest sequence the path accepts; None: only the running path can say (a server states it)."""
    max_len_from: str = "not stated before a run"
    """Where max_len comes from: a preset, an override, config.json, a launch flag."""
    cache_geometry: CacheGeometry | None = None
    """An engine's cache geometry as its launch flags state it (None: stated only when it runs, or no engine)."""
    offers: list[str] = Field(default_factory=list)
    """Capabilities the built path offers, by protocol name (sessions, LayerTracing, AttentionProbe,
    LayoutEdges, SpeculativePath, PrefixCaching, EngineServing); where it depends on the installed
    library, the adapter leaves it out."""
