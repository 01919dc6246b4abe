"""Name the likely bug class of a failed parity check (background: reading a divergence).

Two instruments:

* the failure *profile* over prefix lengths: failures from the very shortest prefixes point to
  mask or index arithmetic; deviation growing with length to a positional index; an onset at a
  long length to a mask that changes with length (a window); passes only at multiples of some
  block size to a truncated block;
* the first diverging *layer* (LayerTracing): per layer, compare what attention read (K and V
  over the prefix and the appended token) and the block's hidden state between the candidate's
  cached step and the reference's full pass. Layer 0 agreeing and a later layer drifting is
  per-layer ordering; a K/V read of the wrong length is truncation or a read past the valid
  length; prefix K/V that differ from row 0 on are stale or foreign state; only the appended
  token's K (RoPE) or K and V (learned positions) differing is its position; K/V equal and the
  hidden state differing is the mask.

This module imports torch only inside the functions that compare tensors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gate.errors import AdapterUnavailable
from gate.protocols import LayerTracing, LiveCounterpart

if TYPE_CHECKING:
    import torch

    from gate.protocols import DecodePath

BUG_CLASSES: dict[str, str] = {
    "mask-offset": "causal mask ignores the cache offset (tril from the chunk origin): "
    "K/V agree, attention output differs from the shortest prefixes on",
    "mask-window": "the mask changes with length (a sliding window where full attention is declared): "
    "agreement below a length, divergence from it on",
    "positional-index": "the appended token is encoded at the wrong position (start_pos / position ids)",
    "per-layer-ordering": "layer 0 agrees and a later layer drifts: per-layer ordering of RoPE and the cache write",
    "kv-truncation": "attention read fewer keys than the prefix holds (a truncated block)",
    "read-past-valid-length": "attention read past the valid length of the cache (the unused tail)",
    "stale-state": "prefix K/V differ from what these weights compute: stale cache (weights changed, cache kept)",
    "foreign-state": "prefix K/V belong to another request (cross-request handle)",
    "reset-leak": "state survived a reset: the second request does not match a fresh one",
    "non-finite-output": "NaN or inf in the logits: a read of uninitialised or poisoned memory, or an overflow",
    "rounding-only": "bit differences within tolerance: consistent with different reduction shapes",
    "kv-head-mapping": "the cached K/V of one KV head sit under another (a wrong KV-head mapping under "
    "grouped-query attention): every prefix row differs, and a permutation of the heads matches",
    "numeric-precision": "a small |Δ| spread over every length with K/V agreeing and argmax flips only at "
    "near-ties: lower-precision arithmetic (e.g. a softmax or matmul in a narrower dtype), not a cache bug",
    "approximation": "every cached K/V row differs from what the model computes by a small relative "
    "error: lossy storage (quantised or narrowed K/V), an approximation declared as something exact",
    "padding": "a request computes differently inside a padded batch than alone: padding counted into "
    "its positions, or pad tokens attended (position ids or the padding mask of a batched request)",
    "batch-crosstalk": "a request computes differently inside a batch of equal-length requests than alone: "
    "a row reads another row's state (a cache handle or block table indexed by the wrong row)",
    "continuous-batching": "a request computes differently in a running batch that requests join and leave "
    "than alone or padded: a slot or page reused without clearing the previous request's state, or positions "
    "and masks of a mixed prefill/decode forward taken from another row",
    "uncertain": "the evidence fits no class: see the length profile and the per-layer comparison",
}

SMALL_RELATIVE_ERROR = 0.1
"""Largest relative K/V or hidden-state error (of the reference's max |value|) read as an
approximation or a precision change rather than a wrong index, mask or state (those move values
by their own scale)."""

STATE_TOLERANCE = {"float32": 1e-4, "bfloat16": 4e-2, "float16": 1e-2}
"""Relative tolerance for K, V and hidden-state comparisons (of the reference's max |value|)."""


def length_profile(
    lengths: Sequence[int], deviates: Sequence[bool], delta: Sequence[float], flips: Sequence[bool] | None = None
) -> dict[str, Any]:
    """Classify where the deviations sit over prefix lengths. `flips`: lengths with an argmax flip
    that is not a near-tie (None: unknown)."""
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
        out.update(profile="everywhere-small", median_delta=spread[len(spread) // 2] if spread else None)
        return out
    block = math.gcd(*good_lengths) if good_lengths else 0
    bad_lengths = [n for n, _ in bad if n > 0]
    # passes only at multiples of a block (and fails next to them): a truncated block
    if block >= 4 and len(good_lengths) >= 3 and len(bad_lengths) >= 3 and all(n % block for n in bad_lengths):
        out.update(profile="periodic", block=block)
        return out
    if first >= 16 and all(x for n, x in zip(lengths, deviates, strict=True) if n >= first * 2):
        out.update(profile="onset-at-length", onset=first)
        return out
    finite = [(n, d) for n, d in bad if n > 0 and math.isfinite(d) and d > 0]
    slope = _log_slope(finite)
    out["log_slope"] = None if slope is None else round(slope, 3)
    if first <= 2:
        out["profile"] = "grows-with-length" if slope is not None and slope > 0.25 else "short-prefix"
    else:
        out["profile"] = "grows-with-length" if slope is not None and slope > 0.25 else "from-length"
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


def _differs(a: torch.Tensor, b: torch.Tensor, rel: float) -> bool:
    if not b.numel():
        return False
    scale = float(b.abs().max())
    return bool(((a - b).abs() > rel * max(scale, 1e-6)).any()) or bool(a.isnan().any())


def _rows_differing(a: torch.Tensor, b: torch.Tensor, rel: float) -> list[int]:
    # a, b: [B, H_kv, T, D] -> positions t where any batch row, head or dim differs
    if not b.numel():
        return []
    scale = max(float(b.abs().max()), 1e-6)
    bad = ((a - b).abs() > rel * scale) | a.isnan()
    return [int(t) for t in bad.any(dim=(0, 1, 3)).nonzero().flatten()]


def _foreign_rows(cand_k: torch.Tensor, ref_k: torch.Tensor, rel: float) -> bool:
    """Whether each candidate row's prefix K matches a *different* reference row's."""
    rows = cand_k.shape[0]
    if rows < 2:
        return False
    return all(any(not _differs(cand_k[b], ref_k[o], rel) for o in range(rows) if o != b) for b in range(rows))


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over the reference's max |b| (0 for empty tensors)."""
    if not b.numel():
        return 0.0
    return float((a - b).abs().nan_to_num(float("inf")).max()) / max(float(b.abs().max()), 1e-6)


def _heads_permuted(cand_k: torch.Tensor, ref_k: torch.Tensor, rel: float) -> bool:
    """Whether the candidate's KV heads [B, H_kv, T, D] are the reference's under a non-identity
    mapping (each candidate head equals some other reference head)."""
    heads = ref_k.shape[1]
    if heads < 2 or cand_k.shape != ref_k.shape:
        return False
    mapping = []
    for h in range(heads):
        match = [o for o in range(heads) if not _differs(cand_k[:, h], ref_k[:, o], rel)]
        if not match:
            return False
        mapping.append(match[0])
    return mapping != list(range(heads))


def _max_delta(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """max |a - b| (NaN counts as infinite), or None when the shapes differ."""
    if a.shape != b.shape or a.numel() == 0:
        return None
    return float((a.float() - b.float()).abs().nan_to_num(float("inf")).max())


def traced_reference(reference: DecodePath) -> tuple[DecodePath | None, str | None]:
    """The path whose full pass a layer trace reads, and what the diagnosis says about it. A stored
    reference (a recorded baseline) holds no layer states: its live counterpart, the model the
    baseline names built in this job, is traced instead (the verdict's logits stay the stored
    ones), or, where there is none, the diagnosis says it saw no layer trace and why."""
    if not isinstance(reference, LiveCounterpart):
        return reference, None
    try:
        live = reference.live_reference()
    except AdapterUnavailable as err:
        return None, (
            f"not seen: the per-layer trace (the reference is a {reference.mode}, which stores no layer "
            f"states, and {err}); the class rests on the failure profile alone"
        )
    return live, (
        f"traced against {live.name}, the {reference.mode}'s model built live (a store holds no layer "
        "states; the verdict compared the stored answers)"
    )


def layer_divergence(
    reference: DecodePath, candidate: DecodePath, tokens: torch.Tensor, prefix_len: int, dtype: str
) -> dict[str, Any] | None:
    """Compare the candidate's cached step at `prefix_len` with the reference's full pass, layer by
    layer. None when either path offers no LayerTracing."""
    if not isinstance(reference, LayerTracing) or not isinstance(candidate, LayerTracing):
        return None
    rel = STATE_TOLERANCE.get(dtype, 1e-3)
    ref_states = reference.full_layer_states(tokens, prefix_len)
    cand_states = candidate.layer_states(tokens, prefix_len)
    per_layer: list[dict[str, Any]] = []
    first: dict[str, Any] | None = None
    for layer, (ref, cand) in enumerate(zip(ref_states, cand_states, strict=True)):
        info: dict[str, Any] = {"layer": layer, "prefix_rows": prefix_len}
        ref_k, cand_k, ref_v, cand_v = ref["k"].cpu(), cand["k"].cpu(), ref["v"].cpu(), cand["v"].cpu()
        expected, read = ref_k.shape[2], cand_k.shape[2]
        info["keys_expected"], info["keys_read"] = expected, read
        if read != expected:
            info["component"] = "kv-read-length"
        else:
            past_k = _rows_differing(cand_k[:, :, :prefix_len], ref_k[:, :, :prefix_len], rel)
            past_v = _rows_differing(cand_v[:, :, :prefix_len], ref_v[:, :, :prefix_len], rel)
            new_k = _differs(cand_k[:, :, prefix_len:], ref_k[:, :, prefix_len:], rel)
            new_v = _differs(cand_v[:, :, prefix_len:], ref_v[:, :, prefix_len:], rel)
            hidden = _differs(cand["hidden"].cpu(), ref["hidden"].cpu(), rel)
            info.update(past_k_rows=len(past_k), past_v_rows=len(past_v), new_k=new_k, new_v=new_v, hidden=hidden)
            info["past_kv_relative_error"] = round(
                max(
                    _relative_error(cand_k[:, :, :prefix_len], ref_k[:, :, :prefix_len]),
                    _relative_error(cand_v[:, :, :prefix_len], ref_v[:, :, :prefix_len]),
                ),
                6,
            )
            info["hidden_relative_error"] = round(_relative_error(cand["hidden"].cpu(), ref["hidden"].cpu()), 6)
            # magnitudes for the dossier's per-layer plot: the appended step's K, V and hidden state
            info.update(
                k_delta=_max_delta(cand_k[:, :, prefix_len:], ref_k[:, :, prefix_len:]),
                v_delta=_max_delta(cand_v[:, :, prefix_len:], ref_v[:, :, prefix_len:]),
                hidden_delta=_max_delta(cand["hidden"].cpu(), ref["hidden"].cpu()),
            )
            if past_k or past_v:
                info["component"] = "past-kv"
                info["first_past_row"] = min(past_k + past_v)
                info["past_rows_differing"] = len(set(past_k + past_v))
                info["v_agrees"] = not past_v
                info["foreign"] = _foreign_rows(cand_k[:, :, :prefix_len], ref_k[:, :, :prefix_len], rel)
                info["heads_permuted"] = _heads_permuted(cand_k[:, :, :prefix_len], ref_k[:, :, :prefix_len], rel)
            elif new_k or new_v:
                info["component"] = "new-kv"
                info["v_agrees"] = not new_v
            elif hidden:
                info["component"] = "attention-output"
            else:
                info["component"] = None
        per_layer.append(info)
        if first is None and info["component"] is not None:
            first = info
    return {
        "prefix_len": prefix_len,
        "first_diverging_layer": None if first is None else first["layer"],
        "component": None if first is None else first["component"],
        "layers": per_layer,
        "first": first,
    }


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
    if kind == "periodic":
        return "kv-truncation"
    if kind == "onset-at-length":
        return "mask-window"
    if kind == "grows-with-length":
        return "positional-index"
    if kind == "short-prefix":
        return "mask-offset"
    if kind == "everywhere-small":
        return "numeric-precision"
    return "uncertain"


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
) -> dict[str, Any]:
    """Profile + first diverging layer + bug class, JSON-ready. The layers are traced at the first
    deviating length that has a prefix (length 0 has no cached K/V to compare)."""
    profile = length_profile(lengths, deviates, delta, flips)
    if any(x and not math.isfinite(d) for x, d in zip(deviates, delta, strict=True)):
        profile["non_finite"] = True  # NaN or inf in the candidate's logits at a deviating length
    at = trace_at
    if at is None:
        at = next((n for n, x in zip(lengths, deviates, strict=True) if x and n > 0), None)
    layers: dict[str, Any] | None = None
    error = None
    traced, seen = traced_reference(reference)
    if at is not None and traced is not None:
        try:
            layers = layer_divergence(traced, candidate, tokens, int(at), dtype)
        except Exception as err:  # diagnosis must never turn a failure into an error
            error = f"{err.__class__.__name__}: {err}"
    bug_class = classify(profile, layers)
    out: dict[str, Any] = {"bug_class": bug_class, "explanation": BUG_CLASSES[bug_class], **profile}
    if seen:
        out["layer_trace"] = seen
    if layers is not None:
        out["first_diverging_layer"] = layers["first_diverging_layer"]
        out["component"] = layers["component"]
        out["traced_prefix_len"] = layers["prefix_len"]
        out["layers"] = layers["layers"]
    if error:
        out["tracing_error"] = error
    if bug_class == "uncertain":
        out["evidence"] = (
            f"length profile {profile.get('profile')!r} (first deviating length "
            f"{profile.get('first_deviating_length')}); "
            + (
                f"first diverging layer {layers['first_diverging_layer']} ({layers['component']})"
                if layers is not None
                else "no layer trace (a path without LayerTracing, or the trace failed)"
            )
        )
    return out
