"""Shared by the parity checks: inputs, dtype-aware tolerance, tie-aware logit comparison.

The load-bearing assertion is argmax agreement (background: parity); max |Δlogit| over tolerance is a
warning. An argmax flip within tolerance of the reference's top is a *tie*: reported with its margin,
neither a failure nor a silent pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gate.core.manifest import ToleranceClaim

if TYPE_CHECKING:
    import torch

    from gate.core.check import CheckContext

DEFAULT_TOLERANCE: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-4),
    "bfloat16": (0.08, 0.02),
    "float16": (1e-2, 4e-3),
}
"""(atol, rtol) per dtype: a row's tolerance is atol + rtol * max |reference logit|. Calibrated
on correct paths of the reference decoder (benchmarks/RESULTS.md); a claim's atol/rtol win."""

DENY_ALLOWANCE = 2.0
"""Under a tolerance (or exact) claim, a row whose |Δlogit| exceeds DENY_ALLOWANCE x its tolerance
denies whatever its argmax does (a cache that quantises keys flips only near-ties, yet moves every
row); between 1x and the allowance it is a warning. The worst correct path sits at 0.02x-0.59x its
tolerance (benchmarks/RESULTS.md, benchmarks/calibrate_tolerance.md): at least 3x headroom."""


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    source: str

    def row(self, reference: torch.Tensor) -> torch.Tensor:
        """Per-row tolerance for reference logits [..., V] -> [...]."""
        return self.atol + self.rtol * reference.abs().amax(dim=-1)

    def as_dict(self) -> dict[str, Any]:
        return {"atol": self.atol, "rtol": self.rtol, "source": self.source}


def tolerance_for(ctx: CheckContext, atol: float | None = None, rtol: float | None = None) -> Tolerance:
    """Params win, then the manifest's tolerance claim, then the `computing_dtype` default."""
    dtype = computing_dtype(ctx)
    claim = ctx.manifest.claim
    claim_atol, claim_rtol = (claim.atol, claim.rtol) if isinstance(claim, ToleranceClaim) else (None, None)
    default_atol, default_rtol = DEFAULT_TOLERANCE[dtype]
    if atol is not None or rtol is not None:
        source = "params"
    elif claim_atol is not None or claim_rtol is not None:
        source = "claim"
    else:
        source = f"{dtype} default"
    a = atol if atol is not None else claim_atol if claim_atol is not None else default_atol
    r = rtol if rtol is not None else claim_rtol if claim_rtol is not None else default_rtol
    return Tolerance(float(a), float(r), source)


def computing_dtype(ctx: CheckContext) -> str:
    """The dtype whose rounding the comparison must allow: the least precise of the manifest's dtype and
    those the paths say they compute in (a dtype gate has no calibrated default for counts as float32)."""
    named = [ctx.dtype, *(str(getattr(p, "dtype", "")).removeprefix("torch.") for p in (ctx.reference, ctx.candidate))]
    known = [d for d in named if d in DEFAULT_TOLERANCE] or ["float32"]
    return max(known, key=lambda d: DEFAULT_TOLERANCE[d])


def bounds_logits(ctx: CheckContext) -> bool:
    """Whether the manifest's claim promises the logits stay within tolerance (exact, tolerance)."""
    return ctx.manifest.claim.level in ("exact", "tolerance")


def random_tokens(vocab: int, batch: int, length: int, seed: int) -> torch.Tensor:
    """Seeded uniform token ids [batch, length] (int64, CPU)."""
    import torch

    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


@dataclass
class RowComparison:
    """Reference vs candidate logits, row by row (rows: [N, B, V] -> per-entry [N, B])."""

    max_abs_delta: torch.Tensor
    agree: torch.Tensor
    tie: torch.Tensor
    """Argmax flipped to a token the reference scores within tolerance of its top."""
    margin: torch.Tensor
    """Reference top-1 minus top-2 where the argmax agrees, else minus its logit of the candidate's token."""
    tolerance: torch.Tensor
    ref_top: torch.Tensor
    cand_top: torch.Tensor

    @property
    def failed(self) -> torch.Tensor:
        return ~self.agree & ~self.tie

    @property
    def over_tolerance(self) -> torch.Tensor:
        return self.max_abs_delta > self.tolerance

    @property
    def beyond_allowance(self) -> torch.Tensor:
        """Rows whose |Δ| exceeds DENY_ALLOWANCE x their tolerance (a broken tolerance claim)."""
        return self.max_abs_delta > DENY_ALLOWANCE * self.tolerance


def compare_rows(reference: torch.Tensor, candidate: torch.Tensor, tol: Tolerance) -> RowComparison:
    """Compare logits [..., V] (float32) row by row; NaN in the candidate counts as a failure."""
    import torch

    ref, cand = reference.float(), candidate.float()
    nan_rows = cand.isnan().any(dim=-1)
    delta = (ref - cand).abs().amax(dim=-1).masked_fill(nan_rows, float("inf"))
    top2, top2_at = ref.topk(2, dim=-1)
    ref_top = top2_at[..., 0]
    cand_top = cand.nan_to_num(nan=-float("inf")).argmax(dim=-1)
    agree = (ref_top == cand_top) & ~nan_rows
    row_tol = tol.row(ref)
    # a flip to a token the reference scores within tolerance of its top is a tie, not a failure
    # (usually the runner-up; near three-way ties happen in bfloat16)
    gap = top2[..., 0] - ref.gather(-1, cand_top[..., None]).squeeze(-1)
    tie = ~agree & ~nan_rows & (gap <= row_tol)
    margin = torch.where(agree, top2[..., 0] - top2[..., 1], gap)
    return RowComparison(delta, agree, tie, margin, row_tol, ref_top, cand_top)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-row bit identity of two logit tensors [..., V] -> [...] (NaN payloads included)."""
    import torch

    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    ia, ib = (x.float().contiguous().view(torch.int32) for x in (a, b))
    return (ia == ib).all(dim=-1)


def top_k_rows(logits: torch.Tensor, k: int) -> list[list[list[float]]]:
    """Top-k (token, logit) pairs of each row [B, V], JSON-ready."""
    values, indices = logits.float().topk(min(k, logits.shape[-1]), dim=-1)
    return [
        [[int(i), round(float(v), 6)] for i, v in zip(row_i, row_v, strict=True)]
        for row_i, row_v in zip(indices.tolist(), values.tolist(), strict=True)
    ]


def thin(indices: list[int], keep: int) -> list[int]:
    """At most `keep` evenly spaced items of a sorted list, always keeping the first and last."""
    if len(indices) <= keep:
        return list(indices)
    step = (len(indices) - 1) / (keep - 1)
    return sorted({indices[round(i * step)] for i in range(keep)})
