"""Paths users call: beam paths (option `beams`): a request as one hypothesis among several beams of one cache,
reordered through the library's own `reorder_cache`, against a full forward (or, for a lossy
quantized cache, the same cache with one beam); the fault `beams-not-reordered`; and transformers'
own `generate(num_beams=...)` with each cache kind against beam search without a cache; and
`generate-cache`, generate building each request's cache from ONE shared GenerationConfig."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from gate.adapters.hf import HFAdapter, Options
from gate.adapters.hf.beams import beam_parents
from gate.errors import AdapterUnavailable, SubjectCrash
from tests.adapters.hf.subjects import library_reset_keeps_length, path, tokens

QUANTO = {"backend": "quanto", "nbits": 4, "q_group_size": 16, "residual_length": 8}
"""quanto quantizes each batch row on its own (hqq's groups and fp8's per-tensor scale span rows),
so one hypothesis among beams is quantized as it is alone, and 8 residual tokens flush often."""


def _has_quanto() -> bool:
    return bool(importlib.util.find_spec("optimum") and importlib.util.find_spec("optimum.quanto"))


def _steps(session: object, toks: torch.Tensor) -> torch.Tensor:
    """A prefill of 20, then appends of 5 (each after a reorder) up to 60 tokens: rows [B, 60, V]."""
    out = [session.prefill(toks[:, :20])]  # type: ignore[attr-defined]
    out += [session.append(toks[:, i : i + 5]) for i in range(20, 60, 5)]  # type: ignore[attr-defined]
    return torch.cat(out, dim=1)


def test_every_reselection_moves_the_hypothesis_and_duplicates_its_parent() -> None:
    for beams in (2, 3, 4):
        for tracked in range(beams):
            parents, moved = beam_parents(beams, tracked)
            assert moved != tracked and parents[moved] == tracked
            assert parents.count(tracked) == 2 and len(set(parents)) == beams - 1


@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_a_beam_hypothesis_matches_the_full_forward_and_the_fault_is_seen(kind: str) -> None:
    reference, candidate = path("llama"), path("llama", path=kind, beams=4)
    toks = tokens(length=60)
    full = reference.full_logits(toks)
    session = candidate.new_session(2)
    got = _steps(session, toks)
    assert (got - full).abs().max().item() < 1e-4
    exercise = session.exercise()
    assert exercise["beam_rows"] == 8 and exercise["reorder_calls"] == 8 and exercise["hypothesis_moves"] == 8
    assert "beams-not-reordered" in candidate.faults()
    assert "beams-not-reordered" not in path("llama", path=kind).faults()
    assert not candidate.padding_sides and not candidate.continuous_batching
    faulty = _steps(candidate.with_fault("beams-not-reordered").new_session(2), toks)
    assert (faulty - full).abs().max().item() > 1.0
    # the first append after the prefill reads identical beams: the fault shows from the second on
    assert (faulty[:, :25] - full[:, :25]).abs().max().item() < 1e-4


def test_a_reset_beam_session_starts_from_the_first_row() -> None:
    """Through the library's own reset: where a release's DynamicLayer.reset() keeps the old length
    (5.2-5.17), the reused beam session differs, as the plain dynamic one does."""
    candidate = path("llama", path="dynamic", beams=3)
    toks = tokens(length=60)
    session = candidate.new_session(2)
    first = _steps(session, toks)
    session.reset()
    assert session.exercise()["hypothesis_row"] == 0
    assert torch.equal(_steps(session, toks), first) != library_reset_keeps_length()


def test_layer_states_of_a_beam_path_are_the_hypothesis_rows() -> None:
    candidate = path("llama", path="dynamic", beams=4)
    toks = tokens(length=40)
    states = candidate.layer_states(toks, 30)
    full = candidate.full_layer_states(toks, 30)
    for got, want in zip(states, full, strict=True):
        assert got["k"].shape[0] == 2
        assert (got["hidden"] - want["hidden"]).abs().max().item() < 1e-4


@pytest.mark.skipif(not _has_quanto(), reason="the quantized beam path here uses quanto (optimum-quanto)")
def test_a_quantized_beam_hypothesis_matches_the_quantized_cache_alone() -> None:
    """Where the release reorders a QuantizedCache's codes (5.23+), one hypothesis among beams equals
    the same quantized cache with one beam; where its reorder raises (QuantizedLayer without a reorder
    of its own, 5.9-5.15: IndexError on the emptied residual), the crash is the subject's."""
    toks = tokens(length=60)
    alone = _steps(path("llama", path="quantized", **QUANTO).new_session(2), toks)
    candidate = path("llama", path="quantized", beams=4, **QUANTO)
    try:
        got = _steps(candidate.new_session(2), toks)
    except SubjectCrash as crash:
        assert crash.call == "QuantizedCache.reorder_cache"
        return
    assert (got - alone).abs().max().item() < 1e-4
    faulty = _steps(candidate.with_fault("beams-not-reordered").new_session(2), toks)
    assert (faulty - alone).abs().max().item() > 1.0


def test_beams_apply_only_to_cache_paths_that_beam_search_runs() -> None:
    with pytest.raises(ValueError, match="option 'beams' applies only to path dynamic or static or quantized"):
        Options(model="llama", path="prompt-lookup", beams=2)
    assert "dynamic-beams4" in path("llama", path="dynamic", beams=4).name
    assert path("llama", path="dynamic", beams=4).identity()["beams"] == 4


@pytest.mark.parametrize("kind", ["dynamic", "static", "quantized"])
def test_transformers_beam_search_with_a_cache_equals_beam_search_without_one(kind: str) -> None:
    """The library's own beam search (`generate(num_beams=4)`, reorder_cache between steps) with each
    cache kind against `use_cache=False`. Quantized K/V change the scores, so there the claim is only
    that the call runs: a release whose quantized reorder raises is reported, not skipped."""
    if kind == "quantized" and not _has_quanto():
        pytest.skip("needs optimum-quanto")
    model = HFAdapter().build(Options(model="llama"), device="cpu", dtype="float32", seed=0).model  # type: ignore[attr-defined]
    toks = tokens(length=40)
    settings = {"num_beams": 4, "max_new_tokens": 24, "do_sample": False, "eos_token_id": None, "pad_token_id": 0}
    with torch.no_grad():
        plain = model.generate(toks, use_cache=False, **settings)
        extra = {
            "dynamic": {},
            "static": {"cache_implementation": "static"},
            "quantized": {"cache_implementation": "quantized", "cache_config": {"backend": "quanto", **QUANTO}},
        }[kind]
        if kind == "quantized":
            extra["cache_config"].pop("q_group_size")
            try:
                cached = model.generate(toks, **extra, **settings)
            except IndexError:  # 5.9-5.15: QuantizedLayer's inherited reorder indexes its emptied residual
                return
            assert cached.shape == plain.shape
            return
        cached = model.generate(toks, **extra, **settings)
    assert torch.equal(cached, plain)


def _requests(candidate: object, toks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two requests through one session (a reset between): the second one's first generate call is
    the second call handed the path's one GenerationConfig."""
    session = candidate.new_session(2)  # type: ignore[attr-defined]
    first = _steps(session, toks)
    session.reset()
    return first, _steps(session, (toks * 3 + 1) % 256)


@pytest.mark.parametrize(
    "options",
    [
        {"cache_implementation": "dynamic"},
        {"cache_implementation": "static", "max_cache_len": 96},
        {"cache_implementation": "quantized", "cache_config": {"backend": "quanto", **QUANTO}},
        {"cache_implementation": "static", "max_cache_len": 96, "config_via": "keywords"},
        {"cache_implementation": "quantized", "cache_config": QUANTO, "config_via": "keywords"},
    ],
    ids=["dynamic", "static", "quantized", "static-keywords", "quantized-keywords"],
)
def test_generate_builds_each_request_cache_from_one_shared_config(options: dict[str, object]) -> None:
    if options["cache_implementation"] == "quantized" and not _has_quanto():
        pytest.skip("needs optimum-quanto")
    try:
        candidate = HFAdapter().build(
            Options(model="llama", path="generate-cache", **options), device="cpu", dtype="float32", seed=0
        )
        fresh = HFAdapter().build(
            Options(model="llama", path="generate-cache", **options), device="cpu", dtype="float32", seed=0
        )
        toks = tokens(length=60)
        first, second = _requests(candidate, toks)
    except AdapterUnavailable as err:  # static before 5.13: generate sizes its cache to one call
        assert "max_cache_len" in str(err)
        return
    assert torch.equal(second, _steps(fresh.new_session(2), (toks * 3 + 1) % 256))
    if options["cache_implementation"] != "quantized":
        assert (first - path("llama").full_logits(toks)).abs().max().item() < 1e-4
    assert "stale-generate-cache" in candidate.faults()
    try:
        _, stale = _requests(candidate.with_fault("stale-generate-cache"), toks)
    except SubjectCrash:
        return  # generate raised on the stale cache: a control sees the crash
    assert not torch.equal(stale.nan_to_num(), second)


HQQ_8 = {"backend": "hqq", "nbits": 8, "q_group_size": 16, "residual_length": 16}


def test_generate_keywords_hand_every_request_one_cache_config_dict() -> None:
    """`config_via: keywords` hands generate the same `cache_config` dict on every request's first
    call, as applications do, and leaves what generate does to it: a release that keeps the dict's
    keys (5.19+) builds every request's hqq cache alike, so a reused path's second request equals a
    fresh path's; a release that pops `backend` (5.2-5.18) builds the second request's cache with
    quanto, which refuses 8 bits: a crash of the subject."""
    if importlib.util.find_spec("hqq") is None:
        pytest.skip("needs hqq")
    options = Options(
        model="llama",
        path="generate-cache",
        cache_implementation="quantized",
        cache_config=HQQ_8,
        config_via="keywords",
    )
    candidate = HFAdapter().build(options, device="cpu", dtype="float32", seed=0)
    toks = tokens(length=60)
    session = candidate.new_session(2)  # type: ignore[attr-defined]
    _steps(session, toks)
    handed = candidate.keywords["cache_config"]  # type: ignore[attr-defined]
    assert candidate.first_call()[1]["cache_config"] is handed  # type: ignore[attr-defined]
    session.reset()
    if "backend" not in handed:  # the release consumed the dict
        with pytest.raises(SubjectCrash):
            _steps(session, (toks * 3 + 1) % 256)
        return
    assert session.exercise()["cache_config_keys"] == sorted(HQQ_8)
    fresh = HFAdapter().build(options, device="cpu", dtype="float32", seed=0)
    second = _steps(session, (toks * 3 + 1) % 256)
    assert torch.equal(second, _steps(fresh.new_session(2), (toks * 3 + 1) % 256))


def test_generate_cache_sends_appended_positions_through_its_tamper() -> None:
    """generate-cache's own `missing-start-pos`: the position_ids generate sends with an append's
    tokens restart at 0; the prefill is untouched and every append's rows move."""
    options = Options(model="llama", path="generate-cache", cache_implementation="dynamic", config_via="keywords")
    candidate = HFAdapter().build(options, device="cpu", dtype="float32", seed=0)
    assert "missing-start-pos" in candidate.faults()
    toks = tokens(length=60)
    clean = _steps(candidate.new_session(2), toks)  # type: ignore[attr-defined]
    faulted = _steps(candidate.with_fault("missing-start-pos").new_session(2), toks)
    assert torch.equal(faulted[:, :20], clean[:, :20])
    assert (faulted[:, 20:] - clean[:, 20:]).abs().amax(dim=(0, 2)).min().item() > 1e-2
