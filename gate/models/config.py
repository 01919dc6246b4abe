"""The reference decoder's shape and its named presets, torch-free so the KV cache, option validation
and `gate plan` can name a shape without importing the model."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the reference decoder. `head_dim = d_model // n_heads`."""

    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 256
    max_len: int = 8192
    rope: bool = True
    rope_base: float = 10000.0
    abs_positions: bool = False
    window: int | None = None
    ffn_hidden: int | None = None
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError("d_model must divide by n_heads, and n_heads by n_kv_heads")
        if (self.d_model // self.n_heads) % 2:
            raise ValueError("head_dim must be even for RoPE")
        if self.window is not None and self.window < 1:
            raise ValueError("window must be positive")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def hidden(self) -> int:
        """SwiGLU width: 8/3 d rounded up to a multiple of 16 (llama)."""
        return self.ffn_hidden or 16 * math.ceil(8 * self.d_model / 3 / 16)

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ModelConfig:
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
        return replace(PRESETS[name], **{k: v for k, v in overrides.items() if v is not None})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(),
    "tiny-abs": ModelConfig(rope=False, abs_positions=True),
    "tiny-draft": ModelConfig(n_layers=1, d_model=32, n_heads=2, n_kv_heads=1),
    "small": ModelConfig(n_layers=4, d_model=128, n_heads=8, n_kv_heads=2, vocab_size=512),
}
