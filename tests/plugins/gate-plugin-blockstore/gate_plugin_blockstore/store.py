"""BlockStore: a cross-request K/V block cache for TinyLM, written without gate.

A prompt is cut into full blocks. A block is stored under a digest of (its parent's serial, its
token ids, its namespace), where the namespace is the weights' fingerprint and the tenant; the digest
picks a bucket, and a hit is taken only after the entry's parent, tokens and namespace are compared
with the request's. The cache keeps a byte budget by evicting the least recently used leaf entry.
A snapshot file (torch.save) carries every entry with its namespace; a store restores only entries
whose fingerprint is its own. Loading new weights drops every entry of the old fingerprint.

Two design choices trade safety for speed, and are configured, not bugs: what a hash hit is compared
with before it is served (`verify`: the whole key; the parent and tokens only, trusting the digest to
keep tenants and weights apart; or nothing, trusting the digest entirely), and which saved entries a
restore admits (`restore_by`: the weights' fingerprint, or the revision label the operator gave them,
so a restart skips fingerprinting old entries).

`Bugs` plants the mistakes a store like this can make, for its own tests (and gate's controls).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from gate_plugin_tinylm.tinylm import TinyLM

KV = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer (k, v), each [1, H, T, D]."""

Verify = Literal["key", "tokens", "nothing"]
"""What a hash hit is compared with before it is served: `key` (parent, tokens and namespace),
`tokens` (parent and tokens: the digest keeps tenants and weights apart), `nothing` (the digest alone)."""

RestoreBy = Literal["fingerprint", "revision"]
"""Which saved entries a restore admits: those of this store's weights fingerprint, or every entry
of a snapshot saved under this store's revision label (re-keyed under its fingerprint)."""


def blake2b(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def fingerprint(model: TinyLM) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Bugs:
    """Planted mistakes (all off in a correct store)."""

    namespace_unverified: bool = False
    """A hash hit compares parent and tokens but not the namespace: the digest is trusted to keep
    tenants and weights apart."""
    nothing_verified: bool = False
    """A hash hit is taken without any comparison."""
    tenant_unkeyed: bool = False
    """The namespace leaves the tenant out."""
    parent_unkeyed: bool = False
    """A block is keyed by its tokens and namespace alone, so it is found at any depth."""
    budget_ignored: bool = False
    """Entries are never evicted (the bytes held are still reported truthfully)."""
    restore_trusts_label: bool = False
    """A restore admits a snapshot whose revision label matches, re-keying its entries under this
    store's fingerprint."""
    update_keeps_entries: bool = False
    """Loading new weights keeps the entries and the fingerprint."""


@dataclass
class Entry:
    serial: int
    parent: int
    """Serial of the parent entry, -1 at the root."""
    depth: int
    tokens: tuple[int, ...]
    namespace: tuple[str, str]
    """(weights fingerprint, tenant)."""
    kv: KV
    """This block's keys and values, per layer [1, H, block, D]."""
    nbytes: int
    used: int = 0
    children: int = 0


@dataclass
class Counters:
    lookups: int = 0
    hits: int = 0
    collisions: int = 0
    stored: int = 0
    evicted: int = 0
    dropped: int = 0


@dataclass
class Lookup:
    """The entries a prompt hit, in order, and the bucket collisions met on the way."""

    entries: list[Entry] = field(default_factory=list)
    collisions: int = 0


class BlockStore:
    """The store: a model, its block cache, and how requests go through them."""

    def __init__(
        self,
        model: TinyLM,
        *,
        block_size: int,
        capacity_bytes: int,
        revision: str,
        hash_fn: Callable[[bytes], bytes] = blake2b,
        verify: Verify = "key",
        restore_by: RestoreBy = "fingerprint",
        bugs: Bugs = Bugs(),
    ) -> None:
        self.model, self.block_size, self.capacity_bytes = model, block_size, capacity_bytes
        self.revision, self.hash_fn, self.bugs = revision, hash_fn, bugs
        self.verify, self.restore_by = verify, restore_by
        self.fingerprint = fingerprint(model)
        self.buckets: dict[bytes, list[Entry]] = {}
        self.entries: dict[int, Entry] = {}
        self.bytes_held = 0
        self.counters = Counters()
        self._serial = 0
        self._clock = 0

    # keys ---------------------------------------------------------------------------------------
    def namespace(self, tenant: str | None) -> tuple[str, str]:
        return (self.fingerprint, "" if tenant is None or self.bugs.tenant_unkeyed else tenant)

    def digest(self, parent: int, tokens: tuple[int, ...], namespace: tuple[str, str]) -> bytes:
        head = struct.pack("<q", -2 if self.bugs.parent_unkeyed else parent)
        body = struct.pack(f"<{len(tokens)}q", *tokens)
        return self.hash_fn(head + body + "\0".join(namespace).encode())

    def _matches(self, entry: Entry, parent: int, tokens: tuple[int, ...], namespace: tuple[str, str]) -> bool:
        if self.bugs.nothing_verified or self.verify == "nothing":
            return True
        same_place = self.bugs.parent_unkeyed or entry.parent == parent
        trusted = self.bugs.namespace_unverified or self.verify == "tokens"
        same_namespace = trusted or entry.namespace == namespace
        return same_place and entry.tokens == tokens and same_namespace

    def _find(self, parent: int, tokens: tuple[int, ...], namespace: tuple[str, str]) -> tuple[Entry | None, bool]:
        bucket = self.buckets.get(self.digest(parent, tokens, namespace), [])
        for entry in bucket:
            if self._matches(entry, parent, tokens, namespace):
                return entry, False
        return None, bool(bucket)

    def lookup(self, tokens: list[int], tenant: str | None) -> Lookup:
        """Entries for the prompt's full blocks, from the first, up to the first miss."""
        found, namespace, parent = Lookup(), self.namespace(tenant), -1
        self._clock += 1
        for start in range(0, len(tokens) - len(tokens) % self.block_size, self.block_size):
            self.counters.lookups += 1
            entry, collided = self._find(parent, tuple(tokens[start : start + self.block_size]), namespace)
            found.collisions += collided
            self.counters.collisions += collided
            if entry is None:
                break
            entry.used = self._clock
            found.entries.append(entry)
            parent = entry.serial
        self.counters.hits += len(found.entries)
        return found

    # storing and evicting -----------------------------------------------------------------------
    def store(self, tokens: list[int], tenant: str | None, kv: KV, hit: list[Entry]) -> int:
        """Store the prompt's full blocks after the ones that hit; returns the entries added."""
        namespace, bs = self.namespace(tenant), self.block_size
        parent = hit[-1].serial if hit else -1
        keep = {e.serial for e in hit}
        added = 0
        for depth in range(len(hit), len(tokens) // bs):
            block = tuple(tokens[depth * bs : (depth + 1) * bs])
            existing, _ = self._find(parent, block, namespace)
            if existing is not None:
                parent = existing.serial
                keep.add(parent)
                continue
            payload = [
                (k[:, :, depth * bs : (depth + 1) * bs].clone(), v[:, :, depth * bs : (depth + 1) * bs].clone())
                for k, v in kv
            ]
            entry = self._insert(parent, depth, block, namespace, payload, keep)
            if entry is None:
                break
            keep.add(entry.serial)
            parent = entry.serial
            added += 1
        return added

    def _insert(
        self, parent: int, depth: int, tokens: tuple[int, ...], namespace: tuple[str, str], kv: KV, keep: set[int]
    ) -> Entry | None:
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
        if not self._make_room(nbytes, keep):
            self.counters.dropped += 1
            return None
        self._clock += 1
        entry = Entry(self._serial, parent, depth, tokens, namespace, kv, nbytes, used=self._clock)
        self._serial += 1
        self.entries[entry.serial] = entry
        self.buckets.setdefault(self.digest(parent, tokens, namespace), []).append(entry)
        if parent in self.entries:
            self.entries[parent].children += 1
        self.bytes_held += nbytes
        self.counters.stored += 1
        return entry

    def _make_room(self, nbytes: int, keep: set[int]) -> bool:
        if self.bugs.budget_ignored:
            return True
        while self.bytes_held + nbytes > self.capacity_bytes:
            leaves = [e for e in self.entries.values() if e.children == 0 and e.serial not in keep]
            if not leaves:
                return False
            self._remove(min(leaves, key=lambda e: e.used))
            self.counters.evicted += 1
        return True

    def _remove(self, entry: Entry) -> None:
        del self.entries[entry.serial]
        digest = self.digest(entry.parent, entry.tokens, entry.namespace)
        self.buckets[digest].remove(entry)
        if not self.buckets[digest]:
            del self.buckets[digest]
        if entry.parent in self.entries:
            self.entries[entry.parent].children -= 1
        self.bytes_held -= entry.nbytes

    def drop_where(self, doomed: Callable[[Entry], bool]) -> int:
        """Drop matching entries and everything stored below them."""
        gone = {s for s, e in self.entries.items() if doomed(e)}
        grew = True
        while grew:
            below = {s for s, e in self.entries.items() if e.parent in gone and s not in gone}
            gone |= below
            grew = bool(below)
        for serial in sorted(gone, reverse=True):
            self._remove(self.entries[serial])
        return len(gone)

    # weights -------------------------------------------------------------------------------------
    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state)
        if self.bugs.update_keeps_entries:
            return
        old, self.fingerprint = self.fingerprint, fingerprint(self.model)
        self.drop_where(lambda e: e.namespace[0] == old)

    # snapshots -----------------------------------------------------------------------------------
    def save(self, file: Path) -> int:
        order = sorted(self.entries)
        torch.save(
            {
                "revision": self.revision,
                "fingerprint": self.fingerprint,
                "block_size": self.block_size,
                "entries": [
                    {
                        "serial": e.serial,
                        "parent": e.parent,
                        "depth": e.depth,
                        "tokens": list(e.tokens),
                        "namespace": list(e.namespace),
                        "kv": e.kv,
                    }
                    for e in (self.entries[s] for s in order)
                ],
            },
            file,
        )
        return len(order)

    def restore(self, file: Path) -> tuple[int, dict[str, int]]:
        """Admit the snapshot's compatible entries (parents first); (admitted, refused by reason)."""
        snapshot = torch.load(file, weights_only=True)
        refused: dict[str, int] = {}
        admitted, revived = 0, {-1: -1}

        def refuse(reason: str) -> None:
            refused[reason] = refused.get(reason, 0) + 1

        if snapshot["block_size"] != self.block_size:
            refuse("block size")
            return 0, refused
        by_label = self.bugs.restore_trusts_label or self.restore_by == "revision"
        trusted = by_label and snapshot["revision"] == self.revision
        for item in snapshot["entries"]:
            weights, tenant = item["namespace"]
            if weights != self.fingerprint and not trusted:
                refuse("other weights")
                continue
            if item["parent"] not in revived:
                refuse("parent not restored")
                continue
            entry = self._insert(
                revived[item["parent"]],
                item["depth"],
                tuple(item["tokens"]),
                (self.fingerprint, tenant),
                [(k, v) for k, v in item["kv"]],
                set(revived.values()),
            )
            if entry is None:
                refuse("capacity")
                continue
            revived[item["serial"]] = entry.serial
            admitted += 1
        return admitted, refused

    # requests ------------------------------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, tokens: list[int], past: KV | None, start: int) -> tuple[torch.Tensor, KV]:
        batch = torch.tensor([tokens[start:]], device=next(self.model.parameters()).device)
        logits, kv = self.model.step(batch, start, past)
        return logits[0].float(), kv

    @staticmethod
    def joined(entries: list[Entry], tokens: int) -> KV | None:
        """The hit entries' K/V as one past of `tokens` positions."""
        if not entries:
            return None
        layers = len(entries[0].kv)
        return [
            (
                torch.cat([e.kv[i][0] for e in entries], dim=2)[:, :, :tokens],
                torch.cat([e.kv[i][1] for e in entries], dim=2)[:, :, :tokens],
            )
            for i in range(layers)
        ]
