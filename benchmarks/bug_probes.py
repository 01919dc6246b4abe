"""Minimal probes of shipped library bugs that gate cannot catch yet (docs/real-bugs.md, second table).

    .venv-tf-5.17/bin/python benchmarks/bug_probes.py quantized-cache-config   # exit 1: the bug shows
    .venv-tf-5.19/bin/python benchmarks/bug_probes.py quantized-cache-config   # exit 0: fixed

Each probe calls the library the way an application does, on a Llama built from a config with seeded
weights (nothing downloaded), prints what it saw and exits 1 when the bug shows, 0 when the release
behaves, so a path added to gate later can be checked against the same release pair. Run it with the
python of a release's venv (benchmarks/releases.py makes them; a kvpress probe needs kvpress there).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch
import transformers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM


def _llama(layers: int = 2) -> Any:
    torch.manual_seed(layers)
    config = LlamaConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    model: Any = LlamaForCausalLM(config)
    return model.eval()


PROMPT = torch.randint(0, 97, (1, 12), generator=torch.Generator().manual_seed(1))
GREEDY = {"max_new_tokens": 10, "do_sample": False, "pad_token_id": 0}


def _hqq(residual_length: int) -> dict[str, Any]:
    return {"backend": "hqq", "nbits": 4, "q_group_size": 16, "residual_length": residual_length}


def quantized_cache_config() -> bool:
    """generate(cache_implementation="quantized", cache_config=C) twice with one C, as applications
    do: the first call pops C's backend and writes its model's config into C, so the second call (here
    on a 3-layer model) builds a quanto cache sized for the first (2-layer) model."""
    config = _hqq(4)
    _llama(2).generate(PROMPT, cache_implementation="quantized", cache_config=config, **GREEDY)
    print(f"cache_config after one generate: keys {sorted(config)}")
    second = _llama(3)
    try:
        reused = second.generate(PROMPT, cache_implementation="quantized", cache_config=config, **GREEDY)
    except Exception as err:  # the bug's crash is the observation
        print(f"second generate with that cache_config raised {type(err).__name__}: {err}")
        return True
    fresh = second.generate(PROMPT, cache_implementation="quantized", cache_config=_hqq(4), **GREEDY)
    print(f"second generate, reused cache_config == a fresh one: {torch.equal(reused, fresh)}")
    return "backend" not in config or not bool(torch.equal(reused, fresh))


def quantized_beam() -> bool:
    """Beam search over a QuantizedCache: the layer's reorder_cache reorders only the residual
    (full-precision) states, not the quantised ones, which stay in the old beam order (or raise)."""
    model = _llama(2)
    expected = model.generate(PROMPT, num_beams=3, use_cache=False, **GREEDY)[0, 12:].tolist()
    try:
        got = model.generate(PROMPT, num_beams=3, cache_implementation="quantized", cache_config=_hqq(2), **GREEDY)[
            0, 12:
        ].tolist()
    except Exception as err:
        print(f"beam search (3 beams) over QuantizedCache(hqq) raised {type(err).__name__}: {err}")
        return True
    print(f"beam search without a cache {expected}\n              QuantizedCache {got}")
    return bool(got != expected)


def forward_after_continuous_batching() -> bool:
    """An ordinary forward on the model object after generate_batch: the manager switches the model
    to a paged attention implementation and, up to 5.8, never switches it back."""
    model, fresh = _llama(2), _llama(2)
    fields = set(inspect.signature(transformers.ContinuousBatchingConfig).parameters)
    page = "page_size" if "page_size" in fields else "block_size"
    settings: dict[str, Any] = {page: 16, "num_blocks": 4, "max_batch_tokens": 16}
    paged = transformers.ContinuousBatchingConfig(**settings, use_cuda_graph=False, allow_block_sharing=False)
    extra = {"warmup": False} if "warmup" in inspect.signature(model.generate_batch).parameters else {}
    config = GenerationConfig(max_new_tokens=4, do_sample=False, eos_token_id=-1, pad_token_id=0)  # type: ignore[no-untyped-call]
    before = model.config._attn_implementation
    model.generate_batch(
        [PROMPT[0].tolist()], generation_config=config, continuous_batching_config=paged, progress_bar=False, **extra
    )
    with torch.no_grad():
        delta = (model(PROMPT).logits - fresh(PROMPT).logits).abs().max().item()
    after = model.config._attn_implementation
    print(f"attention {before} -> {after}; forward vs a fresh model: max |delta| {delta:.3g}")
    return bool(delta > 1e-5)


def kvpress_short_prompt() -> bool:
    """A kvpress scorer press on a one-token prompt: n_kept = int(1 * (1 - ratio)) = 0 empties the cache,
    and the next decode step attends over no keys (kvpress PR #264, in 0.5.5)."""
    from kvpress import KnormPress

    model = _llama(2)
    prompt = PROMPT[:, :1]
    with torch.no_grad(), KnormPress(compression_ratio=0.5)(model):
        cache = model(prompt, use_cache=True).past_key_values
    kept = int(cache.get_seq_length())
    print(f"kvpress KnormPress(0.5) on a 1-token prompt keeps {kept} of 1 K/V pairs")
    return kept == 0


PROBES: dict[str, Callable[[], bool]] = {
    "quantized-cache-config": quantized_cache_config,
    "quantized-beam": quantized_beam,
    "forward-after-continuous-batching": forward_after_continuous_batching,
    "kvpress-short-prompt": kvpress_short_prompt,
}


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in PROBES:
        print(f"usage: bug_probes.py {{{','.join(PROBES)}}}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    print(f"transformers {transformers.__version__}")
    shows = PROBES[sys.argv[1]]()
    print(f"{sys.argv[1]}: {'the bug shows' if shows else 'behaves'}")
    return 1 if shows else 0


if __name__ == "__main__":
    sys.exit(main())
