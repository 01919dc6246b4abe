"""Where two computations part: a per-layer divergence plot (`layer_plot`: per layer the largest |Δ|
of the hidden state, new K and new V on a log axis, or a coloured cell for older records) and a
token-by-token view of two greedy continuations (`token_view`). Geometry and labels only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gate.report.fmt import as_float, number
from gate.report.plots import Frame, Marker, Tick, log_axis

SERIES = (("hidden_delta", "hidden state", "hidden"), ("k_delta", "new K", "k"), ("v_delta", "new V", "v"))
"""Per-layer magnitudes a layer record may carry, and their legend names."""
MAX_TOKENS = 48


@dataclass(frozen=True)
class LayerSeries:
    name: str
    kind: str
    """hidden, k or v: the line style."""
    line: str
    """SVG polyline points."""
    markers: list[Marker]


@dataclass(frozen=True)
class LayerCell:
    x: float
    width: float
    tone: str
    title: str


@dataclass(frozen=True)
class LayerPlot:
    """Per-layer divergence of the candidate's cached step from the reference's full pass."""

    frame: Frame
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    series: list[LayerSeries]
    """Empty when the records carry no magnitudes; then `cells` shows which layers diverged."""
    cells: list[LayerCell]
    first_x: float | None
    first_label: str
    prefix_len: str | None
    description: str


def layer_plot(layers: Sequence[Mapping[str, Any]], prefix_len: Any = None) -> LayerPlot | None:
    """Plot geometry for per-layer records; None when there is nothing to plot."""
    records = [r for r in layers if isinstance(r, Mapping) and as_float(r.get("layer")) is not None]
    if not records:
        return None
    frame = Frame(width=960, height=280, left=72.0, top=20.0, right=940.0, bottom=226.0)
    n = len(records)
    step = frame.plot_width / n

    def x_of(i: int) -> float:
        return round(frame.left + step * (i + 0.5), 1)

    values = [
        v
        for r in records
        for key, _, _ in SERIES
        if (v := as_float(r.get(key))) is not None and math.isfinite(v) and v > 0
    ]
    first = next((i for i, r in enumerate(records) if r.get("component")), None)
    first_label = f"first diverging layer {number(float(records[first]['layer']))}" if first is not None else ""
    x_ticks = [Tick(pos=x_of(i), label=number(float(r["layer"]))) for i, r in enumerate(records)]
    if n > 24:
        x_ticks = x_ticks[:: math.ceil(n / 24)]
    series: list[LayerSeries] = []
    cells: list[LayerCell] = []
    y_ticks: list[Tick] = []
    if values:
        y_of, y_ticks = log_axis(values, frame)
        for key, name, kind in SERIES:
            points, markers = [], []
            for i, r in enumerate(records):
                v = as_float(r.get(key))
                if v is None:
                    continue
                y = frame.top if not math.isfinite(v) else y_of(v)
                points.append(f"{x_of(i)},{y}")
                markers.append(
                    Marker(
                        x=x_of(i),
                        y=y,
                        tone="bad" if r.get("component") else "good",
                        title=f"layer {number(float(r['layer']))}: max |Δ| of the {name} = {number(v)}"
                        + (f" ({r['component']})" if r.get("component") else ""),
                        hollow=v == 0,
                    )
                )
            if markers:
                series.append(LayerSeries(name=name, kind=kind, line=" ".join(points), markers=markers))
    else:
        for i, r in enumerate(records):
            component = r.get("component")
            cells.append(
                LayerCell(
                    x=round(frame.left + step * i + 1, 1),
                    width=round(max(step - 2, 1.0), 1),
                    tone="bad" if component else "good",
                    title=f"layer {number(float(r['layer']))}: "
                    + (f"diverges ({component})" if component else "agrees with the full pass"),
                )
            )
    diverging = sum(1 for r in records if r.get("component"))
    described = f"{diverging} of {n} layers diverge from the reference's full pass"
    described += f"; {first_label}." if first_label else "."
    return LayerPlot(
        frame=frame,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        series=series,
        cells=cells,
        first_x=x_of(first) if first is not None else None,
        first_label=first_label,
        prefix_len=number(v) if (v := as_float(prefix_len)) is not None else None,
        description=described,
    )


@dataclass(frozen=True)
class TokenCell:
    step: str
    reference: str
    candidate: str
    differs: bool
    first: bool
    """The first step at which the two continuations differ."""


@dataclass(frozen=True)
class TokenView:
    """Two greedy continuations aligned by step."""

    title: str
    cells: list[TokenCell]
    first_step: str | None
    note: str


def token_view(
    title: str, reference: Sequence[Any], candidate: Sequence[Any], start: int = 0, note: str = ""
) -> TokenView | None:
    """Aligned cells for two token sequences (ids or strings); at most MAX_TOKENS around the first
    difference. None when either side is empty."""
    if not reference or not candidate:
        return None
    n = max(len(reference), len(candidate))
    first = next(
        (i for i in range(n) if i >= len(reference) or i >= len(candidate) or str(reference[i]) != str(candidate[i])),
        None,
    )
    lo = 0 if first is None else max(0, min(first - MAX_TOKENS // 3, n - MAX_TOKENS))
    hi = min(n, lo + MAX_TOKENS)
    cells = []
    for i in range(lo, hi):
        ref = str(reference[i]) if i < len(reference) else "∅"
        cand = str(candidate[i]) if i < len(candidate) else "∅"
        cells.append(
            TokenCell(step=str(start + i), reference=ref, candidate=cand, differs=ref != cand, first=i == first)
        )
    folded = []
    if lo:
        folded.append(f"{lo} identical tokens before")
    if hi < n:
        folded.append(f"{n - hi} tokens after")
    shown_note = "; ".join(filter(None, [note, *(f"{f} not shown" for f in folded)]))
    return TokenView(
        title=title, cells=cells, first_step=str(start + first) if first is not None else None, note=shown_note
    )
