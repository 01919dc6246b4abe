"""hf attention_probe: background: mask oracle's mask oracle through transformers' cache, mask and attention code."""

from __future__ import annotations

import pytest
import torch

from gate.adapters.hf import compat
from gate.adapters.hf.probe import TAIL_POISON, poison_unused
from gate.checks.mask_oracle import MaskOracleParams, mask_oracle, oracle_cases
from gate.protocols import AttentionProbe
from tests.adapters.hf.subjects import path
from tests.support.reference import ctx

needs_probe = pytest.mark.skipif(
    not compat.probe_supported(),
    reason=f"the probe is validated on the 5.24 masking API, not {compat.transformers.__version__}",
)


def test_probe_is_offered_only_where_validated() -> None:
    assert isinstance(path(path="static"), AttentionProbe) == compat.probe_supported()


def oracle(candidate: object) -> tuple[str, str | None, str]:
    out = mask_oracle(ctx(path("llama"), candidate), MaskOracleParams())
    return out.status, (out.diagnosis or {}).get("bug_class"), out.message


@needs_probe
@pytest.mark.parametrize(
    ("model", "options"),
    [
        ("llama", {"path": "dynamic"}),
        ("llama", {"path": "static"}),
        ("mistral-sliding-window", {"path": "sliding-window"}),
    ],
)
def test_the_oracle_passes_through_transformers_cache_and_mask(model: str, options: dict[str, object]) -> None:
    status, _, message = oracle(path(model, **options))
    assert status == "pass", message
    assert "7.5, 12.4" in message


@needs_probe
def test_the_seed_fixture_reads_the_cached_positions() -> None:
    candidate = path("llama", path="static")
    case = oracle_cases(MaskOracleParams(), 0)[0]
    out = candidate.attention_probe(case.requests, poison_tail=True)
    assert out[0][1][0, 0, :, 0].tolist() == pytest.approx([7.5, 12.4])
    assert out[0][1][1, 0, :, 0].tolist() == pytest.approx([(3 + 5 + 7 + 11) / 4, (3 + 5 + 7 + 11 + 13) / 5])


@needs_probe
def test_a_window_shorter_than_the_fixture_is_not_full_attention() -> None:
    status, bug, _ = oracle(path("llama", path="sliding-window", window=6))
    assert status == "fail" and bug == "cached-read"


@needs_probe
@pytest.mark.parametrize(
    ("kind", "fault", "bug"),
    [
        ("dynamic", "mask-origin-reset", "mask-offset"),
        ("dynamic", "truncated-last-block", "kv-truncation"),
        ("dynamic", "cross-request-handle", "foreign-state"),
        ("static", "truncated-last-block", "kv-truncation"),
        ("static", "cross-request-handle", "foreign-state"),
        ("static", "poisoned-tail-read", "read-past-valid-length"),
        ("static", "reset-keeps-position", "reset-leak"),
    ],
)
def test_faults_act_on_the_probe_and_are_named(kind: str, fault: str, bug: str) -> None:
    status, found, message = oracle(path("llama", path=kind).with_fault(fault))
    assert status == "fail" and found == bug, message


@needs_probe
def test_a_static_tail_is_poisoned_and_left_unread() -> None:
    candidate = path("llama", path="static")
    cache = candidate.make_cache(1)
    q = torch.zeros(1, 1, 2, 1)
    v = torch.tensor([2.0, 4.0])[None, None, :, None]
    poison_unused(cache, q, v)  # allocates through lazy_initialization, then poisons every slot
    assert bool((cache.layers[0].values == TAIL_POISON).all())
    out = candidate.attention_probe([[(q, q.clone(), v)]], poison_tail=True)
    assert out[0][0][0, 0, :, 0].tolist() == [2.0, 3.0]


@needs_probe
def test_only_exact_cache_kinds_offer_the_probe() -> None:
    assert isinstance(path("llama", path="prefix-reuse"), AttentionProbe)
    assert not isinstance(path("llama", path="full"), AttentionProbe)
