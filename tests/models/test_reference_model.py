"""The reference decoder and the reference adapter: cached paths compute what a full pass does."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from pydantic import ValidationError

import gate.models.kv_cache as cache_module
import gate.models.reference as model_module
from gate.adapters.reference import Options
from gate.checks._compare import random_tokens
from gate.models.reference import KVCache, ModelConfig, build_model, causal_mask, prefill
from gate.protocols import AttentionProbe, DecodePath, LayerTracing, LayoutBoundaries, Session
from tests.support.reference import path

CFG = ModelConfig.from_preset("tiny", max_len=128)


@pytest.mark.parametrize("module", [model_module, cache_module])
def test_model_knows_nothing_of_the_gate(module: object) -> None:
    source = inspect.getsource(module)  # type: ignore[arg-type]
    code = source.replace(getattr(module, "__doc__", None) or "", "")
    assert not re.search(r"^\s*(from|import) gate(?!\.models\.)", code, re.MULTILINE)
    assert not re.search(r"\bfault", code, re.IGNORECASE)  # faults are applied from outside (gate/models/faults.py)


def test_presets_and_overrides() -> None:
    cfg = ModelConfig.from_preset("tiny", n_layers=3, window=None)
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim) == (3, 64, 4, 2, 16)
    assert ModelConfig.from_preset("tiny-abs").abs_positions and not ModelConfig.from_preset("tiny-abs").rope
    with pytest.raises(ValueError, match="unknown preset"):
        ModelConfig.from_preset("huge")
    with pytest.raises(ValueError):
        ModelConfig(d_model=64, n_heads=4, n_kv_heads=3)


def test_mask_carries_the_cache_offset() -> None:
    # one query against five keys: offset 4, it sees every key (background: parity)
    assert not causal_mask(1, 5, None, torch.device("cpu")).any()
    full = causal_mask(3, 3, None, torch.device("cpu"))
    assert torch.equal(full, torch.ones(3, 3, dtype=torch.bool).triu(1))
    windowed = causal_mask(1, 5, 2, torch.device("cpu"))
    assert windowed.tolist() == [[True, True, True, False, False]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["static", "dynamic"])
@pytest.mark.parametrize("chunk", [None, 7])
def test_cached_steps_match_the_full_pass(dtype: torch.dtype, layout: str, chunk: int | None) -> None:
    model = build_model(CFG, seed=3, dtype=dtype)
    tokens = random_tokens(CFG.vocab_size, 2, 100, seed=3)
    full = model(tokens).float()
    cache = KVCache.for_model(CFG, 2, layout=layout, dtype=dtype)  # type: ignore[arg-type]
    parts = [prefill(model, tokens[:, :61], cache, chunk_size=chunk)]
    parts += [model.step(tokens[:, i : i + 1], cache, cache.pos) for i in range(61, 100)]
    got = torch.cat(parts, dim=1).float()
    atol = 1e-4 if dtype == torch.float32 else 0.15
    assert cache.pos == 100
    assert (got - full).abs().max() < atol
    assert (got.argmax(-1) == full.argmax(-1)).float().mean() > 0.97


def test_static_and_dynamic_layouts_are_bit_identical() -> None:
    model = build_model(CFG, seed=1)
    tokens = random_tokens(CFG.vocab_size, 2, 40, seed=1)
    outs = []
    for layout in ("static", "dynamic"):
        cache = KVCache.for_model(CFG, 2, layout=layout, block_size=16)  # type: ignore[arg-type]
        outs.append(
            torch.cat([prefill(model, tokens[:, :23], cache), prefill(model, tokens[:, 23:], cache, chunk_size=1)], 1)
        )
    assert torch.equal(outs[0], outs[1])


def test_dynamic_cache_grows_in_blocks_and_tail_is_ignorable() -> None:
    model = build_model(CFG, seed=2)
    tokens = random_tokens(CFG.vocab_size, 1, 21, seed=2)
    cache = KVCache.for_model(CFG, 1, layout="dynamic", block_size=16)
    prefill(model, tokens[:, :20], cache)
    assert cache.capacity == 32 and cache.pos == 20
    clean = model.step(tokens[:, 20:], cache, 20)
    cache.crop(20)
    cache.fill_unused(float("nan"))  # a correct read never touches the unused tail
    assert torch.equal(model.step(tokens[:, 20:], cache, 20), clean)


def test_crop_supports_rollback() -> None:
    model = build_model(CFG, seed=4)
    tokens = random_tokens(CFG.vocab_size, 2, 30, seed=4)
    cache = KVCache.for_model(CFG, 2)
    prefill(model, tokens[:, :12], cache)
    suffix = model.step(tokens[:, 12:], cache, start_pos=12)
    assert torch.allclose(suffix, model(tokens)[:, 12:], atol=1e-4)
    cache.crop(20)  # speculative rollback: forget positions >= 20
    again = model.step(tokens[:, 20:], cache, start_pos=20)
    assert torch.equal(again, suffix[:, 8:])


def test_reset_clears_position_state() -> None:
    cache = KVCache.for_model(CFG, 1)
    prefill(build_model(CFG), torch.zeros(1, 5, dtype=torch.long), cache)
    cache.reset()
    assert cache.pos == 0 and all(not k.any() for k in cache.k)


def test_absolute_positions_and_window_paths_agree_with_full() -> None:
    for preset, extra in (("tiny-abs", {}), ("tiny", {"window": 8})):
        full, cached = path("full", preset=preset, **extra), path("dynamic", preset=preset, **extra)
        tokens = random_tokens(full.vocab_size, 2, 40, seed=0)
        session = cached.new_session(2)
        got = torch.cat([session.prefill(tokens[:, :30]), session.append(tokens[:, 30:])], 1)
        assert (got - full.full_logits(tokens)).abs().max() < 1e-4


def test_adapter_paths_implement_the_protocols() -> None:
    for kind in ("full", "dynamic", "static", "chunked"):
        built = path(kind)
        assert isinstance(built, DecodePath) and isinstance(built, LayerTracing)
        assert isinstance(built, AttentionProbe) and isinstance(built, LayoutBoundaries)
        assert built.uses_cache == (kind != "full")
        session = built.new_session(1)
        assert isinstance(session, Session)
        session.prefill(torch.zeros(1, 3, dtype=torch.long))
        exercise = session.exercise()
        assert {"cache_len", "cached_steps", "cache_bytes"} <= set(exercise)
    assert path("chunked", chunk_size=32).layout_boundaries()[:2] == (32, 64)
    assert path("dynamic").layout_boundaries()[:2] == (16, 32)
    assert path("static").layout_boundaries() == ()


def test_identity_names_weights_and_config() -> None:
    a, b, c = path("static"), path("full"), path("static", seed=1)
    assert a.identity()["weights_sha256"] == b.identity()["weights_sha256"]
    assert a.identity()["weights_sha256"] != c.identity()["weights_sha256"]
    assert a.identity()["config_sha256"] == c.identity()["config_sha256"]
    assert a.identity()["torch"] == torch.__version__


def test_options_are_validated() -> None:
    assert Options(path="chunked", chunk_size=8).path == "chunked"
    for bad in (
        {"path": "paged"},
        {"fault": "no-such-fault"},
        {"path": "full", "fault": "stale-weights"},
        {"preset": "huge"},
        {"layers": 0},
        {"unknown": 1},
    ):
        with pytest.raises(ValidationError):
            Options.model_validate(bad)


def _repeated_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Attention as the decoder computed it before grouped heads were read in place: K/V repeated."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


@pytest.mark.parametrize(("q_len", "k_len"), [(1, 300), (7, 300), (300, 300)])
def test_grouped_heads_read_in_place_give_the_repeated_heads_bits(q_len: int, k_len: int) -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, q_len, 16, generator=gen)
    k, v = (torch.randn(2, 2, 512, 16, generator=gen)[:, :, :k_len] for _ in range(2))  # cache views
    core = model_module.AttentionCore(window=None)
    allowed = ~causal_mask(q_len, k_len, None, q.device)
    assert torch.equal(core(q, k, v), _repeated_heads(q, k, v, allowed))
    padding = torch.zeros(2, k_len, dtype=torch.bool)
    padding[0, :3] = True  # a left-padded row
    own = torch.eye(k_len, dtype=torch.bool)[k_len - q_len :]  # a pad query still sees itself
    rows = allowed[None] & (~padding[:, None, :] | own[None])
    assert torch.equal(core(q, k, v, padding), _repeated_heads(q, k, v, rows[:, None]))


def test_a_decode_step_copies_no_cache_sized_kv() -> None:
    """A single-token step reads the cache in place: no copy as long as the cache (a dense sweep of
    single-token appends would otherwise copy O(n^2) K/V)."""
    model = build_model(ModelConfig.from_preset("tiny", max_len=2048), seed=0)
    cache = KVCache.for_model(model.config, 2)
    tokens = random_tokens(model.config.vocab_size, 2, 1001, 0)
    prefill(model, tokens[:, :1000], cache)
    with torch.profiler.profile(record_shapes=True) as prof:
        model.step(tokens[:, 1000:], cache, start_pos=1000)
    copied = [
        (e.key, e.input_shapes)
        for e in prof.key_averages(group_by_input_shape=True)
        if any(1001 in shape or 2048 in shape for shape in e.input_shapes if isinstance(shape, list))
        and e.key in ("aten::copy_", "aten::repeat_interleave", "aten::contiguous", "aten::clone")
    ]
    assert copied == []
