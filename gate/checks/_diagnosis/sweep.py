"""The diagnosis of a failed sweep over prefix lengths, read into one bug class, JSON-ready."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gate.checks._diagnosis.classes import BUG_CLASSES, explanation
from gate.checks._diagnosis.classifier import classify
from gate.checks._diagnosis.layers import (
    chunk_steps,
    layer_divergence,
    layer_fields,
    progressive_cuts,
    small_clean,
    traced_divergence,
    traced_reference,
)
from gate.checks._diagnosis.model_level import model_level
from gate.checks._diagnosis.profile import length_profile

if TYPE_CHECKING:
    import torch

    from gate.checks._compare import Tolerance
    from gate.protocols import DecodePath


def diagnose(
    lengths: Sequence[int],
    deviates: Sequence[bool],
    delta: Sequence[float],
    *,
    reference: DecodePath,
    candidate: DecodePath,
    tokens: torch.Tensor,
    dtype: str,
    trace_at: int | None = None,
    flips: Sequence[bool] | None = None,
    progressive: bool = False,
    tol: Tolerance | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Profile + first diverging layer + bug class, JSON-ready. The layers are traced at the first
    deviating length that has a prefix; `progressive`: the candidate grew one session through
    `lengths` (gate.checks._sweep.cached_sweep), whose chunks the tracer replays where the traced
    step alone shows nothing. A small attention-output difference with clean K/V there is traced at
    the shortest swept length too: the same at both is numeric-precision."""
    profile = length_profile(lengths, deviates, delta, flips)
    if any(x and not math.isfinite(d) for x, d in zip(deviates, delta, strict=True)):
        profile["non_finite"] = True  # NaN or inf in the candidate's logits at a deviating length
    at = trace_at
    if at is None:
        at = next((n for n, x in zip(lengths, deviates, strict=True) if x and n > 0), None)
    layers: dict[str, Any] | None = None
    error = None
    precision_at: list[int] = []
    shortest = min((n for n in lengths if n > 0), default=None)
    traced, seen = traced_reference(reference)
    cuts = progressive_cuts(lengths, int(at)) if progressive and at is not None else []
    if at is not None and traced is not None:
        try:
            layers = traced_divergence(traced, candidate, tokens, int(at), dtype, cuts)
            if small_clean(layers) and shortest is not None:
                precision_at = [int(at)]
                if shortest != at and small_clean(layer_divergence(traced, candidate, tokens, shortest, dtype)):
                    precision_at.insert(0, shortest)
        except Exception as err:  # diagnosis must never turn a failure into an error
            error = f"{err.__class__.__name__}: {err}"
    seen_level: dict[str, Any] | None = None
    if (
        layers is None
        and error is None
        and traced is not None  # a live path to run the experiments against (a store answers only its rows)
        and at is not None
        and tol is not None
        and profile.get("profile") != "everywhere-small"
    ):
        try:  # no layer trace: what experiments with sessions alone can tell
            seen_level = model_level(
                traced,
                candidate,
                tokens,
                int(at),
                tol,
                seed,
                first_length=profile.get("first_deviating_length"),
                non_finite=bool(profile.get("non_finite")),
                chunks=chunk_steps(candidate, int(at), cuts),
                profile=profile.get("profile"),
            )
        except Exception as err:
            error = f"{err.__class__.__name__}: {err}"
    if layers is not None and layers.get("replayed_chunk"):
        bug_class = classify({"profile": "chunk-step"}, layers)  # the chunk's own step decides
    elif len(precision_at) == 2 or precision_at == [shortest]:
        bug_class = "numeric-precision"
        profile["small_clean_at"] = precision_at
    elif seen_level is not None:
        bug_class = seen_level.pop("bug_class")
        profile["model_level"] = seen_level
    else:
        bug_class = classify(profile, layers)
    out: dict[str, Any] = {"bug_class": bug_class, "explanation": BUG_CLASSES[bug_class], **profile}
    if layers is not None and layers.get("replayed_chunk"):
        out["replayed_chunk"] = layers["replayed_chunk"]
    if seen:
        out["layer_trace"] = seen
    if layers is not None:
        out.update(layer_fields(layers))
    if error:
        out["tracing_error"] = error
    if seen_level is not None and seen_level.get("decide"):
        out["decide"] = seen_level["decide"]  # the capability that would decide (or confirm) the class
    if bug_class == "uncertain" and seen_level is not None:
        out["candidates"] = seen_level["candidates"]
        out["evidence"] = seen_level["evidence"]
    elif bug_class == "uncertain":
        out["evidence"] = (
            f"length profile {profile.get('profile')!r} (first deviating length "
            f"{profile.get('first_deviating_length')}); "
            + (
                f"first diverging layer {layers['first_diverging_layer']} ({layers['component']})"
                if layers is not None
                else "no layer trace (a path without LayerTracing, or the trace failed)"
            )
        )
    out["explanation"] = explanation(out)
    return out
