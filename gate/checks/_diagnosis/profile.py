"""The failure profile over prefix lengths: failures from the very shortest prefixes point to mask
or index arithmetic; deviation growing with length to a positional index; an onset at a long length
to a mask that changes with length (a window); passes only at multiples of some block size to a
truncated block; small differences at (nearly) every length with no argmax flip to precision."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def length_profile(
    lengths: Sequence[int], deviates: Sequence[bool], delta: Sequence[float], flips: Sequence[bool] | None = None
) -> dict[str, Any]:
    """Classify where the deviations sit over prefix lengths (`flips`: lengths with a non-tie argmax flip)."""
    bad = [(n, d) for n, x, d in zip(lengths, deviates, delta, strict=True) if x]
    if not bad:
        return {"profile": "none"}
    first = bad[0][0]
    good_lengths = [n for n, x in zip(lengths, deviates, strict=True) if not x and n > 0]
    out: dict[str, Any] = {"first_deviating_length": first, "deviating_lengths": len(bad), "lengths": len(lengths)}
    positive = [x for n, x in zip(lengths, deviates, strict=True) if n > 0]
    if flips is not None and not any(flips) and positive and sum(positive) >= 0.9 * len(positive):
        # logits off at (nearly) every length, yet no argmax flip beyond a near-tie: a small,
        # spread-out |Δ| (precision or approximation), not an index or mask that moves whole rows
        spread = sorted(d for n, d, x in zip(lengths, delta, deviates, strict=True) if x and n > 0 and math.isfinite(d))
        return {**out, "profile": "everywhere-small", "median_delta": spread[len(spread) // 2] if spread else None}
    block = math.gcd(*good_lengths) if good_lengths else 0
    bad_lengths = [n for n, _ in bad if n > 0]
    # passes only at multiples of a block (and fails next to them): a truncated block
    if block >= 4 and len(good_lengths) >= 3 and len(bad_lengths) >= 3 and all(n % block for n in bad_lengths):
        return {**out, "profile": "periodic", "block": block}
    if first >= 16 and all(x for n, x in zip(lengths, deviates, strict=True) if n >= first * 2):
        return {**out, "profile": "onset-at-length", "onset": first}
    slope = _log_slope([(n, d) for n, d in bad if n > 0 and math.isfinite(d) and d > 0])
    out["log_slope"] = None if slope is None else round(slope, 3)
    grows = slope is not None and slope > 0.25
    out["profile"] = "grows-with-length" if grows else "short-prefix" if first <= 2 else "from-length"
    return out


def _log_slope(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of log delta against log length."""
    if len(points) < 4:
        return None
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(d) for _, d in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return None if var == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
