"""What a cache that evicts or quantises its KV states promises, and the states it reports:
`EvictionReport` and `QuantizedKV` with their records. This module imports no torch at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from gate.protocols.paths import Session

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class EvictionPolicy:
    """What an evicting cache promises to keep, stated by the path (gate.checks.evict_invariants
    judges what it kept against it): the protected positions (`sink` first tokens, the `window`
    most recent, the last token) plus the top of the press's own `score` up to the budget."""

    press: str
    """The press's name (`sink-window`, `knorm`, kvpress's class name, ...)."""
    score: str
    """The score the press ranks by: `position` (no score: protected positions only) and `knorm`
    (minus the key's L2 norm) gate recomputes in float32 from the keys; any other name is judged
    against the press's own reported scores."""
    sink: int = 0
    """First tokens always kept (attention sinks)."""
    window: int | None = 0
    """Most recent tokens always kept; None: the budget less the sinks (kvpress's StreamingLLM)."""
    keeps_last: bool = False
    """The newest token is always kept."""
    budget: int | None = None
    """Tokens kept per layer and head once more were seen; None: from `compression_ratio`."""
    compression_ratio: float | None = None
    """Budget max(1, int(n * (1 - ratio))) of the n tokens the press chose from."""
    scope: str = "every-write"
    """When the press evicts: after `every-write` (prefill chunks and decode steps) or the first `prefill` only."""


@dataclass(frozen=True)
class EvictionStep:
    """One eviction on one layer: the pool the press chose from and what it kept, per (batch, KV head).
    Tensors are torch tensors (typed Any: this module imports no torch)."""

    layer: int
    seen: int
    """Tokens written to this layer so far (positions 0..seen-1)."""
    pool: Any
    """[B, H, N] long: the positions of the N tokens the press chose from (what it held plus the new ones)."""
    kept_from: Any
    """[B, H, K] long: which pool entries it kept (indices into the pool's last axis)."""
    positions: Any
    """[B, H, K] long: the position each kept entry carries in the cache after the eviction."""
    scores: Any | None
    """[B, H, N] float: the press's own scores over the pool (None: not exposed)."""
    keys: Any | None
    """[B, H, N, D]: the keys the press scored (for gate's recomputation; None: not exposed)."""


@runtime_checkable
class EvictionReport(Protocol):
    """A session of an evicting cache that says what it promises and what it kept, step by step."""

    def eviction_policy(self) -> EvictionPolicy:
        """The promise: protected positions, score and budget."""

    def watch_evictions(self) -> list[EvictionStep]:
        """A list the session appends every eviction to from now on (one EvictionStep per layer and write)."""


class QuantScheme(BaseModel):
    """A quantised KV cache's scheme: as the manifest declares it (`QuantizedKV.quant_declared`) or as
    the cache object states it of itself (`QuantState.stated`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    bits: int
    """Bits per stored code."""
    group_size: int
    """Elements sharing one scale and zero point."""
    key_axis: str
    """What keys are grouped along (the library's own word or number: token, channel, 0, 1)."""
    value_axis: str
    """What values are grouped along."""
    max_residual: int
    """Most tokens the cache may hold in full precision after any update (the library's rule applied
    to the declared residual length)."""
    param_bytes: int = 2
    """Bytes of one stored scale or zero point."""
    param_eps: float = 2.0**-11
    """Relative rounding of a stored scale or zero point (float16: 2^-11)."""


@dataclass(frozen=True)
class QuantTensorState:
    """One layer's keys or values as a quantised cache holds them after an update, read by the adapter."""

    name: str
    """e.g. `layer 0 keys`."""
    written: torch.Tensor
    """[B, H, T, D]: every token written since the session began, as the model wrote it."""
    dequantized: torch.Tensor
    """[B, H, Q, D]: what a read sees of the tokens held quantised."""
    residual: torch.Tensor
    """[B, H, R, D]: the tokens held in full precision."""
    scale: torch.Tensor
    """[B, H, Q, D]: the stored scale of each quantised element's group."""
    zero: torch.Tensor
    """[B, H, Q, D]: the stored zero point of each element's group, as the value of code 0."""
    group: torch.Tensor
    """[B, H, Q, D] int64: which group each quantised element belongs to."""
    quantized_from: torch.Tensor | None = None
    """[B, H, Q, D]: what the last quantisation was handed, where a library re-quantises its own
    dequantised history (transformers' QuantizedLayer flushes dequantised + residual + new tokens
    as one tensor); None: the written tokens themselves."""


@dataclass(frozen=True)
class QuantState:
    """What a quantised cache holds after one update: its stated scheme, its bytes, and every tensor."""

    stated: QuantScheme
    """What the cache object says of itself (bits, group size, axes, residual rule)."""
    nbytes: int
    """Bytes the cache holds (codes, scales, zero points, full-precision residual)."""
    tensors: tuple[QuantTensorState, ...]


@runtime_checkable
class QuantSession(Session, Protocol):
    """A session over a quantised cache whose state the adapter can read after every call."""

    def quant_state(self) -> QuantState:
        """The cache as it stands now (the adapter reads the cache object)."""


@runtime_checkable
class QuantizedKV(Protocol):
    """A path over a quantised KV cache whose stored state can be read (quant-invariants)."""

    def quant_declared(self) -> QuantScheme:
        """The scheme the manifest declares (the adapter's options), never read from the cache."""

    def new_quant_session(self, batch_size: int) -> QuantSession:
        """A session that records what is written, so `quant_state` can compare stored and written."""
