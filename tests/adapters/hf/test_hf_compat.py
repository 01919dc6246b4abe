"""The compatibility layer: one behaviour whatever transformers 5.x is installed."""

from __future__ import annotations

import inspect

import pytest
import torch
import transformers

from gate.adapters.hf import compat
from tests.adapters.hf.subjects import path, tokens


def test_detected_api_matches_the_installed_signature() -> None:
    model = path("llama").model
    api = compat.cache_api(model)
    params = inspect.signature(type(model).forward).parameters
    assert api.cache_kwarg in params and api.version == transformers.__version__
    assert api.takes_cache_position == ("cache_position" in params)
    minor = int(transformers.__version__.split(".")[1])
    assert api.cache_kwarg == ("cache" if minor >= 24 else "past_key_values")
    assert api.takes_cache_position == (minor < 4)
    assert compat.position_inputs(model) == (("position_ids", "cache_position") if minor < 4 else ("position_ids",))


def test_continuous_batching_page_size_under_the_releases_name() -> None:
    """One knob, two names: `block_size` on 5.4-5.17, `page_size` from 5.18; none before 5.4."""
    from gate.errors import AdapterUnavailable

    minor = int(transformers.__version__.split(".")[1])
    expected = None if minor < 4 else "block_size" if minor < 18 else "page_size"
    assert compat.page_field() == expected
    if expected is None:
        with pytest.raises(AdapterUnavailable, match="ContinuousBatchingConfig"):
            compat.require_continuous_batching()
        return
    compat.require_continuous_batching()
    config = compat.paged_config(8, requests=2, max_len=40)
    assert getattr(config, expected) == 8 and config.max_batch_tokens == 8 and not config.use_cuda_graph


@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_drop_last_removes_exactly_n_tokens(kind: str) -> None:
    candidate = path("llama", path=kind)
    toks = tokens()
    cache = candidate.make_cache(2)
    positions = torch.arange(30).expand(2, -1)
    with torch.no_grad():
        compat.forward(candidate.model, toks[:, :30], cache, positions)
    compat.drop_last(cache, 0)
    assert compat.seq_length(cache) == 30
    compat.drop_last(cache, 7)
    assert compat.seq_length(cache) == 23
    with torch.no_grad():  # re-extending after the crop gives the full pass's row
        out = compat.forward(candidate.model, toks[:, 23:24], cache, torch.tensor([[23], [23]]))
    assert (out.logits[:, 0] - candidate.full_logits(toks[:, :24])[:, -1]).abs().max().item() < 1e-4


def test_no_deprecated_cache_argument_is_used(recwarn: pytest.WarningsRecorder) -> None:
    candidate = path("llama", path="dynamic")
    session = candidate.new_session(1)
    session.prefill(tokens(batch=1)[:, :5])
    assert not [w for w in recwarn if "past_key_values" in str(w.message)]


def test_cache_bytes_counts_allocation_and_kv_reads_valid_slots() -> None:
    static = path("llama", path="static")
    cache = static.make_cache(2)
    with torch.no_grad():
        compat.forward(static.model, tokens()[:, :10], cache, torch.arange(10).expand(2, -1))
    # 2 layers x (K and V) x [2, 2, 512, 16] float32
    assert compat.cache_bytes(cache) == 2 * 2 * 2 * 2 * 512 * 16 * 4
    k, v = compat.layer_kv(cache, 0)
    assert k.shape == v.shape == (2, 2, 10, 16)


def test_fp8_backend_is_unavailable_with_a_reason_where_missing() -> None:
    import transformers.cache_utils as cu

    if hasattr(cu, "Fp8QuantizedLayer"):
        assert (
            compat.quantized_cache(
                path("llama").model.config, "fp8", nbits=None, residual_length=None, q_group_size=None
            )
            is not None
        )
    else:
        from gate.errors import AdapterUnavailable

        with pytest.raises(AdapterUnavailable, match="no fp8 QuantizedCache backend"):
            path("llama", path="quantized", backend="fp8")
