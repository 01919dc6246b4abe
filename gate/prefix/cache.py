"""A block-oriented cross-request prefix cache (background: cache identity; release-gate steps 3 and 8).

A prompt is cut into full blocks of `block_size` tokens. Block i is looked up only after blocks
0..i-1 hit, and its key material names the parent block, its start position, its token ids and
the identity of the computation that produced its K/V. The hash of that material only picks a
bucket: a hit is served only when the stored material equals the request's. The rules are
injectable `CacheRules` (gate.prefix.blocks), so a negative control swaps one from outside
(`gate.prefix.faults`). This module imports torch only to save and restore.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gate.prefix.blocks import (
    IDENTITY_ATTRS,
    WORKER_ATTRS,
    CacheCounters,
    CachedBlock,
    CacheIdentity,
    CacheRules,
    HashFn,
    KeyFn,
    Matcher,
    PrefixReply,
    Probe,
    RequestStats,
    RestoreReport,
    VerifyFn,
    chained_key,
    longest_prefix,
    sha256_hash,
    verify_material,
    weak_hash,
)

if TYPE_CHECKING:
    import torch


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
        self._next_uid = self._clock = self.bytes_held = 0

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
        # descendants of a dropped block denote a state that no longer exists
        while more := {b.uid for b in self._blocks.values() if b.parent in drop and b.uid not in drop}:
            drop |= more
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


__all__ = [
    "IDENTITY_ATTRS",
    "SAVE_FORMAT",
    "WORKER_ATTRS",
    "CacheCounters",
    "CacheIdentity",
    "CacheRules",
    "CachedBlock",
    "HashFn",
    "KeyFn",
    "Matcher",
    "PrefixCache",
    "PrefixReply",
    "Probe",
    "RequestStats",
    "RestoreReport",
    "VerifyFn",
    "chained_key",
    "longest_prefix",
    "sha256_hash",
    "verify_material",
    "weak_hash",
]
