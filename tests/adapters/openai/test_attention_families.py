"""The tiny model's attention families, served by llama.cpp's own server (llama-server, `make engine`):
full attention (llama), every layer local and hybrid local/global (gemma2 with a sliding window),
grouped-query heads. Each loads, its prompt cache hits, and the cached answer equals the uncached
server's; the window is real (a hybrid model answers a prompt shorter than its window as the same
model with an unbounded window does, and a longer one differently).

Skipped, with the reason, when llama-server is not built (tests/adapters/openai/conftest.py).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from gate.adapters.openai import Options
from gate.adapters.openai.client import Completion
from gate.adapters.openai.path import EnginePath

pytestmark = pytest.mark.engine

ARGS = ["--host", "127.0.0.1", "--port", "{port}", "-c", "2048", "-t", "1", "-tb", "1", "--no-webui", "-fa", "off"]
FAMILIES: dict[str, dict[str, Any]] = {
    "full-attention": {},
    "sliding-window": {"sliding_window": 64},
    "hybrid": {"sliding_window": 64, "sliding_layers": [0]},
    "hybrid-gqa-4-over-2": {"sliding_window": 64, "sliding_layers": [1], "n_head": 4, "n_head_kv": 2},
}


def server(tiny: dict[str, Any], *cache: str) -> EnginePath:
    options = Options.model_validate(
        {
            "flavor": "llama.cpp",
            "launch": {
                "command": ["llama-server", "-m", "{model}", *ARGS, *cache],
                "tiny_model": {"seed": 0, "context_length": 2048, **tiny},
                "ready_timeout_s": 60,
            },
        }
    )
    return EnginePath.probe(options, dtype="float32", seed=0)


def ask(path: EnginePath, prompt: list[int]) -> Completion:
    with path.serve(label="family") as served:
        return served.complete(prompt, 8, 5)


def prompt(length: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(131, 512) for _ in range(length)]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_loads_hits_its_cache_and_matches_the_uncached_server(
    family: str, engine_env: dict[str, str]
) -> None:
    cached, uncached = server(FAMILIES[family], "--cache-prompt"), server(FAMILIES[family], "--no-cache-prompt")
    identity = cached.identity()
    assert identity["tiny_model"]["sliding_window"] == FAMILIES[family].get("sliding_window")
    with cached.serve(label="cached") as warm, uncached.serve(label="uncached") as plain:
        for length in (40, 300, 1500):  # below the 64-token window, and beyond it
            prefix = prompt(length, length)
            warm.complete([*prefix, 140, 141], 8, 5)  # the prefix under another suffix
            hit, cold = warm.complete([*prefix, 150, 151], 8, 5), plain.complete([*prefix, 150, 151], 8, 5)
            assert hit.cached_tokens is not None and hit.cached_tokens > length // 2, (family, length, hit.summary())
            assert cold.cached_tokens == 0, (family, length, cold.summary())
            assert hit.tokens == cold.tokens, (family, length)
            assert max(abs(a - b) for a, b in zip(hit.logprobs, cold.logprobs, strict=True)) < 1e-4
            assert len(set(cold.tokens)) > 2, cold.tokens  # a real model, not one token repeated


def test_the_window_is_real(engine_env: dict[str, str]) -> None:
    windowed = server({"sliding_window": 64, "sliding_layers": [0]}, "--no-cache-prompt")
    unbounded = server({"sliding_window": 4096, "sliding_layers": [0]}, "--no-cache-prompt")
    short, long = prompt(40, 1), prompt(300, 2)
    assert ask(windowed, short).tokens == ask(unbounded, short).tokens
    assert ask(windowed, long).logprobs != ask(unbounded, long).logprobs
