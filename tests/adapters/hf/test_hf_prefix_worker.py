"""The hf `prefix-reuse` path's block prefix cache (gate.protocols.PrefixCaching over transformers):
blocks read out of one DynamicCache and written into another give the full pass's logits; every
identity sibling really computes something else; the prefix checks pass with every control caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from transformers import cache_utils

from gate.cli.main import cli
from gate.prefix.faults import PREFIX_FAULTS
from gate.protocols import PrefixCaching
from tests.adapters.hf.subjects import path
from tests.support.repo import EXAMPLES

MISTRAL = "mistral-sliding-window"  # rope, GQA and a 32-token window: every identity field varies


def ids(length: int, seed: int = 1) -> list[int]:
    return torch.randint(0, 256, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def worker(model: str = MISTRAL) -> PrefixCaching:
    fresh = path(model, path="prefix-reuse", block_size=4)
    assert isinstance(fresh, PrefixCaching)
    return fresh.fresh()  # an empty cache of its own: the built path is shared between tests


def test_a_hit_writes_stored_blocks_into_a_transformers_cache_and_matches_the_full_pass() -> None:
    candidate = path(MISTRAL, path="prefix-reuse", block_size=4)
    w = worker()
    assert isinstance(w.kv_cache(1), cache_utils.DynamicCache)  # type: ignore[attr-defined]
    first, shared = ids(70), ids(70)[:50] + ids(20, seed=2)  # longer than the 32-token window
    w.request(first, tenant="t")
    reply = w.request(shared, tenant="t", new_tokens=4)
    assert reply.stats.reused_spans == [(0, 48)] and reply.stats.hit_blocks == 12
    full = candidate.full_logits(torch.tensor([shared + reply.continuation[:-1]]))[0]
    assert (reply.logits - full[reply.computed_positions]).abs().max().item() < 1e-4
    assert (reply.continuation_logits[1:] - full[len(shared) :]).abs().max().item() < 1e-4
    assert reply.continuation == full[len(shared) - 1 :].argmax(-1).tolist()


@pytest.mark.parametrize("field", ["model-revision", "tokenizer", "kv-dtype", "rope-scaling", "attention-window"])
def test_each_sibling_computes_something_else_and_misses_the_base_entries(field: str) -> None:
    base = worker()
    prompt = ids(60)
    own = base.recompute(prompt).logits
    base.request(prompt)
    sibling = base.sibling(field)
    assert sibling is not None
    assert sibling.identity_for() != base.identity_for()
    other = sibling.recompute(prompt).logits
    assert (other - own).abs().max().item() > 0.05, f"{field}: the sibling computes the same logits"
    first, again = sibling.request(prompt), sibling.request(prompt)
    assert first.stats.reused_tokens == 0 and again.stats.reused_tokens == 59  # one store, keyed apart
    assert (again.logits - other[again.computed_positions]).abs().max().item() < 0.05


def test_adapters_are_low_rank_deltas_on_the_kv_projections_and_are_keyed() -> None:
    w = worker()
    prompt = ids(40)
    plain, tuned = w.recompute(prompt).logits, w.recompute(prompt, adapter="lora-a").logits
    assert w.adapters() == ("lora-a", "lora-b") and (plain - tuned).abs().max().item() > 0.05
    w.request(prompt, adapter="lora-a")
    assert w.request(prompt, adapter="lora-b").stats.reused_tokens == 0
    assert w.request(prompt, adapter="lora-a").stats.reused_tokens == 39
    w.update_weights("lora-a", seed=3)
    assert w.identity_for(adapter="lora-a").adapter == "lora-a@r1"
    assert w.request(prompt, adapter="lora-a").stats.reused_tokens == 0  # the old revision was invalidated


def test_a_field_a_model_cannot_vary_is_reported_not_invented() -> None:
    gpt2, llama = worker("gpt2"), worker("llama")
    assert gpt2.adapters() == ()  # fused c_attn: no k_proj/v_proj to adapt
    assert gpt2.sibling("rope-scaling") is None and gpt2.identity_for().rope == "none"
    assert llama.sibling("attention-window") is None and llama.sibling("rope-scaling") is not None


def test_prefix_faults_sit_beside_session_faults() -> None:
    candidate = path(MISTRAL, path="prefix-reuse", block_size=4)
    assert set(PREFIX_FAULTS) <= set(candidate.faults()) and "off-by-one-pos" in candidate.faults()
    leaky = candidate.with_fault("key-ignores-tenant")
    assert isinstance(leaky, PrefixCaching) and leaky.name.endswith("+key-ignores-tenant")
    prompt = ids(30)
    leaky.request(prompt, tenant="a")
    assert leaky.request(prompt, tenant="b").stats.reused_tokens == 28  # the planted leak
    shifted = candidate.with_fault("off-by-one-pos")
    assert isinstance(shifted, PrefixCaching) and shifted.cache_state()["blocks"] == 0


@pytest.mark.slow
def test_the_example_passes_with_every_control_detected(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["run", str(EXAMPLES / "hf-prefix-reuse.yaml"), "--out", str(tmp_path), "--threads", "1"]
    )
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "results.json").read_text())
    checks = {c["check"]: c for c in record["checks"]}
    assert set(checks) == {
        "prefix-reuse-parity",
        "cache-identity",
        "tenant-isolation",
        "invalidation",
        "hash-collision",
    }
    outcomes = [(c["check"], x["fault"], x["outcome"]) for c in checks.values() for x in c["controls"]]
    assert len(outcomes) == 16 and all(o == "detected" for _, _, o in outcomes), outcomes
    assert checks["prefix-reuse-parity"]["exercise"]["reused_tokens"] > 0
    assert record["subjects"]["candidate"]["prefix_cache"]["block_size"] == 4


def test_rope_configurations_one_factor_cannot_describe_get_no_sibling() -> None:
    from types import SimpleNamespace

    from gate.adapters.hf.prefix_worker import HFVariant, _flat_rope, _rope_by_layer_type, _variant

    per_layer_type = {"full_attention": {"rope_type": "default", "rope_theta": 1e4}, "sliding_attention": {}}
    longrope = {"rope_type": "longrope", "short_factor": [1.0, 2.0], "rope_theta": 1e4}
    for rope in (per_layer_type, longrope):
        variant = _variant(SimpleNamespace(rope_parameters=rope, sliding_window=None))
        assert hash(variant) and _flat_rope(variant.rope) is None  # hashable for the model memo; not flat
    # per layer type (Gemma 3) each type's flat parameters are scaled; factor lists never are
    nested = _variant(SimpleNamespace(rope_parameters=per_layer_type, sliding_window=None))
    assert _rope_by_layer_type(nested.rope) == {
        "full_attention": per_layer_type["full_attention"],
        "sliding_attention": {},
    }
    assert _rope_by_layer_type(_variant(SimpleNamespace(rope_parameters=longrope, sliding_window=None)).rope) is None
    plain = _variant(SimpleNamespace(rope_parameters={"rope_type": "default", "rope_theta": 1e4}))
    assert plain == HFVariant(rope=(("rope_theta", 1e4), ("rope_type", "default")), window=None)
