"""Planted prefix-cache bugs (negative controls), each a replacement of one cache rule: a function
from the correct `CacheRules` to a broken one, applied by the path when it builds its cache.
`skip-invalidation` lives on the worker instead: its weight update forgets to invalidate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gate.prefix.cache import CacheIdentity, CacheRules

RuleFault = Callable[[CacheRules], CacheRules]


def _key_ignoring(attr: str) -> RuleFault:
    """The chained key with one identity attribute left out of the material."""

    def fault(rules: CacheRules) -> CacheRules:
        inner = rules.key

        def key(parent: int | None, start: int, tokens: tuple[int, ...], identity: CacheIdentity) -> tuple[Any, ...]:
            return inner(parent, start, tokens, identity.replace(**{attr: None}))

        return replace(rules, key=key)

    return fault


def _key_ignores_position(rules: CacheRules) -> CacheRules:
    """Key a block by its tokens and identity alone: no parent, no start position, so a block is
    served at whatever offset the same ids appear (a document reused after another header)."""

    def key(parent: int | None, start: int, tokens: tuple[int, ...], identity: CacheIdentity) -> tuple[Any, ...]:
        return ("tokens-only", tokens, identity.material())

    return replace(rules, key=key)


def _unordered_blocks(rules: CacheRules) -> CacheRules:
    """Treat blocks as an unordered collection: keyed by (start, tokens, identity) without the
    parent, and matched after an earlier miss (the cache-identity example's later equal ids)."""

    def key(parent: int | None, start: int, tokens: tuple[int, ...], identity: CacheIdentity) -> tuple[Any, ...]:
        return ("positional", start, tokens, identity.material())

    # matched: every block that is found, even after a miss
    return replace(rules, key=key, matcher=lambda probes: [(s, b) for s, b in probes if b is not None])


def _trust_hash(rules: CacheRules) -> CacheRules:
    """Serve the first block in the hash bucket without comparing its key material."""
    return replace(rules, verify=lambda _stored, _wanted: True)


def _verify_ignores_identity(rules: CacheRules) -> CacheRules:
    """On a hash hit, compare parent, position and tokens but not the identity: the hash, which
    covers the identity, is trusted to keep tenants and adapters apart (it does, until it collides)."""
    return replace(rules, verify=lambda stored, wanted: stored[:-1] == wanted[:-1])


RULE_FAULTS: dict[str, RuleFault] = {
    "key-ignores-adapter": _key_ignoring("adapter"),
    "key-ignores-tenant": _key_ignoring("tenant"),
    "key-ignores-revision": _key_ignoring("model_revision"),
    "key-ignores-tokenizer": _key_ignoring("tokenizer"),
    "key-ignores-rope": _key_ignoring("rope"),
    "key-ignores-window": _key_ignoring("attention_window"),
    "key-ignores-kv-dtype": _key_ignoring("kv_dtype"),
    "key-ignores-position": _key_ignores_position,
    "unordered-blocks": _unordered_blocks,
    "trust-hash": _trust_hash,
    "verify-ignores-identity": _verify_ignores_identity,
}
WORKER_FAULTS = ("skip-invalidation",)
"""skip-invalidation: a weight or adapter update loads the new weights but neither invalidates the
cache nor changes the revision the cache is keyed on (the reset vLLM documents, forgotten)."""

PREFIX_FAULTS: tuple[str, ...] = (*RULE_FAULTS, *WORKER_FAULTS)


def apply_rule_faults(rules: CacheRules, faults: tuple[str, ...]) -> CacheRules:
    """The rules with each named cache fault applied, in order (worker faults are skipped)."""
    for name in faults:
        if name in RULE_FAULTS:
            rules = RULE_FAULTS[name](rules)
    return rules
