"""Shared builders for the hf adapter tests: tiny presets, seeded tokens, one full reference."""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

from gate.adapters.hf import HFAdapter, Options, compat
from gate.adapters.hf.paths import HFPath

torch.set_num_threads(1)


@cache
def build(model: str = "llama", **options: Any) -> HFPath:
    path = HFAdapter().build(Options(model=model, **options), device="cpu", dtype="float32", seed=0)
    assert isinstance(path, HFPath)
    return path


def path(model: str = "llama", **options: Any) -> HFPath:
    """A path built once per option set (tests must not mutate it)."""
    return build(model, **{k: v for k, v in sorted(options.items())})


def tokens(batch: int = 2, length: int = 96, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (batch, length), generator=torch.Generator().manual_seed(seed))


def greedy(reference: HFPath, prompts: torch.Tensor, n: int) -> torch.Tensor:
    """The reference's greedy continuation by full passes: [B, T0] -> [B, n]."""
    out = prompts
    for _ in range(n):
        out = torch.cat([out, reference.full_logits(out)[:, -1].argmax(-1, keepdim=True)], 1)
    return out[:, prompts.shape[1] :]


def run(session: Any, toks: torch.Tensor, prefix: int, chunk: int = 9) -> torch.Tensor:
    """Prefill `prefix`, append one token, a chunk, one token: the rows a check reads, [B, 2 + chunk, V]."""
    session.prefill(toks[:, :prefix])
    a = session.append(toks[:, prefix : prefix + 1])
    b = session.append(toks[:, prefix + 1 : prefix + 1 + chunk])
    c = session.append(toks[:, prefix + 1 + chunk : prefix + 2 + chunk])
    return torch.cat([a, b, c], dim=1)


def quantized_options() -> dict[str, Any]:
    """A quantized-cache option set this environment can run (fp8 from ~5.2x, else quanto), or skip."""
    import importlib.util

    import pytest
    import transformers.cache_utils as cu

    if hasattr(cu, "Fp8QuantizedLayer"):
        return {"path": "quantized", "backend": "fp8"}
    if importlib.util.find_spec("optimum") and importlib.util.find_spec("optimum.quanto"):
        return {"path": "quantized", "backend": "quanto", "nbits": 4, "q_group_size": 16, "residual_length": 0}
    pytest.skip("no quantized-cache backend here (fp8 needs a newer transformers, quanto needs optimum-quanto)")


def library_reset_keeps_length() -> bool:
    """Whether this transformers' DynamicLayer.reset() zeroes K/V but keeps their length (5.2)."""
    cache = compat.dynamic_cache(None)
    cache.update(torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2), 0)
    cache.reset()
    return compat.seq_length(cache) > 0
