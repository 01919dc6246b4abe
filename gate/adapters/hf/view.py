"""What a session of the Hugging Face adapter reads of its path (gate.adapters.hf.paths.HFPath, and the
paths built on it): the sessions, beams and continuous batches are written against `SessionPath`, so
they never import the paths that build them."""

from __future__ import annotations

from typing import Any, Protocol

import torch

from gate.adapters.hf.faults import Tamper
from gate.adapters.hf.options import Options


class SessionPath(Protocol):
    """The path as its sessions see it."""

    model: Any
    device: str
    tamper: Tamper
    options: Options
    seed: int
    vocab_size: int
    max_len: int

    @property
    def kind(self) -> str: ...

    @property
    def pad_token_id(self) -> int: ...

    def make_cache(self, batch_size: int) -> Any: ...

    def full_logits(self, tokens: torch.Tensor) -> torch.Tensor: ...

    def around_forward(self, session: Any, phase: str) -> Any: ...

    def extra_exercise(self, session: Any) -> dict[str, Any]: ...
