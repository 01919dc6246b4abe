"""The block cache on its own: ordered chained keys, verification, eviction, invalidation, save/restore."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from gate.prefix.cache import CacheIdentity, CacheRules, PrefixCache, weak_hash
from gate.prefix.faults import RULE_FAULTS, apply_rule_faults

IDENTITY = CacheIdentity(
    model_revision="r0",
    tokenizer="tok0",
    rope="base=10000",
    attention_window=None,
    attention_mask="causal",
    kv_dtype="float32",
)


def payload(tokens: Sequence[int], start: int) -> tuple[torch.Tensor, ...]:
    """A fake K/V payload that records which (position, token) produced it: [1, bs, 2]."""
    rows = [[float(start + i), float(t)] for i, t in enumerate(tokens)]
    return (torch.tensor([rows]),)


def fill(cache: PrefixCache, tokens: Sequence[int], identity: CacheIdentity = IDENTITY) -> int:
    """Store every full block of `tokens` after the blocks that hit; returns the hit tokens."""
    hits = cache.match(tokens, identity)
    parent = hits[-1][1] if hits else None
    bs = cache.block_size
    for start in range(len(hits) * bs, len(tokens) - len(tokens) % bs, bs):
        parent = cache.insert(
            parent, start, tokens[start : start + bs], identity, payload(tokens[start : start + bs], start)
        )
    return len(hits) * bs


def reused_positions(cache: PrefixCache, tokens: Sequence[int], identity: CacheIdentity = IDENTITY) -> list[int]:
    return [start + i for start, _ in cache.match(tokens, identity) for i in range(cache.block_size)]


def test_identity_example_shares_exactly_the_first_two_positions() -> None:
    cache = PrefixCache(block_size=1, byte_budget=1 << 20)
    fill(cache, [11, 24, 31, 42, 57])
    assert reused_positions(cache, [11, 24, 99, 42, 57]) == [0, 1]


def test_unordered_blocks_fault_reuses_the_later_equal_ids() -> None:
    cache = PrefixCache(block_size=1, byte_budget=1 << 20, rules=RULE_FAULTS["unordered-blocks"](CacheRules()))
    fill(cache, [11, 24, 31, 42, 57])
    assert reused_positions(cache, [11, 24, 99, 42, 57]) == [0, 1, 3, 4]


def test_chained_key_refuses_a_block_at_another_offset_but_the_position_fault_serves_it() -> None:
    doc = [5, 6, 7, 8]
    good = PrefixCache(block_size=2, byte_budget=1 << 20)
    fill(good, [1, 2, *doc])
    assert reused_positions(good, [*doc, 9]) == []
    bad = PrefixCache(block_size=2, byte_budget=1 << 20, rules=RULE_FAULTS["key-ignores-position"](CacheRules()))
    fill(bad, [1, 2, *doc])
    hits = bad.match([*doc, 9], IDENTITY)
    assert [(s, b.start) for s, b in hits if b] == [(0, 2), (2, 4)]  # served at offset 0, made at 2


@pytest.mark.parametrize(
    "attr,fault",
    [("adapter", "key-ignores-adapter"), ("tenant", "key-ignores-tenant"), ("model_revision", "key-ignores-revision")],
)
def test_identity_fields_partition_the_cache_unless_the_key_drops_them(attr: str, fault: str) -> None:
    other = IDENTITY.replace(**{attr: "other"})
    good = PrefixCache(block_size=2, byte_budget=1 << 20)
    fill(good, [1, 2, 3, 4, 5])
    assert reused_positions(good, [1, 2, 3, 4, 5]) == [0, 1, 2, 3]
    assert reused_positions(good, [1, 2, 3, 4, 5], other) == []
    bad = PrefixCache(block_size=2, byte_budget=1 << 20, rules=apply_rule_faults(CacheRules(), (fault,)))
    fill(bad, [1, 2, 3, 4, 5])
    assert reused_positions(bad, [1, 2, 3, 4, 5], other) == [0, 1, 2, 3]


def test_weak_hash_collisions_are_detected_by_verification_and_served_by_trust_hash() -> None:
    rules = CacheRules(hash=weak_hash(1), hash_name="weak-1bit")  # two buckets: collisions certain
    prompts = [[i, i + 1, i + 2, i + 3, 0] for i in range(0, 40, 4)]
    cache = PrefixCache(block_size=2, byte_budget=1 << 20, rules=rules)
    for p in prompts:
        fill(cache, p)
    assert cache.counters.collisions_detected > 0
    for p in prompts:
        for start, block in cache.match(p, IDENTITY):
            assert block is not None and block.tokens == tuple(p[start : start + 2]) and block.start == start
    trusting = PrefixCache(block_size=2, byte_budget=1 << 20, rules=RULE_FAULTS["trust-hash"](rules))
    fill(trusting, prompts[0])
    wrong = [b for p in prompts[1:] for s, b in trusting.match(p, IDENTITY) if b and b.tokens != tuple(p[s : s + 2])]
    assert wrong, "a trusting cache serves a block whose tokens differ"


def test_eviction_keeps_the_byte_budget_and_evicts_least_recent_leaves_first() -> None:
    one = payload([0, 0], 0)[0]
    per_block = one.numel() * one.element_size()
    cache = PrefixCache(block_size=2, byte_budget=3 * per_block)
    fill(cache, [1, 2, 3, 4, 5])  # 2 blocks, chained
    fill(cache, [7, 8, 0])  # 1 block
    cache.match([1, 2, 3, 4, 5], IDENTITY)  # touch the first chain
    fill(cache, [9, 9, 0])  # needs room: the LRU leaf is [7, 8]
    assert cache.bytes_held <= cache.byte_budget
    assert cache.counters.evicted == 1
    assert reused_positions(cache, [7, 8, 0]) == []
    assert reused_positions(cache, [1, 2, 3, 4, 5]) == [0, 1, 2, 3]
    assert all(b.children == 0 or b.uid in {x.parent for x in cache.blocks()} for b in cache.blocks())


def test_invalidation_drops_descendants_too() -> None:
    cache = PrefixCache(block_size=1, byte_budget=1 << 20)
    fill(cache, [1, 2, 3])
    fill(cache, [1, 2, 3], IDENTITY.replace(adapter="a"))
    dropped = cache.invalidate(lambda b: b.identity.adapter == "a" and b.start == 0)
    assert dropped == 3 and len(cache) == 3
    assert reused_positions(cache, [1, 2, 3], IDENTITY.replace(adapter="a")) == []


def test_save_restore_revives_compatible_blocks_rekeyed_and_refuses_the_rest(tmp_path: Path) -> None:
    cache = PrefixCache(block_size=2, byte_budget=1 << 20)
    fill(cache, [1, 2, 3, 4, 5])
    fill(cache, [1, 2, 3, 4, 5], IDENTITY.replace(model_revision="r-old"))
    file = tmp_path / "cache.safetensors"
    assert cache.save(file) == 4

    def accept(identity: CacheIdentity, tensors: tuple[torch.Tensor, ...]) -> str | None:
        return None if identity.worker_part() == IDENTITY.worker_part() else "model-revision differs"

    restored = PrefixCache(block_size=2, byte_budget=1 << 20, rules=CacheRules(hash=weak_hash(2)))
    report = restored.restore(file, accept)
    assert report.restored == 2 and report.dropped == {"model-revision differs": 1, "parent block not restored": 1}
    hits = restored.match([1, 2, 3, 4, 5], IDENTITY)
    assert [b.start for _, b in hits if b] == [0, 2]
    assert torch.equal(hits[1][1].payload[0], payload([3, 4], 2)[0]) if hits[1][1] else False
    assert PrefixCache(block_size=1, byte_budget=1 << 20).restore(file, accept).restored == 0
