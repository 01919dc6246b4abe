"""Geometry for the dossier's inline SVG plots (templates/partials/*.svg.j2 draw them): coordinates
and labels, never markup, rounded to 0.1 px so gold files are stable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gate.report.fmt import number


@dataclass(frozen=True)
class Tick:
    pos: float
    label: str


@dataclass(frozen=True)
class Marker:
    x: float
    y: float
    tone: str
    """good, bad, warn or muted."""
    title: str
    """Hover text."""
    hollow: bool = False


@dataclass(frozen=True)
class Frame:
    """An SVG canvas and the rectangle the data lives in."""

    width: int
    height: int
    left: float
    top: float
    right: float
    bottom: float

    @property
    def plot_width(self) -> float:
        return self.right - self.left

    @property
    def plot_height(self) -> float:
        return self.bottom - self.top


@dataclass(frozen=True)
class SweepPlot:
    """|Δlogit| against prefix length, both on log axes, with the tolerance and the tie markers."""

    frame: Frame
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    line: str
    """SVG polyline `points` value through the measured lengths."""
    markers: list[Marker]
    ties: list[Marker]
    tolerance_y: float | None
    tolerance_label: str
    first_failure: float | None
    """First length where the argmax flipped (not a tie), else the first over tolerance."""
    first_failure_x: float | None
    first_failure_label: str
    first_failure_anchor: str
    """SVG text-anchor of the label: it sits on the side of the marker with more room."""
    description: str
    """One sentence for screen readers and the Markdown dossier."""
    boundaries: list[float] = field(default_factory=list)
    """x of each layout boundary (block, chunk or window edge) the candidate reported."""
    boundary_label: str = ""
    """Legend text for the boundary lines, e.g. "64 layout boundaries (block edges)"."""


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    kind: str
    """observed or expected."""
    title: str


@dataclass(frozen=True)
class DistributionPlot:
    """Observed against expected shares, side by side per category."""

    frame: Frame
    bars: list[Bar]
    x_labels: list[Tick]
    y_ticks: list[Tick]
    description: str


@dataclass(frozen=True)
class SlicePlot:
    """One slice's point estimate, confidence bound and threshold on a shared strip."""

    frame: Frame
    threshold_x: float
    point_x: float
    bound_x: float | None
    interval: tuple[float, float] | None
    tone: str
    threshold_label: str = ""
    """"threshold 0.9" under the threshold tick."""
    bound_label: str = ""
    """"bound 0.87" above the bound tick."""
    point_label: str = ""


def _r(value: float) -> float:
    return round(value, 1)


def log_axis(values: Sequence[float], frame: Frame) -> tuple[Callable[[float], float], list[Tick]]:
    """A log y axis over the decades `values` (positive, finite) span, at most 12 (1e-8..1: none):
    the y of a value (clamped to the axis; 0 at its foot) and a tick per decade."""
    if values:
        lo, hi = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
        hi = hi + 1 if hi == lo else hi
        lo = max(lo, hi - 12)
    else:
        lo, hi = -8, 0

    def y_of(value: float) -> float:
        clamped = min(max(math.log10(value), lo), hi) if value > 0 else lo
        return _r(frame.bottom - frame.plot_height * (clamped - lo) / (hi - lo))

    return y_of, [Tick(pos=y_of(10.0**k), label=f"1e{k}") for k in range(lo, hi + 1)]


def _length_ticks(lengths: Sequence[float]) -> list[float]:
    top = max(lengths)
    decades = [0.0] + [10.0**k for k in range(0, 7) if 10.0**k <= top * 1.0001]
    return decades if len(decades) >= 3 else sorted(set(lengths))[:12]


def sweep_plot(
    lengths: Sequence[float],
    deltas: Sequence[float | None],
    agree: Sequence[bool | None],
    tie_lengths: set[float],
    tolerance: float | None,
    tolerance_words: str | None = None,
    boundaries: Sequence[float] = (),
) -> SweepPlot:
    """Plot geometry for a prefix sweep. `deltas`/`agree` align with `lengths`; None means unknown.
    `boundaries`: the candidate's layout boundaries (block and chunk edges), drawn as thin lines."""
    frame = Frame(width=960, height=380, left=72.0, top=26.0, right=940.0, bottom=326.0)
    # log10(L + 1): the sweep starts at prefix length 0, which a plain log axis cannot place.
    x_max = max(max(math.log10(max(length, 0.0) + 1.0) for length in lengths), 0.5) * 1.04

    def x_of(length: float) -> float:
        return _r(frame.left + frame.plot_width * math.log10(max(length, 0.0) + 1.0) / x_max)

    finite = [d for d in deltas if d is not None and math.isfinite(d) and d > 0]
    y_of, y_ticks = log_axis([*finite, *([tolerance] if tolerance and tolerance > 0 else [])], frame)
    markers: list[Marker] = []
    points: list[str] = []
    first_flip: float | None = None  # first argmax disagreement that is not a tie: the failure
    first_over: float | None = None  # first length over tolerance: a warning on its own
    for length, delta, ok in zip(lengths, deltas, agree, strict=True):
        x = x_of(length)
        if delta is None:
            y, shown = frame.bottom, "unknown"
        elif math.isinf(delta) or math.isnan(delta):
            y, shown = frame.top, number(delta)
        else:
            y, shown = y_of(delta), number(delta)
        tied = length in tie_lengths
        flipped = ok is False and not tied
        over = delta is not None and tolerance is not None and not delta <= tolerance
        if flipped and first_flip is None:
            first_flip = length
        if over and first_over is None:
            first_over = length
        if flipped:
            tone = "bad"
        elif over or ok is False:
            tone = "warn"
        elif ok is True or (delta is not None and tolerance is not None):
            tone = "good"
        else:
            tone = "muted"
        argmax = {True: "argmax agrees", False: "argmax DIFFERS", None: "argmax not recorded"}[ok]
        tie = "; top-2 logits tied (a flip here is not a bug)" if tied else ""
        beyond = "; over tolerance" if over else ""
        markers.append(
            Marker(
                x=x,
                y=y,
                tone=tone,
                hollow=delta == 0,
                title=f"prefix length {number(length)}: max |Δlogit| = {shown}{beyond}; {argmax}{tie}",
            )
        )
        points.append(f"{x},{y}")
    first_failure = first_flip if first_flip is not None else first_over
    if first_flip is not None:
        failure_label = f"argmax flips from {number(first_flip)}"
    elif first_over is not None:
        failure_label = f"over tolerance from {number(first_over)}"
    else:
        failure_label = ""

    ties = [
        Marker(
            x=x_of(t),
            y=_r(frame.top - 8),
            tone="warn",
            title=f"prefix length {number(t)}: top-2 logits within tolerance (a tie, not a bug)",
        )
        for t in sorted(tie_lengths)
    ]
    x_ticks = [Tick(pos=x_of(t), label=number(t)) for t in _length_ticks(lengths)]
    tol_y = y_of(tolerance) if tolerance is not None and tolerance > 0 else None
    fail_x = x_of(first_failure) if first_failure is not None else None
    worst = max(finite) if finite else 0.0
    described = (
        f"max |Δlogit| over {len(lengths)} prefix lengths from {number(min(lengths))} to "
        f"{number(max(lengths))}; largest {number(worst)}"
    )
    if tolerance is not None:
        described += f" against tolerance {number(tolerance)}"
    described += f"; {failure_label}." if failure_label else "; the argmax agrees at every length."
    top_length = max(lengths)
    shown_bounds = sorted({b for b in boundaries if 0 < b <= top_length})
    return SweepPlot(
        boundaries=[x_of(b) for b in shown_bounds],
        boundary_label=(
            f"{len(shown_bounds)} layout boundaries (block, chunk or window edges) within the sweep"
            if shown_bounds
            else ""
        ),
        frame=frame,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        line=" ".join(points),
        markers=markers,
        ties=ties,
        tolerance_y=tol_y,
        tolerance_label=tolerance_words or (f"tolerance {number(tolerance)}" if tolerance is not None else ""),
        first_failure=first_failure,
        first_failure_x=fail_x,
        first_failure_label=failure_label,
        first_failure_anchor="start" if fail_x is not None and fail_x < (frame.left + frame.right) / 2 else "end",
        description=described,
    )


def _nice_ticks(top: float, count: int = 4) -> list[float]:
    if top <= 0:
        return [0.0]
    raw = top / count
    step = 10.0 ** math.floor(math.log10(raw))
    for mult in (1.0, 2.0, 2.5, 5.0, 10.0):
        if raw <= step * mult:
            step *= mult
            break
    return [step * i for i in range(int(top / step + 1e-9) + 1)]


def _short(name: str, limit: int = 22) -> str:
    """A category label that still says what it is: long token tuples keep their head and tail."""
    if len(name) <= limit:
        return name
    head = (limit - 1) * 2 // 3
    return name[:head] + "…" + name[-(limit - 1 - head) :]


def distribution_plot(
    categories: Sequence[str], observed: Sequence[float], expected: Sequence[float]
) -> DistributionPlot:
    """Side-by-side bars of observed and expected shares (each series normalised to sum to 1)."""
    frame = Frame(width=960, height=330, left=64.0, top=14.0, right=940.0, bottom=220.0)
    obs_total = sum(observed) or 1.0
    exp_total = sum(expected) or 1.0
    obs = [o / obs_total for o in observed]
    exp = [e / exp_total for e in expected]
    top = max([*obs, *exp, 1e-9]) * 1.1
    ticks = _nice_ticks(top)
    top = max(top, ticks[-1])
    group = frame.plot_width / len(categories)
    bar_w = _r(max(min(group * 0.38, 28.0), 1.0))
    bars: list[Bar] = []
    labels: list[Tick] = []
    shown = [_short(name) for name in categories]
    label_every = max(1, math.ceil(14 / group))  # labels are slanted: ~14 px of width each
    for i, name in enumerate(categories):
        center = frame.left + group * (i + 0.5)
        for kind, share, count, dx in (
            ("observed", obs[i], observed[i], -bar_w),
            ("expected", exp[i], expected[i], 0.0),
        ):
            height = frame.plot_height * share / top
            bars.append(
                Bar(
                    x=_r(center + dx),
                    y=_r(frame.bottom - height),
                    width=bar_w,
                    height=_r(height),
                    kind=kind,
                    title=f"{name}: {kind} {number(count)} ({share:.1%})",
                )
            )
        if i % label_every == 0:
            labels.append(Tick(pos=_r(center), label=shown[i]))
    y_ticks = [
        Tick(pos=_r(frame.bottom - frame.plot_height * t / top), label=f"{t:.0%}" if top > 0.05 else f"{t:.1%}")
        for t in ticks
    ]
    gap = max(abs(o - e) for o, e in zip(obs, exp, strict=True))
    return DistributionPlot(
        frame=frame,
        bars=bars,
        x_labels=labels,
        y_ticks=y_ticks,
        description=f"observed against expected shares over {len(categories)} categories; largest gap {gap:.1%}",
    )


def slice_plot(
    point: float, bound: float | None, threshold: float, interval: tuple[float, float] | None, passed: bool | None
) -> SlicePlot:
    """A one-line strip: threshold tick, the point estimate and its one-sided bound (or interval)."""
    frame = Frame(width=360, height=56, left=10.0, top=18.0, right=350.0, bottom=36.0)
    values = [point, threshold, *([bound] if bound is not None else []), *(interval or ())]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.15 or max(abs(hi) * 0.05, 0.05)
    lo, hi = lo - pad, hi + pad

    def x_of(value: float) -> float:
        return _r(frame.left + frame.plot_width * (value - lo) / (hi - lo))

    span = interval if interval is not None else ((min(point, bound), max(point, bound)) if bound is not None else None)
    return SlicePlot(
        frame=frame,
        threshold_x=x_of(threshold),
        point_x=x_of(point),
        bound_x=x_of(bound) if bound is not None else None,
        interval=(x_of(span[0]), x_of(span[1])) if span is not None else None,
        tone={True: "good", False: "bad", None: "muted"}[passed],
        threshold_label=f"threshold {number(threshold)}",
        bound_label=f"bound {number(bound)}" if bound is not None else "",
        point_label=f"point {number(point)}",
    )
