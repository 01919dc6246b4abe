"""Adapter and path protocols: the only way checks talk to models.

A check never imports the reference decoder or transformers; it receives two `DecodePath`s
(reference and candidate) built by adapters. Optional capabilities (speculative sampling, a
cross-request prefix cache, per-layer traces) are separate protocols; a path's capabilities are
read in one place, `capabilities(path)` (the set the runner holds each check's declared needs
against before it runs: gate.engine.runner.decide_capabilities) and `offered(path, Protocol)` (the
path typed as that protocol where it offers it, else None), so one check can judge every engine
that offers what it needs.

This module imports no torch at run time.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, cast, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from gate._util import regions
from gate.errors import SubjectCrash

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from contextlib import AbstractContextManager
    from pathlib import Path

    import torch

    from gate.prefix.cache import CacheIdentity, PrefixReply, RestoreReport
    from gate.speculative.sampler import SpeculativeSample


__all__ = [
    "PREFIX_CAPABILITIES",
    "Adapter",
    "AttentionProbe",
    "BatchedSession",
    "BatchedSessions",
    "CacheCropping",
    "Capability",
    "ContinuousBatching",
    "ContinuousSession",
    "DecodePath",
    "EngineCompletion",
    "EngineServer",
    "EngineServing",
    "EngineSlots",
    "EngineStream",
    "FaultVisibility",
    "KVGeometry",
    "LayerTracing",
    "LayoutBoundaries",
    "LayoutEdges",
    "LiveCounterpart",
    "PathCapabilities",
    "PrefixBudget",
    "PrefixCaching",
    "PrefixHashing",
    "PrefixIdentityReport",
    "PrefixServing",
    "PrefixSiblings",
    "PrefixSnapshots",
    "PrefixWeightUpdates",
    "QuantScheme",
    "QuantSession",
    "QuantState",
    "QuantTensorState",
    "QuantizedKV",
    "Session",
    "SlotFilesPath",
    "SlotStore",
    "SpeculativePath",
    "WeightReloading",
    "capabilities",
    "offered",
    "subject_call",
]


@contextmanager
def subject_call(call: str, **where: int | str) -> Iterator[None]:
    """Mark a call into the subject: an exception raised inside becomes `SubjectCrash(call, err, where)`.

    An adapter wraps exactly the library's own code (a forward, generate, a cache's crop or reset) so
    that a crash there is reported as a failure of the subject, with the call and the length or
    step, while an exception in the adapter's or gate's own code stays gate's error. `where`: e.g.
    `length=` tokens seen before the call, `step=` a decode step.
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
        ...

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        """Process n new tokens against the cache. tokens: [B, n] -> logits [B, n, V] float32."""
        ...

    def reset(self) -> None:
        """Forget the request: stored K/V *and* position state (background: mask oracle)."""
        ...

    def exercise(self) -> dict[str, Any]:
        """Proof the cache path ran: at least `cache_len`, `cached_steps` and `cache_bytes`."""
        ...


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
        ...

    def full_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """One full causal pass, no cache. tokens: [B, T] -> logits [B, T, V] float32."""
        ...

    def new_session(self, batch_size: int) -> Session:
        """A fresh session whose cache layout is this path's."""
        ...

    def faults(self) -> tuple[str, ...]:
        """Names of the faults `with_fault` can apply to this path."""
        ...

    def with_fault(self, fault: str) -> DecodePath:
        """A copy of this path with a fault applied from outside the model."""
        ...


@runtime_checkable
class BatchedSession(Protocol):
    """One session over B requests of different lengths that the path pads into one batch
    (judged by `batch-invariance`). The path chooses the pad token, the position ids and the mask:
    the check sees each request's own rows only."""

    def prefill(self, prompts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """B prompts (1-D int64, lengths >= 1, may differ) in one padded forward -> per prompt its
        logits [T_b, V] float32 (the pad positions' rows are dropped)."""
        ...

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        """n more tokens per request [B, n] -> logits [B, n, V] float32 (left padding only: a
        right-padded batch's requests end at different slots, so it is prefill-only)."""
        ...

    def exercise(self) -> dict[str, Any]:
        """Proof the padded batch ran: `padding`, `pad_tokens`, `rows`, `cache_len`, `cached_steps`."""
        ...


@runtime_checkable
class BatchedSessions(Protocol):
    """Padded batches of requests of different lengths (gate.protocols.BatchedSession)."""

    padding_sides: tuple[str, ...]
    """Sides this path pads on: `left` (prefill then decode) and/or `right` (prefill only); empty
    when this path of the adapter does not pad (the check then batches equal-length requests)."""

    def new_batched_session(self, batch_size: int, padding: str) -> BatchedSession:
        """A fresh padded session of this path's cache layout; `padding` is one of `padding_sides`."""
        ...


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
        ...

    def step(self, feeds: Mapping[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """One forward: per request handle its next tokens (1-D int64, length >= 1; requests left
        out wait) -> per handle the logits of those tokens [n, V] float32, each computed against
        that request's own tokens so far."""
        ...

    def leave(self, request: int) -> None:
        """The request ends; its slot (its cache pages) is free for a later join."""
        ...

    def exercise(self) -> dict[str, Any]:
        """Proof the running batch ran: `forwards`, `mixed_forwards` (prefill and decode in one),
        `joins`, `leaves`, `slots_reused`, `max_rows`, `cached_steps`."""
        ...


@runtime_checkable
class ContinuousBatching(Protocol):
    """Continuous batching: requests join and leave one running batch (gate.protocols.ContinuousSession)."""

    continuous_batching: bool
    """False where this path of the adapter does not batch continuously (the checks then skip it)."""

    def new_continuous_session(self, slots: int) -> ContinuousSession:
        """A fresh running batch of this path's cache layout with room for `slots` requests at once."""
        ...


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
        ...

    def full_layer_states(self, tokens: torch.Tensor, prefix_len: int) -> list[dict[str, torch.Tensor]]:
        """The same quantities from a full pass over tokens[:, : prefix_len + 1]."""
        ...


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
        ...


@runtime_checkable
class KVGeometry(Protocol):
    """The shape of a path's K/V, so live cache bytes can be set against the theoretical
    2 x layers x KV heads x head dim x tokens x bytes per element (background: four clocks)."""

    def kv_geometry(self) -> tuple[int, int, int]:
        """(layers, KV heads, head dim) of the model's K/V; bytes per element follow `dtype`."""
        ...


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
        ...


@runtime_checkable
class LayoutBoundaries(Protocol):
    """Token counts where a path's cache layout changes shape, for the prefix sweep to visit ±1."""

    def layout_boundaries(self) -> tuple[int, ...]:
        """Block edges, chunk edges, window sizes (each < max_len)."""
        ...


@runtime_checkable
class LayoutEdges(Protocol):
    """Layout boundaries by kind, so a bounded sweep visits every kind and states its coverage."""

    def layout_edges(self) -> dict[str, tuple[int, ...]]:
        """Kind -> token counts (each < max_len): `block`, `chunk`, `window`, `page`, or a kind
        of the path's own (e.g. `residual`, `cache-end`)."""
        ...


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
        ...

    def target_next_token_probs(self, contexts: torch.Tensor, *, temperature: float, top_k: int | None) -> torch.Tensor:
        """The target's sampling distribution after each context [N, T] -> [N, V]."""
        ...

    def draft_next_token_probs(self, contexts: torch.Tensor, *, temperature: float, top_k: int | None) -> torch.Tensor:
        """The draft's sampling distribution after each context [N, T] -> [N, V] (for power)."""
        ...


@runtime_checkable
class PrefixServing(Protocol):
    """Serve and recompute: the one capability every prefix-reuse check needs (background: cache
    identity). A store serves requests (token ids plus the per-request identity: adapter, tenant or
    salt) through its cross-request cache and fixes the rest of the identity (model revision,
    tokenizer, rope, window, mask, KV dtype). The other prefix capabilities below are optional: a
    check whose assertion needs one the store lacks reports that assertion `unproven`, with the
    capability named, and never passes it."""

    block_size: int
    """Tokens per cached block."""

    def request(
        self, tokens: Sequence[int], *, adapter: str | None = None, tenant: str | None = None, new_tokens: int = 0
    ) -> PrefixReply:
        """Serve one request through the cache (consult, compute the rest, store its full blocks)."""
        ...

    def recompute(self, tokens: Sequence[int], *, adapter: str | None = None, new_tokens: int = 0) -> PrefixReply:
        """The same store and identity with no cache at all: the uncached oracle."""
        ...

    def adapters(self) -> tuple[str, ...]:
        """Adapter names this store serves (empty when it serves the base model only)."""
        ...

    def fresh(self, *, block_size: int | None = None) -> PrefixServing:
        """A new store as this path was built (same faults), with an empty cache of its own: on an
        engine, a new process (checks count these starts)."""
        ...

    def reset_cache(self) -> int:
        """Drop every entry (vLLM's /reset_prefix_cache, SGLang's /flush_cache); the entries dropped."""
        ...

    def cache_state(self) -> dict[str, Any]:
        """What the store says it holds: at least `blocks`; `bytes_held`, `byte_budget`, `evicted` where
        it keeps a byte budget (PrefixBudget)."""
        ...


@runtime_checkable
class PrefixIdentityReport(Protocol):
    """The identity a request is keyed on, as the store reports it (cache-identity compares it with
    the keying it observes by perturbing each field)."""

    def identity_for(self, *, adapter: str | None = None, tenant: str | None = None) -> CacheIdentity:
        """The identity a request with these options is keyed on."""
        ...


@runtime_checkable
class PrefixSiblings(Protocol):
    """Workers sharing one cache store that differ in one worker-level identity field (another
    revision, tokenizer, rope, window or KV dtype), like workers behind one shared KV tier."""

    def sibling(self, field: str) -> PrefixServing | None:
        """A store sharing this one's cache that differs from it in exactly the worker-level identity
        field `field` (an IdentityField value); None if none can be built."""
        ...


@runtime_checkable
class PrefixHashing(Protocol):
    """A replaceable block hash, so hash-collision can force collisions (a 2-bit hash)."""

    def with_hash(self, hash_fn: Callable[[bytes], bytes]) -> PrefixServing:
        """A new store (empty cache, same faults) whose block hash is `hash_fn`; its requests report
        `collisions_detected`."""
        ...


@runtime_checkable
class PrefixWeightUpdates(Protocol):
    """Weights loaded into a running store (a fine-tuning push, an adapter refresh)."""

    def update_weights(self, target: str = "model", *, seed: int = 1) -> None:
        """Load changed weights for the model (`model`) or one adapter (its name)."""
        ...


@runtime_checkable
class PrefixSnapshots(Protocol):
    """Save and restore: a store going down writes its cache, a restarted one reads it back."""

    def save_cache(self, file: Path) -> int:
        """Write the cache to a file (a worker going down); returns the blocks written."""
        ...

    def restore_cache(self, file: Path) -> RestoreReport:
        """Load a saved cache into this store (a restart), reviving only compatible entries."""
        ...

    def restarted(self, *, checkpoint_seed: int | None = None) -> PrefixServing:
        """This store restarted with an empty cache: on the same checkpoint (None), or on another
        checkpoint (other weights, seeded) under an unchanged revision label, as when a tag is re-pushed."""
        ...


@runtime_checkable
class PrefixBudget(Protocol):
    """A byte budget the store keeps by evicting; `cache_state` reports `bytes_held`, `byte_budget`, `evicted`."""

    def with_budget(self, byte_budget: int) -> PrefixServing:
        """A new store (empty cache, same faults) that holds at most `byte_budget` bytes of K/V."""
        ...


@runtime_checkable
class PrefixCaching(
    PrefixServing,
    PrefixIdentityReport,
    PrefixSiblings,
    PrefixHashing,
    PrefixWeightUpdates,
    PrefixSnapshots,
    PrefixBudget,
    Protocol,
):
    """Every prefix capability at once, as gate's own `gate.prefix.worker.PrefixWorker` offers them
    (kept for plugins written against the single protocol; new code tests for the capability it uses)."""


PREFIX_CAPABILITIES: dict[str, type] = {
    "serve and recompute": PrefixServing,
    "identity report": PrefixIdentityReport,
    "siblings": PrefixSiblings,
    "pluggable hash": PrefixHashing,
    "weight update": PrefixWeightUpdates,
    "save and restore": PrefixSnapshots,
    "byte budget": PrefixBudget,
}
"""Capability name (as verdicts name it) -> protocol."""


@runtime_checkable
class EngineCompletion(Protocol):
    """One greedy completion from an engine behind HTTP: what its API lets gate observe."""

    tokens: list[int]
    """Greedy token ids."""
    logprobs: list[float]
    """Logprob of each, under the engine's own (pre-sampling) distribution."""
    top: list[dict[int, float]]
    """Per position: the top-k token ids and their logprobs."""
    cached_tokens: int | None
    """Prompt tokens the server says it reused from its cache (None: it reports nothing)."""
    seconds: float
    """Wall time of the request."""
    finish_reason: str | None
    """Why generation ended, as the server says: `stop` (an end-of-sequence token), `length` (max_tokens);
    None where the reply does not say."""

    def summary(self) -> dict[str, Any]:
        """Tokens, cached tokens and time, for the evidence."""
        ...


class EngineStream(Protocol):
    """A streamed completion: the completion, and when each token arrived (seconds after the request was sent)."""

    completion: EngineCompletion
    token_s: list[float]


@runtime_checkable
class EngineServer(Protocol):
    """A running engine server, as an engine check uses it while it holds it."""

    flavor: str
    """vllm, sglang, llama.cpp, tgi or generic."""
    info: dict[str, Any]
    """What the server states: model, vocab_size, context_length, total_slots, build."""

    def complete(
        self, prompt: list[int], max_tokens: int, top_k: int, extra: dict[str, Any] | None = None
    ) -> EngineCompletion:
        """Greedy continuation of a token-id prompt with top-k logprobs at each position."""
        ...

    def stream(
        self, prompt: list[int], max_tokens: int, top_k: int, extra: dict[str, Any] | None = None
    ) -> EngineStream:
        """The same continuation streamed: each token's arrival time as the client sees it."""
        ...

    def reset_cache(self) -> str | None:
        """Drop the prefix cache through the engine's own endpoint; the endpoint, or None if it has none."""
        ...

    def unreset_tiers(self) -> list[str]:
        """The cache tiers of this server that `reset_cache` cannot reach, in words (e.g. llama.cpp's
        host-memory prompt cache, which no endpoint clears); empty when the reset reaches every tier
        that can hold anything. A reset is complete only when this is empty."""
        ...

    def restart(self) -> bool:
        """Stop the server and start a new process on the same launch in its place, every cache tier
        empty (handed over to later checks in the old one's place); False where gate did not launch it.
        A check whose reset leaves `unreset_tiers` empties them this way."""
        ...

    @property
    def reused(self) -> bool:
        """Handed over from an earlier check of this run (its cache reset), not started for this one."""
        ...

    def evidence(self) -> dict[str, Any]:
        """Command, port, start-up time and log tail, for the record."""
        ...


class CacheGeometry(BaseModel):
    """How an engine reuses cached state across requests, as it states it (vLLM's `cache_config_info`
    metric, llama.cpp's `/props`, a launch flag) or as a short probe of its reported hits measured."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    block_size: int | None = None
    """Tokens of the smallest unit the engine reuses: only whole blocks hit (vLLM: 16 on GPUs, 128 on
    its CPU backend); 1: any common prefix (llama.cpp); None: not known."""
    cache_dtype: str | None = None
    """The KV cache's element type as the engine names it (vLLM: auto, fp8, fp8_e5m2; llama.cpp: f16, q8_0)."""
    prefix_caching: bool | None = None
    """Whether the engine reuses a prefix across requests at all (None: not stated)."""
    source: str = "not stated"
    """Where the values come from (an endpoint, a launch flag, a probe, an engine default)."""
    sliding_window: int | None = None
    """Tokens a local (sliding-window) layer attends to (None: full attention, or not stated)."""
    sliding_layers: list[int] | None = None
    """Which layers are local when `sliding_window` is set (None: all of them, or not stated)."""
    slots: int | None = None
    """Requests the engine serves at once (llama.cpp `-np`, `/props` `total_slots`)."""
    kv_unified: bool | None = None
    """One KV buffer shared by every slot (llama.cpp `--kv-unified`, its default with `-np` auto)."""
    ubatch: int | None = None
    """Tokens of one compute micro-batch (llama.cpp `-ub`, 512 by default): its sliding-window cache
    keeps `sliding_window` cells per slot plus one micro-batch."""
    host_cache_mib: int | None = None
    """The host-memory prompt cache's size in MiB (llama.cpp `--cache-ram`; 0: off; None: not stated)."""
    checkpoints: int | None = None
    """Context checkpoints kept per slot (llama.cpp `--ctx-checkpoints`; 0: none; None: not stated)."""
    checkpoint_spacing: int | None = None
    """Fewest tokens between two context checkpoints (llama.cpp `--checkpoint-min-step`; None: not stated)."""
    mechanisms_from: str | None = None
    """Where the attention layout and the reuse mechanisms above come from (flags, `/props`, the model, the log)."""

    def words(self) -> str:
        """One line for `gate plan` and a check's message."""
        parts = ["block " + ("unknown" if self.block_size is None else str(self.block_size))]
        if self.cache_dtype is not None:
            parts.append(f"KV {self.cache_dtype}")
        if self.prefix_caching is not None:
            parts.append("prefix caching " + ("on" if self.prefix_caching else "off"))
        return ", ".join(parts) + f" ({self.source})"


@runtime_checkable
class SlotStore(Protocol):
    """A server's saved slot states, where the engine offers them (llama.cpp's `--slot-save-path DIR`
    and `POST /slots/N?action=save|restore|erase`) and gate can read the files (a server it launched).
    Each call answers the engine's reply as an object; a refusal is `EngineBadReply` naming the HTTP
    status, a server that dies on it `SubjectCrash`."""

    directory: Path
    """Where the server writes and reads its slot files (a file there is restored by its name)."""
    slots: int
    """Slots the server runs (ids 0 .. slots-1)."""

    def save(self, slot: int, filename: str) -> dict[str, Any]:
        """Write slot `slot`'s state to `filename` under `directory`."""
        ...

    def restore(self, slot: int, filename: str) -> dict[str, Any]:
        """Load `filename` from `directory` into slot `slot`, replacing what it held."""
        ...

    def erase(self, slot: int) -> dict[str, Any]:
        """Clear slot `slot`'s state."""
        ...

    def pinned(self, slot: int) -> dict[str, Any]:
        """Request fields that send a completion to slot `slot` (llama.cpp: `id_slot`)."""
        ...


@runtime_checkable
class EngineSlots(Protocol):
    """An engine server that may offer slot files (gate.adapters.openai's launched llama.cpp servers)."""

    def slot_store(self) -> SlotStore | str:
        """The server's slot files, or why it offers none (in words, for a check that declines)."""
        ...


@runtime_checkable
class SlotFilesPath(Protocol):
    """An engine path that can say, before its servers start, why they offer no slot files."""

    def slot_files_absent(self) -> str | None:
        """Why this path's servers offer no slot files gate can reach (in words); None when they may."""
        ...


def slot_store_of(server: object) -> SlotStore | str | None:
    """The server's slot files, or why it offers none, where it is an EngineSlots server; None where not."""
    return server.slot_store() if isinstance(server, EngineSlots) else None


def slot_files_absent(path: object) -> str | None:
    """Why a path's servers offer no slot files, known before they start (SlotFilesPath); None: they may."""
    return path.slot_files_absent() if isinstance(path, SlotFilesPath) else None


@runtime_checkable
class EngineServing(Protocol):
    """An engine gate did not write, behind an OpenAI-compatible HTTP API (gate.adapters.openai),
    judged by the engine-* checks. It has no logits and no session: only completions."""

    flavor: str
    vocab_size: int
    max_len: int
    top_k: int
    """Top logprobs to request at each position."""
    salt_field: str | None
    """Request field that salts the prefix cache (vLLM: cache_salt), None when the engine has none."""
    cache_geometry: CacheGeometry
    """How the server reuses cached state (what the prefix sweep is planned on)."""

    def serve(
        self, *, label: str = "server", model: Any = None, fresh: bool = False
    ) -> AbstractContextManager[EngineServer]:
        """The server for the block: the one this run already started for the same launch, its prefix
        cache reset, or a new one kept until the run ends (its whole process group stopped then, on an
        exception and on Ctrl-C alike). `fresh`: a new process, stopped when the block ends (a
        restart). `model`: another model to load (from `changed_model`)."""
        ...

    def changed_model(self, perturb_seed: int) -> Any | None:
        """A model with other weights to restart on, or None where gate cannot restart the server on one."""
        ...


@runtime_checkable
class WeightReloading(Protocol):
    """A path whose model can load changed weights in place while sessions stay open: buys the generic
    `weights-changed` control (gate.engine.generic_faults)."""

    def reload_weights(self, version: int) -> None:
        """0: the weights as built. Any other version: deterministically changed weights (as a
        model update would bring), loaded into the same model object."""
        ...


@runtime_checkable
class CacheCropping(Protocol):
    """A session whose cache length is exposed and can be cut back (HF `DynamicCache.crop`): buys the
    generic `block-truncated` control (gate.engine.generic_faults)."""

    def cache_length(self) -> int:
        """Tokens held in the cache."""
        ...

    def crop(self, length: int) -> None:
        """Keep only the first `length` cached tokens (and continue from position `length`)."""
        ...


@dataclass(frozen=True)
class EvictionPolicy:
    """What an evicting cache promises to keep, stated by the path (gate.checks.evict_invariants
    judges what it kept against it): the protected positions (`sink` first tokens, the `window`
    most recent, the last token) plus the top of the press's own `score` up to the budget."""

    press: str
    """The press's name (`sink-window`, `knorm`, kvpress's class name, ...)."""
    score: str
    """The score the press ranks by: `position` (no score: protected positions only) and `knorm`
    (minus the key's L2 norm) gate recomputes in float32 from the keys; any other name is judged
    against the press's own reported scores."""
    sink: int = 0
    """First tokens always kept (attention sinks)."""
    window: int | None = 0
    """Most recent tokens always kept; None: the budget less the sinks (kvpress's StreamingLLM)."""
    keeps_last: bool = False
    """The newest token is always kept."""
    budget: int | None = None
    """Tokens kept per layer and head once more were seen; None: from `compression_ratio`."""
    compression_ratio: float | None = None
    """Budget max(1, int(n * (1 - ratio))) of the n tokens the press chose from."""
    scope: str = "every-write"
    """When the press evicts: after `every-write` (prefill chunks and decode steps) or the first `prefill` only."""


@dataclass(frozen=True)
class EvictionStep:
    """One eviction on one layer: the pool the press chose from and what it kept, per (batch, KV head).
    Tensors are torch tensors (typed Any: this module imports no torch)."""

    layer: int
    seen: int
    """Tokens written to this layer so far (positions 0..seen-1)."""
    pool: Any
    """[B, H, N] long: the positions of the N tokens the press chose from (what it held plus the new ones)."""
    kept_from: Any
    """[B, H, K] long: which pool entries it kept (indices into the pool's last axis)."""
    positions: Any
    """[B, H, K] long: the position each kept entry carries in the cache after the eviction."""
    scores: Any | None
    """[B, H, N] float: the press's own scores over the pool (None: not exposed)."""
    keys: Any | None
    """[B, H, N, D]: the keys the press scored (for gate's recomputation; None: not exposed)."""


@runtime_checkable
class EvictionReport(Protocol):
    """A session of an evicting cache that says what it promises and what it kept, step by step."""

    def eviction_policy(self) -> EvictionPolicy:
        """The promise: protected positions, score and budget."""
        ...

    def watch_evictions(self) -> list[EvictionStep]:
        """A list the session appends every eviction to from now on (one EvictionStep per layer and write)."""
        ...


class QuantScheme(BaseModel):
    """A quantised KV cache's scheme: as the manifest declares it (`QuantizedKV.quant_declared`) or as
    the cache object states it of itself (`QuantState.stated`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    bits: int
    """Bits per stored code."""
    group_size: int
    """Elements sharing one scale and zero point."""
    key_axis: str
    """What keys are grouped along (the library's own word or number: token, channel, 0, 1)."""
    value_axis: str
    """What values are grouped along."""
    max_residual: int
    """Most tokens the cache may hold in full precision after any update (the library's rule applied
    to the declared residual length)."""
    param_bytes: int = 2
    """Bytes of one stored scale or zero point."""
    param_eps: float = 2.0**-11
    """Relative rounding of a stored scale or zero point (float16: 2^-11)."""


@dataclass(frozen=True)
class QuantTensorState:
    """One layer's keys or values as a quantised cache holds them after an update, read by the adapter."""

    name: str
    """e.g. `layer 0 keys`."""
    written: torch.Tensor
    """[B, H, T, D]: every token written since the session began, as the model wrote it."""
    dequantized: torch.Tensor
    """[B, H, Q, D]: what a read sees of the tokens held quantised."""
    residual: torch.Tensor
    """[B, H, R, D]: the tokens held in full precision."""
    scale: torch.Tensor
    """[B, H, Q, D]: the stored scale of each quantised element's group."""
    zero: torch.Tensor
    """[B, H, Q, D]: the stored zero point of each element's group, as the value of code 0."""
    group: torch.Tensor
    """[B, H, Q, D] int64: which group each quantised element belongs to."""
    quantized_from: torch.Tensor | None = None
    """[B, H, Q, D]: what the last quantisation was handed, where a library re-quantises its own
    dequantised history (transformers' QuantizedLayer flushes dequantised + residual + new tokens
    as one tensor); None: the written tokens themselves."""


@dataclass(frozen=True)
class QuantState:
    """What a quantised cache holds after one update: its stated scheme, its bytes, and every tensor."""

    stated: QuantScheme
    """What the cache object says of itself (bits, group size, axes, residual rule)."""
    nbytes: int
    """Bytes the cache holds (codes, scales, zero points, full-precision residual)."""
    tensors: tuple[QuantTensorState, ...]


@runtime_checkable
class QuantSession(Session, Protocol):
    """A session over a quantised cache whose state the adapter can read after every call."""

    def quant_state(self) -> QuantState:
        """The cache as it stands now (the adapter reads the cache object)."""
        ...


@runtime_checkable
class QuantizedKV(Protocol):
    """A path over a quantised KV cache whose stored state can be read (quant-invariants)."""

    def quant_declared(self) -> QuantScheme:
        """The scheme the manifest declares (the adapter's options), never read from the cache."""
        ...

    def new_quant_session(self, batch_size: int) -> QuantSession:
        """A session that records what is written, so `quant_state` can compare stored and written."""
        ...


@runtime_checkable
class ReleasesControls(Protocol):
    """Optional: a path that holds resources for its negative controls (an engine's control servers)."""

    def release_controls(self, keep: set[str]) -> list[str]:
        """Free what the controls outside `keep` hold (no later check names them); what was freed."""
        ...


@runtime_checkable
class PlansServers(Protocol):
    """Optional, beside ReleasesControls: a path whose servers are capped (an engine's) and that keeps
    the ones the checks still to run need in preference to the ones they do not."""

    def plan_servers(self, ahead: list[list[str | None]]) -> None:
        """The checks still to run, the current one first, each as its phases in order: None (the check
        itself), then the names of its controls."""
        ...


@runtime_checkable
class FaultVisibility(Protocol):
    """Optional: faults a path offers that cannot change its outputs on this architecture."""

    def invisible_faults(self) -> dict[str, str]:
        """Fault name -> why it is mathematically invisible here (e.g. a uniform position shift under
        pure rotary embeddings). The control engine declares such a control unobservable up front and
        lets a generic fault that stands in for it show the check's power instead."""
        ...


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
        ...


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


class Capability(StrEnum):
    """What a path offers, by the protocol that types it (the value is the protocol's name, as cards'
    `needs` and `PathCapabilities.offers` spell it), plus the flags a protocol alone cannot state."""

    DECODE_PATH = "DecodePath"
    BATCHED_SESSIONS = "BatchedSessions"
    CONTINUOUS_BATCHING = "ContinuousBatching"
    """ContinuousBatching with its `continuous_batching` flag set (a path may type it and opt out)."""
    LAYER_TRACING = "LayerTracing"
    LIVE_COUNTERPART = "LiveCounterpart"
    KV_GEOMETRY = "KVGeometry"
    ATTENTION_PROBE = "AttentionProbe"
    LAYOUT_BOUNDARIES = "LayoutBoundaries"
    LAYOUT_EDGES = "LayoutEdges"
    SPECULATIVE_PATH = "SpeculativePath"
    PREFIX_SERVING = "PrefixServing"
    PREFIX_IDENTITY_REPORT = "PrefixIdentityReport"
    PREFIX_SIBLINGS = "PrefixSiblings"
    PREFIX_HASHING = "PrefixHashing"
    PREFIX_WEIGHT_UPDATES = "PrefixWeightUpdates"
    PREFIX_SNAPSHOTS = "PrefixSnapshots"
    PREFIX_BUDGET = "PrefixBudget"
    ENGINE_SERVING = "EngineServing"
    ENGINE_SALT = "EngineSalt"
    """EngineServing with a `salt_field`: requests can be keyed on a cache salt or tenant."""
    WEIGHT_RELOADING = "WeightReloading"
    CACHE_CROPPING = "CacheCropping"
    RELEASES_CONTROLS = "ReleasesControls"
    FAULT_VISIBILITY = "FaultVisibility"
    EVICTION_REPORT = "EvictionReport"
    QUANTIZED_KV = "QuantizedKV"


_TYPED: tuple[tuple[Capability, type], ...] = (
    (Capability.DECODE_PATH, DecodePath),
    (Capability.BATCHED_SESSIONS, BatchedSessions),
    (Capability.LAYER_TRACING, LayerTracing),
    (Capability.LIVE_COUNTERPART, LiveCounterpart),
    (Capability.KV_GEOMETRY, KVGeometry),
    (Capability.ATTENTION_PROBE, AttentionProbe),
    (Capability.LAYOUT_BOUNDARIES, LayoutBoundaries),
    (Capability.LAYOUT_EDGES, LayoutEdges),
    (Capability.SPECULATIVE_PATH, SpeculativePath),
    (Capability.PREFIX_SERVING, PrefixServing),
    (Capability.PREFIX_IDENTITY_REPORT, PrefixIdentityReport),
    (Capability.PREFIX_SIBLINGS, PrefixSiblings),
    (Capability.PREFIX_HASHING, PrefixHashing),
    (Capability.PREFIX_WEIGHT_UPDATES, PrefixWeightUpdates),
    (Capability.PREFIX_SNAPSHOTS, PrefixSnapshots),
    (Capability.PREFIX_BUDGET, PrefixBudget),
    (Capability.ENGINE_SERVING, EngineServing),
    (Capability.WEIGHT_RELOADING, WeightReloading),
    (Capability.CACHE_CROPPING, CacheCropping),
    (Capability.RELEASES_CONTROLS, ReleasesControls),
    (Capability.FAULT_VISIBILITY, FaultVisibility),
    (Capability.EVICTION_REPORT, EvictionReport),
    (Capability.QUANTIZED_KV, QuantizedKV),
)
"""Capability -> the protocol a path (or store) must satisfy to offer it."""


def capabilities(path: object) -> frozenset[Capability]:
    """What `path` (a DecodePath, a prefix store or an engine) offers: every protocol it satisfies,
    with the flags read once here (`continuous_batching`, `salt_field`) instead of at each use."""
    offered = {capability for capability, protocol in _TYPED if isinstance(path, protocol)}
    if isinstance(path, ContinuousBatching) and path.continuous_batching:
        offered.add(Capability.CONTINUOUS_BATCHING)
    if isinstance(path, EngineServing) and path.salt_field is not None:
        offered.add(Capability.ENGINE_SALT)
    return frozenset(offered)


_CAPABILITY_OF: dict[type, Capability] = {protocol: capability for capability, protocol in _TYPED}
_CAPABILITY_OF[ContinuousBatching] = Capability.CONTINUOUS_BATCHING

_P = TypeVar("_P")


def offered(path: object, protocol: type[_P]) -> _P | None:
    """`path` typed as `protocol` where it offers that capability, else None: the same test as
    `capabilities(path)`, flags included (a ContinuousBatching path with `continuous_batching` off
    offers nothing here). The one way a check, a control or the runner asks for a capability it is
    about to call; TypeError for a protocol that is not a capability."""
    capability = _CAPABILITY_OF.get(protocol)
    if capability is None:
        raise TypeError(f"{protocol.__name__} is not a capability (gate.protocols.Capability)")
    return cast("_P", path) if capability in capabilities(path) else None
