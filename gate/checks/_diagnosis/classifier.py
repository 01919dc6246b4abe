"""The bug class read from a length profile and, where the paths offer one, a layer divergence."""

from __future__ import annotations

from typing import Any

from gate.checks._diagnosis.classes import SMALL_RELATIVE_ERROR


def classify(profile: dict[str, Any], layers: dict[str, Any] | None) -> str:
    """The bug class (a key of BUG_CLASSES) from a length profile and a layer divergence."""
    first = layers.get("first") if layers else None
    kind = profile.get("profile")
    if first is not None:
        component = first["component"]
        if component == "kv-read-length":
            return "kv-truncation" if first["keys_read"] < first["keys_expected"] else "read-past-valid-length"
        if component == "past-kv" and first.get("heads_permuted"):
            return "kv-head-mapping"
        if component == "attention-output" and first.get("heads_remapped"):
            return "kv-head-mapping"  # K/V right, each query head returned another KV head's answer
        small_state = first.get("past_kv_relative_error", 1.0) <= SMALL_RELATIVE_ERROR
        if component == "past-kv" and small_state and first.get("past_rows_differing", 0) >= first["prefix_rows"]:
            return "approximation"  # every stored row off by a little: lossy storage, not a wrong index
        if first["layer"] > 0:
            if component in ("past-kv", "new-kv"):  # this layer's keys are wrong while layer 0's are right
                return "per-layer-ordering"
            component = "attention-output"  # a sub-threshold layer-0 change, grown downstream
        if component == "attention-output" and kind == "everywhere-small":
            return "numeric-precision"
        if component == "past-kv":
            if first.get("foreign"):  # every row holds another request's prefix
                return "foreign-state"
            if first.get("v_agrees") or first.get("first_past_row", 0) > 0:
                return "positional-index"  # RoPE moves K only; later chunks mis-encoded
            return "stale-state"
        if component == "new-kv":
            return "positional-index"
        if component == "attention-output":
            return "mask-window" if kind == "onset-at-length" else "mask-offset"
    if first is None and profile.get("non_finite"):
        return "non-finite-output"  # no layer trace to say where the NaN came from: name what is seen
    return PROFILE_CLASSES.get(kind or "", "uncertain")


PROFILE_CLASSES = {
    "periodic": "kv-truncation",
    "onset-at-length": "mask-window",
    "grows-with-length": "positional-index",
    "short-prefix": "mask-offset",
    "everywhere-small": "numeric-precision",
}
"""The class a length profile alone names, where no layer names one."""
