"""The session wrappers behind gate.engine.generic_faults (see its docstring for what each breaks): a
`_Wrapped` session passes every call to the clean one except the one its fault replaces. This module
imports no torch at import time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gate.protocols import CacheCropping, WeightReloading, offered

if TYPE_CHECKING:
    import torch

    from gate.protocols import DecodePath, Session


class GenericCarrier:
    """A candidate that carries one generic fault (`carried`): it plants none of its own."""

    name: str
    carried: str

    def faults(self) -> tuple[str, ...]:
        return ()

    def with_fault(self, fault: str) -> Any:
        from gate.errors import UnknownFault

        raise UnknownFault(f"path {self.name} already carries generic fault {self.carried}")


class _Wrapped:
    """Common base: a session that forwards to `inner` and remembers whether it holds tokens."""

    def __init__(self, path: DecodePath, batch: int) -> None:
        self.path, self.batch = path, batch
        self.inner: Session = path.new_session(batch)
        self.fed = False

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        self.fed = self.fed or tokens.shape[1] > 0
        return self.inner.prefill(tokens)

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        if not self.fed:
            return self.prefill(tokens)
        return self.faulty_append(tokens)

    def faulty_append(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.inner.append(tokens)

    def reset(self) -> None:
        self.fed = False
        self.inner.reset()

    def exercise(self) -> dict[str, Any]:
        return dict(self.inner.exercise())


class HandleSwap(_Wrapped):
    """Prefills go to the request's own session and, shifted by one row, to a foreign one; every
    append then runs against the foreign session: the handle points at another request's cache."""

    def __init__(self, path: DecodePath, batch: int) -> None:
        super().__init__(path, batch)
        self.foreign: Session = path.new_session(batch)

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        # another request of the same shape: the next row's tokens, or the row reversed when B = 1
        self.foreign.prefill(tokens.roll(1, dims=0) if tokens.shape[0] > 1 else tokens.flip(1))
        return super().prefill(tokens)

    def faulty_append(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.foreign.append(tokens)

    def reset(self) -> None:
        super().reset()
        self.foreign.reset()


class RowsCrossed(_Wrapped):
    """Every answer of a session of B > 1 requests comes back one row over: each request receives
    the next request's logits (a batch's rows crossed; alone, B = 1, nothing changes)."""

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        return _crossed(super().prefill(tokens))

    def faulty_append(self, tokens: torch.Tensor) -> torch.Tensor:
        return _crossed(self.inner.append(tokens))


def _crossed(rows: torch.Tensor) -> torch.Tensor:
    return rows.roll(1, dims=0) if rows.shape[0] > 1 else rows


class ResetIgnored(_Wrapped):
    """reset() forgets nothing."""

    def reset(self) -> None:
        return None


class CacheDropped(_Wrapped):
    """Every append runs against a new, empty session."""

    def faulty_append(self, tokens: torch.Tensor) -> torch.Tensor:
        self.inner = self.path.new_session(self.batch)
        return self.inner.append(tokens)


class TokenSkipped(_Wrapped):
    """The first token of every multi-token prefill or append never enters the cache: every later
    position is one short (its row of logits is the next row repeated, so shapes stay the protocol's)."""

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[1] < 2:
            return super().prefill(tokens)
        return _repeat_first(super().prefill(tokens[:, 1:]))

    def faulty_append(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[1] < 2:
            return self.inner.append(tokens)
        return _repeat_first(self.inner.append(tokens[:, 1:]))


def _repeat_first(rows: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.cat([rows[:, :1], rows], dim=1)


class WeightsChanged(_Wrapped):
    """Appends run with changed weights against the cache the old weights wrote."""

    def faulty_append(self, tokens: torch.Tensor) -> torch.Tensor:
        reloading: Any = self.path
        reloading.reload_weights(1)
        try:
            return self.inner.append(tokens)
        finally:
            reloading.reload_weights(0)


class BlockTruncated(_Wrapped):
    """Before each append the cache is cropped to whole blocks: the partial last block is lost."""

    def faulty_append(self, tokens: torch.Tensor) -> torch.Tensor:
        cropping: Any = self.inner
        bounds = getattr(self.path, "layout_boundaries", None)
        edges = bounds() if callable(bounds) else ()
        length, block = int(cropping.cache_length()), int(edges[0]) if edges else 16
        if length % block:
            cropping.crop(length - length % block)
        return self.inner.append(tokens)


def needs_reload(path: DecodePath) -> str | None:
    if offered(path, WeightReloading) is None:
        return f"path {path.name} cannot reload weights (no reload_weights: gate.plugin.WeightReloading)"
    return None


def needs_crop(path: DecodePath) -> str | None:
    if offered(path.new_session(1), CacheCropping) is not None:
        return None
    return f"sessions of {path.name} do not expose their cache length (no cache_length/crop: gate.plugin.CacheCropping)"
