"""The attention-family presets: each builds, matches the full forward through a cache, and shows a
planted position fault; the hybrid one with its sliding layer evicting (benchmarks/hf_families.py
runs every path on every family; this is the fast evidence that the table is not the only one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from gate.adapters.hf import HFAdapter, Options, presets
from gate.errors import AdapterUnavailable
from tests.adapters.hf.subjects import path, run, tokens

NEW_FAMILIES = ("gemma3-hybrid", "llama-mqa", "gpt-neox-partial-rotary", "llama3-rope-scaling", "phi3-longrope")
PREFIX = 40  # past gemma3-hybrid's 32-token window: its sliding layer has evicted by the first append
# (the 96-token sequences stay below phi3-longrope's 128, where transformers switches its factors)
ROWS = slice(PREFIX, PREFIX + 11)


@pytest.mark.parametrize("family", NEW_FAMILIES)
def test_a_family_matches_the_full_forward_through_a_dynamic_cache_and_shows_off_by_one(family: str) -> None:
    reference, candidate = path(family), path(family, path="dynamic")
    toks = tokens()
    full = reference.full_logits(toks)
    got = run(candidate.new_session(2), toks, PREFIX)
    assert torch.equal(got.argmax(-1), full[:, ROWS].argmax(-1))
    assert (got - full[:, ROWS]).abs().max().item() < 1e-4
    bad = run(candidate.with_fault("off-by-one-pos").new_session(2), toks, PREFIX)
    assert (bad - full[:, ROWS]).abs().max().item() > 1e-2  # 100x the parity tolerance


@pytest.mark.parametrize("kind", ["dynamic", "static", "sliding-window"])
def test_the_hybrid_family_keeps_a_window_on_its_local_layer_only_and_stays_exact(kind: str) -> None:
    candidate = path("gemma3-hybrid", path=kind)
    toks = tokens(length=120)
    session = candidate.new_session(2)
    session.prefill(toks[:, :100])
    step = session.append(toks[:, 100:101])
    full = path("gemma3-hybrid").full_logits(toks[:, :101])[:, -1]
    assert torch.equal(step[:, 0].argmax(-1), full.argmax(-1)) and (step[:, 0] - full).abs().max().item() < 1e-4
    classes = session.exercise()["layer_classes"]
    assert any("Sliding" in name for name in classes) and any("Sliding" not in name for name in classes), classes
    # the local layer attends over its last 32 tokens, the global one over all 101: a cache that
    # ignored the layer types (everything full) would change the local layer's output
    assert "window" in candidate.layout_edges() and candidate.layout_edges()["window"] == (31, 32)


def test_the_hybrid_familys_window_changes_its_logits_past_the_window() -> None:
    """The sliding layer matters: the same model whose local window covers everything (same layer
    types, so the same rotary bases) agrees inside the window and disagrees past it."""
    hybrid = path("gemma3-hybrid")
    toks = tokens(length=100)
    config = hybrid.model.config
    try:
        config.sliding_window = 4096
        everything_full = hybrid.full_logits(toks)
    finally:
        config.sliding_window = 32
    windowed = hybrid.full_logits(toks)
    assert (windowed[:, :32] - everything_full[:, :32]).abs().max().item() < 1e-4  # inside the window: equal
    assert (windowed[:, 40:] - everything_full[:, 40:]).abs().max().item() > 1e-2


def test_identity_records_layer_types_window_kv_heads_and_rope() -> None:
    hybrid = path("gemma3-hybrid", path="dynamic").identity()
    assert hybrid["architecture"] == "Gemma3ForCausalLM"
    assert hybrid["layer_types"] == ["sliding_attention", "full_attention"] and hybrid["sliding_window"] == 32
    mqa = path("llama-mqa", path="dynamic")
    assert mqa.identity()["kv_heads"] == 1 and mqa.kv_geometry() == (2, 1, 16)
    assert path("llama", path="dynamic").identity()["layer_types"] == ["full_attention"] * 2
    assert path("mistral-sliding-window", path="dynamic").identity()["layer_types"] == ["sliding_attention"] * 2
    neox = path("gpt-neox-partial-rotary", path="dynamic").identity()
    assert neox["architecture"] == "GPTNeoXForCausalLM" and neox["rope_parameters"]["partial_rotary_factor"] == 0.25
    assert path("llama3-rope-scaling", path="dynamic").identity()["rope_parameters"]["rope_type"] == "llama3"
    assert path("gpt2", path="dynamic").identity()["rope_parameters"] is None


def test_a_preset_whose_architecture_is_missing_is_unavailable_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(presets.ARCHITECTURES, "gemma3-hybrid", "NoSuchConfig")
    with pytest.raises(AdapterUnavailable, match=r"transformers\.NoSuchConfig, which transformers .* does not have"):
        HFAdapter().build(Options(model="gemma3-hybrid", path="dynamic"), device="cpu", dtype="float32", seed=0)


def test_every_preset_name_has_an_architecture() -> None:
    from gate.adapters.hf.options import PRESET_NAMES

    assert set(PRESET_NAMES) == set(presets.ARCHITECTURES)


def test_the_hybrid_familys_prefix_siblings_vary_rope_per_layer_type_and_widen_the_window() -> None:
    """cache-identity's siblings on Gemma 3: rope scaled on both layer types, and the window widened to
    every position (transformers refuses a sliding layer without one); both build and compute."""
    from gate.adapters.hf.prefix_worker import HFFamily

    loaded = path("gemma3-hybrid").loaded
    family = HFFamily(loaded)
    rope = family.varied(family.base_config, "rope-scaling", 4)
    window = family.varied(family.base_config, "attention-window", 4)
    assert rope is not None and window is not None and window.window == 512  # type: ignore[attr-defined]
    toks = tokens(length=80)
    base = family.full_logits(family.instantiate(family.base_config, device="cpu", dtype="float32"), toks)
    for variant in (rope, window):
        model = family.instantiate(variant, device="cpu", dtype="float32")
        assert (family.full_logits(model, toks) - base).abs().max().item() > 1e-2
    scaled = family.instantiate(rope, device="cpu", dtype="float32").config.rope_parameters
    assert {kind: params["rope_type"] for kind, params in scaled.items()} == {
        "sliding_attention": "linear",
        "full_attention": "linear",
    }


def test_a_quantized_cache_transformers_refuses_for_sliding_layers_is_unavailable_in_its_words() -> None:
    """5.24's QuantizedCache refuses a config with sliding layers (ValueError); the path is then
    AdapterUnavailable quoting it. 5.2 builds full quantized layers for the same config, and the path
    runs (gate judges what the release does)."""
    import transformers.cache_utils as cu

    config = presets.preset_config("gemma3-hybrid")
    try:
        cu.QuantizedCache(backend="hqq", config=config, nbits=8)
        refused = None
    except ValueError as err:
        refused = str(err)
    options = {"path": "quantized", "backend": "hqq", "nbits": 8, "residual_length": 16, "q_group_size": 16}
    if refused is None:
        assert path("gemma3-hybrid", **options).faults()
        return
    with pytest.raises(AdapterUnavailable, match="has no QuantizedCache for this model") as raised:
        HFAdapter().build(Options(model="gemma3-hybrid", **options), device="cpu", dtype="float32", seed=0)
    assert refused in str(raised.value)


def test_every_cell_of_the_families_matrix_is_a_manifest_its_policy_admits(tmp_path: Path) -> None:
    """benchmarks/hf_families.py writes one manifest per path x family: each validates (no claim its
    policy rejects, every option on the path it applies to)."""
    from click.testing import CliRunner

    from benchmarks.hf_families import PATHS, manifest
    from gate.cli.main import cli

    # the manifest depends on the family only through whether its own attention slides
    cells = [("gemma3-hybrid", kind) for kind in PATHS] + [("llama-mqa", "sliding-window")]
    for family, kind in cells:
        target = tmp_path / f"{family}--{kind}.yaml"
        target.write_text(yaml.safe_dump(manifest(family, kind), sort_keys=False))
        done = CliRunner().invoke(cli, ["validate", str(target)])
        assert done.exit_code == 0, (family, kind, done.output)


def test_phi3_longrope_logits_depend_on_the_forwards_length_a_library_behaviour_gate_reports() -> None:
    """transformers' LongRoPE takes the long factors for a whole forward once its largest position
    passes 128: the same 100 tokens get other logits inside a 200-token full pass than alone, and a
    cache prefilled below 128 then stepped past it disagrees with the full pass. The adapter does not
    repair this (benchmarks/hf_families.md: every cached path FAILs on this family)."""
    phi = path("phi3-longrope")
    toks = tokens(batch=1, length=200)
    alone, inside = phi.full_logits(toks[:, :100]), phi.full_logits(toks)[:, :100]
    assert (alone - inside).abs().max().item() > 1e-2
    session = path("phi3-longrope", path="dynamic").new_session(1)
    session.prefill(toks[:, :128])  # short factors: the forward's largest position is 127
    step = session.append(toks[:, 128:129])[:, 0]  # position 128: this forward takes the long ones
    full = phi.full_logits(toks[:, :129])[:, -1]  # every position with the long ones
    assert (step - full).abs().max().item() > 1e-2
    below = path("phi3-longrope", path="dynamic").new_session(1)  # below 128 the cache is exact
    below.prefill(toks[:, :100])
    exact = below.append(toks[:, 100:101])[:, 0] - phi.full_logits(toks[:, :101])[:, -1]
    assert exact.abs().max().item() < 1e-4
