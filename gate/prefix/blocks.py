"""What a prefix cache (gate.prefix.cache) keys, stores and reports: the identity of a block's
computation, the injectable rules (`CacheRules`, which a negative control swaps from outside), the
stored block, and the per-request and lifetime records. Torch only in annotations."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# IdentityField value -> CacheIdentity attribute. token-ids and positions are not attributes: they
# are the block's tokens and its place in the chain.
IDENTITY_ATTRS: dict[str, str] = {
    "model-revision": "model_revision",
    "adapter": "adapter",
    "tokenizer": "tokenizer",
    "rope-scaling": "rope",
    "attention-window": "attention_window",
    "attention-mask": "attention_mask",
    "kv-dtype": "kv_dtype",
    "tenant": "tenant",
}
WORKER_ATTRS = ("model_revision", "tokenizer", "rope", "attention_window", "attention_mask", "kv_dtype")
"""Attributes fixed by the worker that computed a block (the rest are chosen per request)."""


@dataclass(frozen=True)
class CacheIdentity:
    """Everything besides token ids and positions that can change a block's K/V or who may read it."""

    model_revision: str
    """Digest or label of the weights that computed the K/V."""
    tokenizer: str
    """Tokenizer revision: the meaning of a token id."""
    rope: str
    """Rotary configuration, e.g. `base=10000,scale=1`."""
    attention_window: int | None
    """Sliding-window length, None for full attention."""
    attention_mask: str
    """Visibility pattern the K/V were produced under, e.g. `causal`."""
    kv_dtype: str
    """Numeric format the K/V are stored in."""
    adapter: str | None = None
    """Adapter (LoRA) name and revision, None for the base model."""
    tenant: str | None = None
    """Tenant or cache salt: who may read the entry (background: isolation)."""

    def material(self) -> tuple[tuple[str, Any], ...]:
        """Every field as (name, value), in a fixed order."""
        return tuple((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))

    def worker_part(self) -> tuple[tuple[str, Any], ...]:
        """The fields a worker fixes (compared on restore)."""
        return tuple((name, getattr(self, name)) for name in WORKER_ATTRS)

    def replace(self, **changes: Any) -> CacheIdentity:
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


HashFn = Callable[[bytes], bytes]
KeyFn = Callable[[int | None, int, tuple[int, ...], CacheIdentity], tuple[Any, ...]]
"""(parent block uid, start position, block token ids, identity) -> key material."""
VerifyFn = Callable[[tuple[Any, ...], tuple[Any, ...]], bool]
"""(stored material, requested material) -> may the stored block be served."""


def chained_key(parent: int | None, start: int, tokens: tuple[int, ...], identity: CacheIdentity) -> tuple[Any, ...]:
    """The correct key: parent block, start position, token ids, full identity."""
    return ("chained/v1", parent, start, tokens, identity.material())


def sha256_hash(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def weak_hash(bits: int) -> HashFn:
    """A deliberately weak hash with 2**bits buckets, so distinct blocks collide (hash-collision check)."""

    def hash_fn(data: bytes) -> bytes:
        return bytes([hashlib.sha256(data).digest()[0] & ((1 << bits) - 1)])

    hash_fn.__name__ = f"weak-{bits}bit"
    return hash_fn


def verify_material(stored: tuple[Any, ...], wanted: tuple[Any, ...]) -> bool:
    """Serve a block only when its whole key material equals the request's."""
    return stored == wanted


Probe = tuple[int, "CachedBlock | None"]
"""(start position, block found there or None)."""


def longest_prefix(probes: Iterator[Probe]) -> list[Probe]:
    """The correct matcher: stop at the first miss, since later blocks depend on it (background: cache identity)."""
    return list(itertools.takewhile(lambda probe: probe[1] is not None, probes))


Matcher = Callable[[Iterator[Probe]], list[Probe]]


@dataclass(frozen=True)
class CacheRules:
    """How blocks are keyed, hashed, verified and matched. Faults replace one member."""

    key: KeyFn = chained_key
    hash: HashFn = sha256_hash
    verify: VerifyFn = verify_material
    matcher: Matcher = longest_prefix
    hash_name: str = "sha256"
    """Name of `hash`, for the record."""

    def digest(self, material: tuple[Any, ...]) -> bytes:
        return self.hash(json.dumps(material, separators=(",", ":")).encode())


@dataclass
class CachedBlock:
    """One stored block of K/V."""

    uid: int
    """Unique within this cache; children name their parent by it."""
    parent: int | None
    start: int
    """Absolute position of the block's first token."""
    tokens: tuple[int, ...]
    identity: CacheIdentity
    material: tuple[Any, ...]
    digest: bytes
    payload: tuple[torch.Tensor, ...]
    nbytes: int
    last_used: int = 0
    children: int = 0


@dataclass
class CacheCounters:
    """Lifetime counters of one cache."""

    lookups: int = 0
    hits: int = 0
    stored: int = 0
    evicted: int = 0
    invalidated: int = 0
    collisions_detected: int = 0
    """Lookups whose bucket held blocks with other material (refused by verification)."""
    not_stored: int = 0
    """Blocks that could not be stored within the byte budget."""


@dataclass
class RestoreReport:
    """What a restore revived and what it refused."""

    restored: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    """Reason -> number of blocks refused (incompatible identity, layout, gaps)."""


@dataclass
class RequestStats:
    """Per-request proof of what the cache did."""

    prompt_tokens: int
    hit_blocks: int
    """Blocks served from the cache."""
    reused_tokens: int
    """Prompt tokens whose K/V came from the cache instead of being computed."""
    computed_tokens: int
    """Prompt tokens computed by the model (prompt_tokens - reused_tokens)."""
    reused_spans: list[tuple[int, int]]
    """[start, end) position ranges served from the cache, in order."""
    served_at: list[int]
    """Start position of each served block in this request."""
    served_from: list[int]
    """For each served block, the start position it was computed at (== served_at when correct)."""
    stored_blocks: int
    """New blocks this request added to the cache."""
    collisions_detected: int
    """Lookups of this request that met blocks of other material in their hash bucket."""
    evicted_blocks: int
    """Blocks evicted to make room for this request's blocks."""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class PrefixReply:
    """What one request through a prefix-caching path returns."""

    logits: torch.Tensor
    """[n_computed, V] float32: the rows of the positions the model computed."""
    computed_positions: list[int]
    """Prompt positions of the rows of `logits` (positions served from the cache have no row)."""
    continuation: list[int]
    """Greedy continuation tokens."""
    continuation_logits: torch.Tensor
    """[len(continuation), V] float32: row i is what continuation[i] was chosen from (row 0 is the
    last prompt position's logits)."""
    stats: RequestStats
