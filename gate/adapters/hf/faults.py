"""Negative controls for hf paths, applied from outside the model.

A fault never edits transformers code: it is a `Tamper` the session consults where a serving engine
makes its own decisions (which positions to send, which cache handle to pass, which weights were live
when the cache was filled, what reset clears). The names are shared with the reference adapter. A
control inert on some versions is reported unobservable there (gate/engine/controls.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import torch

from gate.adapters.hf import compat
from gate.adapters.hf.options import Options


class TamperPath(Protocol):
    """What a tamper reads of a session's path."""

    max_len: int
    options: Options


class TamperedSession(Protocol):
    """What a tamper reads and changes of a cache session (gate.adapters.hf.sessions.CacheSession)."""

    cache: Any
    pos: int
    positions_from_cache: bool
    model: Any
    device: Any
    batch_size: int
    pending_positions: torch.Tensor

    @property
    def path(self) -> TamperPath: ...

    def clear_cache(self) -> None: ...

    def other_request_cache(self) -> Any: ...


class SlotSession(Protocol):
    """What a tamper changes of a continuous batch (gate.adapters.hf.continuous.ContinuousHFSession)."""

    def clear_slot(self, slot: int) -> None: ...


BLOCK = 16
"""Tokens in the block that `truncated-last-block` loses (a typical paged-KV block size)."""


class Tamper:
    """The correct engine: every hook is the identity."""

    name: str | None = None

    def __init_subclass__(cls, *, name: str) -> None:
        cls.name = name

    def positions(self, phase: str, positions: torch.Tensor) -> torch.Tensor:
        """Positions [B, n] sent with the tokens of a prefill or an append."""
        return positions

    def cache_position(self, phase: str, positions: torch.Tensor) -> torch.Tensor | None:
        """An explicit `cache_position` for forward, or None to derive it from `positions`."""
        return None

    def attention_mask(self, phase: str, session: TamperedSession, n: int) -> torch.Tensor | None:
        """A 4D mask to pass instead of the model's own causal mask, or None."""
        return None

    def batch_positions(self, phase: str, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Positions [B, n] of a padded batch's tokens; `slots` [B, n] are the cache slots they occupy."""
        return positions

    def padding_mask(self, phase: str, mask: torch.Tensor) -> torch.Tensor:
        """The 2D attention mask [B, kv] of a padded batch (1: a real token, 0: a pad)."""
        return mask

    def before_forward(self, phase: str, session: TamperedSession, n: int) -> None:
        pass

    def after_write(self, phase: str, session: TamperedSession, n: int) -> None:
        pass

    @contextmanager
    def weights(self, phase: str, model: Any) -> Iterator[None]:
        """The weights live while a call runs."""
        yield

    def reset(self, session: TamperedSession) -> None:
        session.clear_cache()
        session.pos = 0

    def join_slot(self, session: SlotSession, slot: int) -> None:
        """A request joins a running batch into `slot`: the previous occupant's K/V are dropped."""
        session.clear_slot(slot)

    def generate_cache(self, session: TamperedSession) -> Any:
        """What a request's first generate call is handed as its cache: None, so generate builds one."""
        return None

    def reorder(self, session: TamperedSession, beam_idx: torch.Tensor) -> None:
        """Beam search reselects its beams: the cache's rows follow `beam_idx`."""
        compat.reorder_cache(session.cache, beam_idx)


class OffByOnePos(Tamper, name="off-by-one-pos"):
    """The appended tokens are rotated (or embedded) one position too far."""

    def positions(self, phase: str, positions: torch.Tensor) -> torch.Tensor:
        return positions + 1 if phase == "append" else positions


class MissingStartPos(Tamper, name="missing-start-pos"):
    """The appended tokens are positioned as if the request started with them (from 0)."""

    def positions(self, phase: str, positions: torch.Tensor) -> torch.Tensor:
        return positions - positions[:, :1] if phase == "append" else positions


class WrongCachePosition(Tamper, name="wrong-cache-position"):
    """`cache_position` of an append points one slot back (live before 5.4, ignored from 5.4 on)."""

    def cache_position(self, phase: str, positions: torch.Tensor) -> torch.Tensor | None:
        return positions[0] - 1 if phase == "append" else None


class TruncatedLastBlock(Tamper, name="truncated-last-block"):
    """A prefill or chunked append loses its last min(16, n) tokens, while the position counter goes on."""

    def after_write(self, phase: str, session: TamperedSession, n: int) -> None:
        if session.cache is not None and (phase == "prefill" or n > 1):
            compat.drop_last(session.cache, min(BLOCK, n), lossy=True)


class CrossRequestHandle(Tamper, name="cross-request-handle"):
    """After a prefill, the session's handle resolves to another request's cache (other_request_cache)."""

    def after_write(self, phase: str, session: TamperedSession, n: int) -> None:
        if phase == "prefill" and n:
            session.cache = session.other_request_cache()


class StaleWeights(Tamper, name="stale-weights"):
    """The prefill runs with every attention projection perturbed (noise of half the weight's std)."""

    @contextmanager
    def weights(self, phase: str, model: Any) -> Iterator[None]:
        if phase != "prefill":
            yield
            return
        saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        generator = torch.Generator().manual_seed(1234)
        for name, param in model.named_parameters():
            if ("attn" in name or "attention" in name) and param.dim() == 2:  # GPT-NeoX: `attention`
                saved.append((param, param.detach().clone()))
                noise = torch.randn(param.shape, generator=generator).to(param.device, param.dtype)
                param.data.add_(noise * 0.5 * param.detach().float().std().to(param.dtype))
        try:
            yield
        finally:
            for param, original in saved:
                param.data.copy_(original)


class MaskOriginReset(Tamper, name="mask-origin-reset"):
    """An appended chunk's row i sees cache slots 0..i instead of 0..L+i."""

    def attention_mask(self, phase: str, session: TamperedSession, n: int) -> torch.Tensor | None:
        if phase != "append" or session.cache is None:
            return None
        _rows, cols, _ = _grid(session, n)
        return _additive(cols <= torch.arange(n, device=session.device)[:, None], session)


def _additive(allowed: torch.Tensor, session: TamperedSession) -> torch.Tensor:
    """[n, kv] bool -> [B, 1, n, kv] additive mask in the model's dtype (0 where allowed)."""
    dtype = session.model.dtype
    mask = torch.zeros(allowed.shape, dtype=dtype, device=session.device).masked_fill(~allowed, torch.finfo(dtype).min)
    return mask.expand(session.batch_size, 1, *allowed.shape)


def _grid(session: TamperedSession, n: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Absolute query positions [n, 1], absolute key slots [1, kv] the model's mask will span, kv."""
    kv, offset = compat.mask_sizes(session.cache, n, session.pending_positions)
    rows = torch.arange(session.pos, session.pos + n, device=session.device)[:, None]
    cols = torch.arange(offset, offset + kv, device=session.device)[None, :]
    return rows, cols, kv


class SlidingWindowMask(Tamper, name="sliding-window-mask"):
    """Every query sees only the last max_len // 4 keys where full attention is declared."""

    def attention_mask(self, phase: str, session: TamperedSession, n: int) -> torch.Tensor | None:
        if session.cache is None:
            return None
        rows, cols, _ = _grid(session, n)
        return _additive((cols <= rows) & (rows - cols < max(session.path.max_len // 4, 1)), session)


class PoisonedTailRead(Tamper, name="poisoned-tail-read"):
    """A preallocated cache read past its valid length: unused slots hold NaN and the mask shows them."""

    def before_forward(self, phase: str, session: TamperedSession, n: int) -> None:
        for layer in session.cache.layers if session.cache is not None else ():
            if getattr(layer, "is_initialized", False):
                layer.keys[:, :, session.pos + n :] = float("nan")
                layer.values[:, :, session.pos + n :] = float("nan")

    def attention_mask(self, phase: str, session: TamperedSession, n: int) -> torch.Tensor | None:
        if session.cache is None:
            return None
        rows, cols, _ = _grid(session, n)
        return _additive((cols <= rows) | (cols >= session.pos + n), session)


class ResetKeepsPosition(Tamper, name="reset-keeps-position"):
    """reset() clears K and V but leaves the position counter advanced (background: mask oracle)."""

    def reset(self, session: TamperedSession) -> None:
        seen = compat.seq_length(session.cache) if session.cache is not None else 0
        session.clear_cache()
        if session.positions_from_cache and session.cache is not None:
            # generate() takes positions from the cache's own counter: keep that one instead
            compat.keep_counter(session.cache, seen)


class PaddingInPositions(Tamper, name="padding-in-positions"):
    """In a left-padded batch, decode steps take their position ids from the cache slot (pads counted)."""

    def batch_positions(self, phase: str, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        return slots if phase == "append" and slots.shape[1] == 1 else positions


class PadAttended(Tamper, name="pad-attended"):
    """A padded batch is sent with an all-ones attention mask: every real token attends to its row's pads."""

    def padding_mask(self, phase: str, mask: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(mask)


class StaleSlotOnJoin(Tamper, name="stale-slot-on-join"):
    """A request joining a slot another request left inherits its K/V and length."""

    def join_slot(self, session: SlotSession, slot: int) -> None:
        return None


class StaleGenerateCache(Tamper, name="stale-generate-cache"):
    """A request's first generate call gets the cache the previous request left, never reset."""

    def reset(self, session: TamperedSession) -> None:
        session.stale, session.cache = session.cache, None  # type: ignore[attr-defined]
        session.clear_cache()  # the history goes; the kept cache is never reset
        session.pos = 0

    def generate_cache(self, session: TamperedSession) -> Any:
        return getattr(session, "stale", None)


class BeamsNotReordered(Tamper, name="beams-not-reordered"):
    """Beam search moves the hypotheses but the cache keeps its pre-reorder rows."""

    def reorder(self, session: TamperedSession, beam_idx: torch.Tensor) -> None:
        return None


PADDING_FAULTS = ("padding-in-positions", "pad-attended")
"""Faults that only a padded batch (gate.protocols.BatchedSessions) can show."""

CONTINUOUS_FAULTS = ("stale-slot-on-join",)
"""Faults that only a continuously batched session (gate.protocols.ContinuousBatching) can show."""

BEAM_FAULTS = ("beams-not-reordered",)
"""Faults that only a beam path (option `beams`) can show."""

REUSE_FAULTS = ("attention-left-paged",)
"""Faults that only a reused path (option `reuse_after`) can show (HFPath.reuse plants them; no tamper)."""


FAULTS: dict[str, type[Tamper]] = {str(cls.name): cls for cls in Tamper.__subclasses__()}
"""Every fault an hf cache path can apply, by name: each Tamper defined above (press faults come below)."""


def tamper(name: str | None) -> Tamper:
    """The tamper for a fault name (None: the correct engine)."""
    return FAULTS[name]() if name else Tamper()


class ShortContextEmptied(Tamper, name="short-context-emptied"):
    """A press's kept count `int(k_len * (1 - ratio))` rounds a short context down to nothing (kvpress
    0.5.4, before PR #264): the cache is left empty, with no error, while the position counter goes on."""

    def after_write(self, phase: str, session: TamperedSession, n: int) -> None:
        kept = int(n * (1 - session.path.options.compression_ratio))
        if phase == "prefill" and session.cache is not None and kept == 0:
            compat.drop_last(session.cache, compat.seq_length(session.cache), lossy=True)


PRESS_FAULTS: dict[str, type[Tamper]] = {str(ShortContextEmptied.name): ShortContextEmptied}
"""Faults that only a press path applies: not in FAULTS, so no other hf path offers them."""
