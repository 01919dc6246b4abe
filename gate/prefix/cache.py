"""A block-oriented cross-request prefix cache (background: cache identity; release-gate steps 3 and 8).

A prompt is cut into full blocks of `block_size` tokens. Block i is looked up only after blocks
0..i-1 hit, and its key material names the parent block, its start position, its token ids and
the identity of the computation that produced its K/V (model revision, adapter, tokenizer, rope,
attention window and mask, KV dtype, tenant or salt). The hash of that material only picks a
bucket: a hit is served only when the stored material equals the request's, so a weak hash costs
speed, never correctness.

The rules (key material, hash, verification, matcher) are injectable `CacheRules`, so a negative
control swaps one from outside (`gate.prefix.faults`) instead of a flag in the lookup.

Payloads are opaque sequences of tensors (for the reference decoder: k, v per layer, each
[H_kv, block_size, D]). This module imports torch only to save and restore.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
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


SAVE_FORMAT = "gate-prefix-cache/v1"


class PrefixCache:
    """Blocks of K/V shared across requests, under a byte budget with LRU eviction of leaf blocks."""

    def __init__(self, block_size: int, byte_budget: int, rules: CacheRules | None = None) -> None:
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self.block_size = block_size
        self.byte_budget = byte_budget
        self.rules = rules or CacheRules()
        self.counters = CacheCounters()
        self._buckets: dict[bytes, list[CachedBlock]] = {}
        self._blocks: dict[int, CachedBlock] = {}
        self._next_uid = 0
        self._clock = 0
        self.bytes_held = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def blocks(self) -> list[CachedBlock]:
        return list(self._blocks.values())

    # lookup ---------------------------------------------------------------------------------
    def _find(self, material: tuple[Any, ...]) -> CachedBlock | None:
        self.counters.lookups += 1
        bucket = self._buckets.get(self.rules.digest(material), [])
        for block in bucket:
            if self.rules.verify(block.material, material):
                return block
        if bucket:
            self.counters.collisions_detected += 1
        return None

    def _probes(self, tokens: Sequence[int], identity: CacheIdentity, limit: int) -> Iterator[Probe]:
        parent: int | None = None
        for start in range(0, limit - limit % self.block_size, self.block_size):
            block = self._find(self.rules.key(parent, start, tuple(tokens[start : start + self.block_size]), identity))
            parent = block.uid if block is not None else None
            yield start, block

    def match(self, tokens: Sequence[int], identity: CacheIdentity) -> list[Probe]:
        """Blocks this request may reuse, as (start, block), over the full blocks of the prompt. The
        caller injects at most len(tokens) - 1 of their tokens: the last prompt token is always
        computed, since its logits are the request's answer (a full-prompt hit)."""
        taken = self.rules.matcher(self._probes(tokens, identity, len(tokens)))
        self._clock += 1
        for _, block in taken:
            assert block is not None
            block.last_used = self._clock
        self.counters.hits += len(taken)
        return taken

    # insertion and eviction -----------------------------------------------------------------
    def insert(
        self,
        parent: CachedBlock | None,
        start: int,
        tokens: Sequence[int],
        identity: CacheIdentity,
        payload: tuple[torch.Tensor, ...],
        pinned: set[int] | None = None,
    ) -> CachedBlock | None:
        """Store one full block after `parent` (None at the root); returns the stored or already
        present block, or None when the byte budget cannot make room."""
        if len(tokens) != self.block_size:
            raise ValueError(f"only full blocks of {self.block_size} tokens are stored")
        material = self.rules.key(parent.uid if parent else None, start, tuple(tokens), identity)
        existing = self._find(material)
        self._clock += 1
        if existing is not None:
            existing.last_used = self._clock
            return existing
        nbytes = sum(t.numel() * t.element_size() for t in payload)
        if not self._make_room(nbytes, pinned or set()):
            self.counters.not_stored += 1
            return None
        block = CachedBlock(
            uid=self._next_uid,
            parent=parent.uid if parent else None,
            start=start,
            tokens=tuple(tokens),
            identity=identity,
            material=material,
            digest=self.rules.digest(material),
            payload=payload,
            nbytes=nbytes,
            last_used=self._clock,
        )
        self._next_uid += 1
        self._blocks[block.uid] = block
        self._buckets.setdefault(block.digest, []).append(block)
        if parent is not None and parent.uid in self._blocks:
            parent.children += 1
        self.bytes_held += nbytes
        self.counters.stored += 1
        return block

    def _make_room(self, nbytes: int, pinned: set[int]) -> bool:
        while self.bytes_held + nbytes > self.byte_budget:
            leaves = [b for b in self._blocks.values() if b.children == 0 and b.uid not in pinned]
            if not leaves:
                return False
            self._remove(min(leaves, key=lambda b: b.last_used))
            self.counters.evicted += 1
        return True

    def _remove(self, block: CachedBlock) -> None:
        del self._blocks[block.uid]
        bucket = self._buckets[block.digest]
        bucket.remove(block)
        if not bucket:
            del self._buckets[block.digest]
        if block.parent is not None and block.parent in self._blocks:
            self._blocks[block.parent].children -= 1
        self.bytes_held -= block.nbytes

    def invalidate(self, doomed: Callable[[CachedBlock], bool]) -> int:
        """Drop every block `doomed` selects, and every block chained below one. Returns the count."""
        drop = {b.uid for b in self._blocks.values() if doomed(b)}
        changed = True
        while changed:  # descendants of a dropped block denote a state that no longer exists
            more = {b.uid for b in self._blocks.values() if b.parent in drop and b.uid not in drop}
            drop |= more
            changed = bool(more)
        for uid in sorted(drop, reverse=True):  # children (higher uids) before parents
            self._remove(self._blocks[uid])
        self.counters.invalidated += len(drop)
        return len(drop)

    def clear(self) -> int:
        return self.invalidate(lambda _b: True)

    # save and restore -----------------------------------------------------------------------
    def save(self, file: Path) -> int:
        """Write every block (payload tensors and a JSON header with identities) to a safetensors file."""
        from safetensors.torch import save_file

        order = sorted(self._blocks)
        index = {uid: i for i, uid in enumerate(order)}
        header, tensors = [], {}
        for i, uid in enumerate(order):
            block = self._blocks[uid]
            header.append(
                {
                    "parent": index.get(block.parent) if block.parent is not None else None,
                    "start": block.start,
                    "tokens": list(block.tokens),
                    "identity": block.identity.as_dict(),
                    "tensors": len(block.payload),
                }
            )
            for j, tensor in enumerate(block.payload):
                tensors[f"b{i}.t{j}"] = tensor.detach().contiguous().cpu()
        meta = {"format": SAVE_FORMAT, "block_size": str(self.block_size), "blocks": json.dumps(header)}
        save_file(tensors, str(file), metadata=meta)
        return len(order)

    def restore(
        self, file: Path, accept: Callable[[CacheIdentity, tuple[torch.Tensor, ...]], str | None], device: str = "cpu"
    ) -> RestoreReport:
        """Revive the blocks of a saved file that `accept` admits (it returns None, or why not), in
        chain order, re-keyed under this cache's rules. A block whose parent was refused, whose
        start is not its parent's end, or whose size is not the block size is refused too."""
        from safetensors import safe_open

        report = RestoreReport()

        def drop(reason: str) -> None:
            report.dropped[reason] = report.dropped.get(reason, 0) + 1

        with safe_open(str(file), framework="pt", device=device) as fh:
            meta = fh.metadata() or {}
            if meta.get("format") != SAVE_FORMAT:
                raise ValueError(f"{file}: not a {SAVE_FORMAT} file")
            header = json.loads(meta["blocks"])
            if int(meta["block_size"]) != self.block_size:
                drop(f"block size {meta['block_size']} != {self.block_size}")
                return report
            revived: dict[int, CachedBlock | None] = {}
            for i, entry in enumerate(header):
                payload = tuple(fh.get_tensor(f"b{i}.t{j}") for j in range(entry["tensors"]))
                identity = CacheIdentity(**entry["identity"])
                parent = revived.get(entry["parent"]) if entry["parent"] is not None else None
                reason = accept(identity, payload)
                if entry["parent"] is not None and parent is None:
                    reason = "parent block not restored"
                elif entry["start"] != (parent.start + self.block_size if parent else 0):
                    reason = reason or "gap or overlap in the token range"
                elif len(entry["tokens"]) != self.block_size:
                    reason = reason or "partial block"
                block = None
                if reason is None:
                    block = self.insert(parent, entry["start"], entry["tokens"], identity, payload)
                    reason = None if block is not None else "byte budget"
                if reason is None:
                    report.restored += 1
                else:
                    drop(reason)
                revived[i] = block
        return report
