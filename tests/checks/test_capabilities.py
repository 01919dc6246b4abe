"""One capability accessor (gate.protocols.capabilities): the protocols a path satisfies, the flags read once."""

from __future__ import annotations

from types import SimpleNamespace

from gate.protocols import Capability, capabilities
from tests.support.reference import path


def test_a_cached_path_offers_sessions_in_batches_and_continuous_batching_by_its_flag() -> None:
    offered = capabilities(path("static"))
    assert {Capability.DECODE_PATH, Capability.BATCHED_SESSIONS} <= offered
    assert (Capability.CONTINUOUS_BATCHING in offered) == bool(path("static").continuous_batching)
    assert Capability.ENGINE_SERVING not in offered and Capability.ENGINE_SALT not in offered


def test_a_prefix_store_offers_the_prefix_capabilities() -> None:
    from gate.adapters.reference import Options, ReferenceAdapter

    store = ReferenceAdapter().build(
        Options(path="prefix-cache", preset="tiny", max_len=128, block_size=4), device="cpu", dtype="float32", seed=0
    )
    offered = capabilities(store)
    assert {Capability.PREFIX_SERVING, Capability.PREFIX_HASHING, Capability.PREFIX_BUDGET} <= offered


def test_nothing_is_offered_by_an_object_that_satisfies_no_protocol() -> None:
    assert capabilities(SimpleNamespace(salt_field="cache_salt", continuous_batching=True)) == frozenset()
