"""The prefix-store family: a cross-request prefix cache as the prefix checks judge it, one small
protocol per capability (`PrefixServing` ... `PrefixBudget`), and `PrefixCaching`, all of them at once.
This module imports no torch at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from gate.prefix.cache import CacheIdentity, PrefixReply, RestoreReport


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

    def recompute(self, tokens: Sequence[int], *, adapter: str | None = None, new_tokens: int = 0) -> PrefixReply:
        """The same store and identity with no cache at all: the uncached oracle."""

    def adapters(self) -> tuple[str, ...]:
        """Adapter names this store serves (empty when it serves the base model only)."""

    def fresh(self, *, block_size: int | None = None) -> PrefixServing:
        """A new store as this path was built (same faults), with an empty cache of its own: on an
        engine, a new process (checks count these starts)."""

    def reset_cache(self) -> int:
        """Drop every entry (vLLM's /reset_prefix_cache, SGLang's /flush_cache); the entries dropped."""

    def cache_state(self) -> dict[str, Any]:
        """What the store says it holds: at least `blocks`; `bytes_held`, `byte_budget`, `evicted` where
        it keeps a byte budget (PrefixBudget)."""


@runtime_checkable
class PrefixIdentityReport(Protocol):
    """The identity a request is keyed on, as the store reports it (cache-identity compares it with
    the keying it observes by perturbing each field)."""

    def identity_for(self, *, adapter: str | None = None, tenant: str | None = None) -> CacheIdentity:
        """The identity a request with these options is keyed on."""


@runtime_checkable
class PrefixSiblings(Protocol):
    """Workers sharing one cache store that differ in one worker-level identity field (another
    revision, tokenizer, rope, window or KV dtype), like workers behind one shared KV tier."""

    def sibling(self, field: str) -> PrefixServing | None:
        """A store sharing this one's cache that differs from it in exactly the worker-level identity
        field `field` (an IdentityField value); None if none can be built."""


@runtime_checkable
class PrefixHashing(Protocol):
    """A replaceable block hash, so hash-collision can force collisions (a 2-bit hash)."""

    def with_hash(self, hash_fn: Callable[[bytes], bytes]) -> PrefixServing:
        """A new store (empty cache, same faults) whose block hash is `hash_fn`; its requests report
        `collisions_detected`."""


@runtime_checkable
class PrefixWeightUpdates(Protocol):
    """Weights loaded into a running store (a fine-tuning push, an adapter refresh)."""

    def update_weights(self, target: str = "model", *, seed: int = 1) -> None:
        """Load changed weights for the model (`model`) or one adapter (its name)."""


@runtime_checkable
class PrefixSnapshots(Protocol):
    """Save and restore: a store going down writes its cache, a restarted one reads it back."""

    def save_cache(self, file: Path) -> int:
        """Write the cache to a file (a worker going down); returns the blocks written."""

    def restore_cache(self, file: Path) -> RestoreReport:
        """Load a saved cache into this store (a restart), reviving only compatible entries."""

    def restarted(self, *, checkpoint_seed: int | None = None) -> PrefixServing:
        """This store restarted with an empty cache: on the same checkpoint (None), or on another
        checkpoint (other weights, seeded) under an unchanged revision label, as when a tag is re-pushed."""


@runtime_checkable
class PrefixBudget(Protocol):
    """A byte budget the store keeps by evicting; `cache_state` reports `bytes_held`, `byte_budget`, `evicted`."""

    def with_budget(self, byte_budget: int) -> PrefixServing:
        """A new store (empty cache, same faults) that holds at most `byte_budget` bytes of K/V."""


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
