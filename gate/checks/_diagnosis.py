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

import inspect
import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from gate.errors import AdapterUnavailable
from gate.protocols import LayerTracing, LayoutEdges, LiveCounterpart, offered

if TYPE_CHECKING:
    import torch

    from gate.checks._compare import Tolerance
    from gate.protocols import DecodePath

BUG_CLASSES: dict[str, str] = {
    "mask-offset": "causal mask ignores the cache offset (tril from the chunk origin): "
    "K/V agree, attention output differs from the shortest prefixes on, or only on steps of several "
    "tokens over a cache where only chunks get the wrong origin",
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
    "kv-head-mapping": "a query head reads another KV head than grouped-query attention assigns it: the "
    "cached K/V of one KV head sit under another (every prefix row differs, a permutation of the heads "
    "matches), or the K/V are right and the map is wrong at read time (each query head's attention output "
    "is exactly another KV head's expected output)",
    "numeric-precision": "a small relative difference with K/V agreeing at every traced length, the shortest "
    "included: lower-precision arithmetic (e.g. a softmax or matmul in a narrower dtype), not a cache bug",
    "approximation": "every cached K/V row differs from what the model computes by a small relative "
    "error: lossy storage (quantised or narrowed K/V), an approximation declared as something exact",
    "padding": "a request computes differently inside a padded batch than alone: padding counted into "
    "its positions, or pad tokens attended (position ids or the padding mask of a batched request)",
    "batch-crosstalk": "a request computes differently inside a batch of equal-length requests than alone: "
    "a row reads another row's state (a cache handle or block table indexed by the wrong row)",
    "continuous-batching": "a request computes differently in a running batch that requests join and leave "
    "than alone or padded: a slot or page reused without clearing the previous request's state, or positions "
    "and masks of a mixed prefill/decode forward taken from another row",
    "quant-residual-overflow": "a quantised cache holds more tokens in full precision than its declared "
    "residual, or not the newest ones, or loses or duplicates tokens between its quantised and full-precision "
    "parts (a residual flushed late, a multi-token append miscounted)",
    "quant-error-bound": "a quantised element reads back farther from what was written than its scheme allows "
    "from the stored scale and zero point (a scale stored wrong, fewer levels than the stated bits)",
    "quant-config-mismatch": "the quantised cache runs another scheme than the manifest declares (bits, group "
    "size, axes, residual) or holds other bytes than that scheme needs",
    "missed-reuse": "the engine recomputed a prefix it holds where reuse applies (no cache hit): the cached "
    "path is not exercised there, a speed loss rather than a wrong reply, and the claim unproven at that length",
    "cached-reply": "a reply through the engine's cache differs from the same prompt without it; an engine's API "
    "gives no K/V or layer trace, so the cause (lossy storage, a wrong mask or position, stale state) is not "
    "narrowed further: see the lengths and the Δlogprob",
    "restored-state": "a continuation from a slot saved to a file and restored differs from the same prompt "
    "computed alone: the save or the restore lost or changed state (positions, the KV type, another model's "
    "state, the slot the file went to)",
    "malformed-state": "the engine accepted a malformed or truncated saved state (a slot file) instead of "
    "refusing it, or answered from it",
    "unreported-logprobs": "the engine's reply leaves out the probabilities it was asked for: positions with no "
    "top-k and a logprob of 0 (probability 1) where the reference computes less, with the same greedy tokens "
    "(llama.cpp b8672 with speculative decoding on: every token after the first); the tokens may be right, "
    "the reported distribution is not the model's",
    "uncertain": "the evidence fits no class: see the length profile and the per-layer comparison",
}


class Decided(NamedTuple):
    """How a class is told apart from the others: with sessions alone (no optional capability),
    with the layer trace, with the attention probe ("-": that capability adds nothing to it)."""

    sessions: str
    trace: str
    probe: str


DIAGNOSIS_TABLE: dict[str, Decided] = {
    "mask-offset": Decided(
        "a step over a cache blind to the token before it (visibility), also where the onset looks like a "
        "window; failures from the shortest prefixes without such a step: the profile's guess, named unconfirmed",
        "K/V agree, the attention output differs",
        "mask-oracle: cached chunks return exactly the wrong-origin answer",
    ),
    "mask-window": Decided(
        "an onset at a length with every step seeing the token before it (wrong or right with the prefix fed one "
        "token per step: a distance, or a multi-token step's own window, named unconfirmed)",
        "K/V agree, the attention output differs from a length on",
        "-",
    ),
    "kv-head-mapping": Decided(
        "a one-token step wrong on one token repeated, where the full pass is position-free (no mask or position "
        "can matter there): over a cache only, or from the first token on with one answer at every length",
        "a permutation of the cached KV heads, or each query head returning another KV head's output",
        "mask-oracle: the read map of the grouped-query case",
    ),
    "positional-index": Decided(
        "deviation growing with length",
        "only the appended token's K (RoPE) or K and V differ",
        "-",
    ),
    "per-layer-ordering": Decided(
        "cannot: looks like positional-index", "layer 0 agrees, a later layer's K drifts", "-"
    ),
    "kv-truncation": Decided("passes only at multiples of a block", "fewer keys read than the prefix holds", "-"),
    "read-past-valid-length": Decided(
        "NaN only through the cache, the candidate's own full pass finite", "more keys read than the prefix holds", "-"
    ),
    "stale-state": Decided(
        "cannot: a candidate with the KV-head map on one token", "prefix K/V differ from row 0", "-"
    ),
    "foreign-state": Decided(
        "a request wrong beside a second live session and right alone", "prefix K/V are another request's", "-"
    ),
    "approximation": Decided(
        "cannot: looks like numeric-precision", "every cached K/V row off by a small relative error", "-"
    ),
    "numeric-precision": Decided(
        "small differences at (nearly) every length, no argmax flip", "K/V agree at every traced length", "-"
    ),
}
"""Per bug class of the cache-parity diagnosis, which evidence names it with what the subject
offers: the model-level experiments sessions allow, LayerTracing, AttentionProbe. docs/plugins.md
carries it as a table (`gate checks --diagnoses`, diagnosis_table)."""


def diagnosis_table() -> str:
    """DIAGNOSIS_TABLE as the markdown table docs/plugins.md carries."""
    lines = [
        "| bug class | with sessions alone | `LayerTracing` adds | `AttentionProbe` adds |",
        "|---|---|---|---|",
    ]
    for name, row in DIAGNOSIS_TABLE.items():
        lines.append(f"| `{name}` | {row.sessions} | {row.trace} | {row.probe} |")
    return "\n".join(lines) + "\n"


def explanation(diagnosis: dict[str, Any]) -> str:
    """The class's explanation in words, with the candidates of an undecided one and the capability
    that would decide (what the dossier's headline shows)."""
    text = BUG_CLASSES[diagnosis["bug_class"]]
    if diagnosis.get("candidates"):
        text += f"; candidates: {', '.join(diagnosis['candidates'])}"
    if diagnosis.get("decide"):
        text += f"; {diagnosis['decide']}"
    return text


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
    counterpart = offered(reference, LiveCounterpart)
    if counterpart is None:
        return reference, None
    try:
        live = counterpart.live_reference()
    except AdapterUnavailable as err:
        return None, (
            f"not seen: the per-layer trace (the reference is a {counterpart.mode}, which stores no layer "
            f"states, and {err}); the class rests on the failure profile alone"
        )
    return live, (
        f"traced against {live.name}, the {counterpart.mode}'s model built live (a store holds no layer "
        "states; the verdict compared the stored answers)"
    )


def _accepts(method: Any, name: str) -> bool:
    try:
        return name in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


def read_map(state: dict[str, Any], rel: float) -> list[int | None] | None:
    """Which KV head each query head read at the traced step's last query, judged from what the
    path's attention was given and returned: per query head, the KV heads whose expected output
    (a float64 softmax over every key read, the last query seeing all of them) its output equals.
    None when the layer records no per-head query and output; an entry is None when no KV head (or
    more than one) explains that head."""
    import torch

    if "q" not in state or "attn" not in state:
        return None
    q, k, v, out = (state[key].double().cpu() for key in ("q", "k", "v", "attn"))
    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads < 2 or heads % kv_heads or out.shape != q.shape or not bool(k.isfinite().all()):
        return None
    mapping: list[int | None] = []
    for h in range(heads):
        found = []
        for g in range(kv_heads):
            scores = q[:, h] @ k[:, g].transpose(-1, -2) / math.sqrt(q.shape[-1])  # [B, 1, T]
            expected = torch.softmax(scores, dim=-1) @ v[:, g]  # [B, 1, D]
            if not _differs(out[:, h], expected, rel):
                found.append(g)
        mapping.append(found[0] if len(found) == 1 else None)
    return mapping


def layer_divergence(
    reference: DecodePath,
    candidate: DecodePath,
    tokens: torch.Tensor,
    prefix_len: int,
    dtype: str,
    *,
    cuts: Sequence[int] = (),
    width: int = 1,
) -> dict[str, Any] | None:
    """Compare the candidate's cached step at `prefix_len` (`width` tokens appended, after the
    prefix went in as `cuts` say, where the path can replay a schedule) with the reference's full
    pass, layer by layer. None when either path offers no LayerTracing."""
    ref_trace, cand_trace = offered(reference, LayerTracing), offered(candidate, LayerTracing)
    if ref_trace is None or cand_trace is None:
        return None
    rel = STATE_TOLERANCE.get(dtype, 1e-3)
    ref_states = ref_trace.full_layer_states(tokens, prefix_len + width - 1)
    extra: dict[str, Any] = {}
    if cuts and _accepts(cand_trace.layer_states, "cuts"):
        extra["cuts"] = list(cuts)
    if width != 1:
        if not _accepts(cand_trace.layer_states, "width"):
            return None
        extra["width"] = width
    cand_states = cand_trace.layer_states(tokens, prefix_len, **extra)
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
            if "attn" in cand and "attn" in ref and cand["attn"].shape == ref["attn"].shape:
                # the attention output itself, without the residual stream that dilutes the block's
                info["attention_relative_error"] = round(_relative_error(cand["attn"].cpu(), ref["attn"].cpu()), 6)
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
                mapping = read_map(cand, rel)
                if mapping is not None:
                    group = len(mapping) // cand_k.shape[1]
                    info["read_map"] = mapping
                    right = [h // group for h in range(len(mapping))]
                    info["heads_remapped"] = None not in mapping and mapping != right
            else:
                info["component"] = None
        per_layer.append(info)
        if first is None and info["component"] is not None:
            first = info
    return {
        "prefix_len": prefix_len,
        "width": width,
        "first_diverging_layer": None if first is None else first["layer"],
        "component": None if first is None else first["component"],
        "layers": per_layer,
        "first": first,
    }


REPLAYED_CHUNKS = 8
"""Most multi-token steps of a check's schedule the tracer replays one by one, in order."""


def progressive_cuts(lengths: Sequence[int], at: int) -> list[int]:
    """The call edges of gate.checks._sweep.cached_sweep's one growing session up to its step at
    prefix `at`: a prefill to the first positive length, then per length a chunk up to it and
    the token at it."""
    grow = [n for n in lengths if n > 0]
    if not grow or at not in grow:
        return []
    edges, done = [grow[0]], grow[0]
    for n in grow:
        if n > done:
            edges.append(n)
        if n == at:
            break
        edges.append(n + 1)
        done = n + 1
    return edges


def chunk_steps(candidate: DecodePath, prefix_len: int, cuts: Sequence[int]) -> list[tuple[int, int]]:
    """The steps of several tokens over a non-empty cache that reached `prefix_len`: between the
    check's cuts and the candidate's own chunk edges (LayoutEdges)."""
    edges = {c for c in cuts if 0 < c <= prefix_len}
    if (layout := offered(candidate, LayoutEdges)) is not None:
        edges |= {e for e in layout.layout_edges().get("chunk", ()) if 0 < e < prefix_len}
    ordered = sorted(edges | {prefix_len})
    return [(a, b) for a, b in itertools.pairwise([0, *ordered]) if a > 0 and b - a > 1]


def traced_divergence(
    reference: DecodePath, candidate: DecodePath, tokens: torch.Tensor, at: int, dtype: str, cuts: Sequence[int] = ()
) -> dict[str, Any] | None:
    """The layer divergence of the step at `at` (the prefix as one prefill), then, where that
    step shows nothing or only prefix K/V gone wrong in a later layer (state an earlier step wrote),
    the multi-token steps over a cache that reached it replayed one by one (chunk replay): the first
    that diverges at a lower layer stands instead, marked `replayed_chunk`."""
    layers = layer_divergence(reference, candidate, tokens, at, dtype)
    if layers is None:
        return None
    first = layers["first"]
    if first is not None and (first["layer"] == 0 or first["component"] != "past-kv"):
        return layers
    for start, end in chunk_steps(candidate, at, cuts)[:REPLAYED_CHUNKS]:
        before = [c for c in cuts if c < start]
        step = layer_divergence(reference, candidate, tokens, start, dtype, cuts=before, width=end - start)
        if step is None or step["width"] != end - start:
            break
        if step["first"] is not None:
            if first is None or step["first"]["layer"] < first["layer"]:
                step["replayed_chunk"] = {"start": start, "tokens": end - start, "traced_at": at}
                return step
            break
    return layers


def _small_clean(layers: dict[str, Any] | None) -> bool:
    """The traced step first diverges in the attention output (its K/V agree there, no KV head read
    in another's place), and at every layer the keys read are the right number and every K/V,
    attention-output and hidden-state difference is small relative to the reference's scale."""
    first = layers.get("first") if layers else None
    if first is None or first["component"] != "attention-output" or first.get("heads_remapped"):
        return False
    assert layers is not None
    for info in layers["layers"]:
        if info.get("component") == "kv-read-length":
            return False
        errors = (info.get(key, 0.0) for key in ("past_kv_relative_error", "attention_relative_error"))
        if max(errors) > SMALL_RELATIVE_ERROR or info.get("hidden_relative_error", 0.0) > SMALL_RELATIVE_ERROR:
            return False
    return True


# -- model level: what sessions alone can show, for a path with no layer trace and no probe -----

EMPTY_CACHE_CANDIDATES = ("kv-head-mapping", "stale-state", "positional-index")
"""What can move the logits of one token on an empty cache (one key, no offset, no prefix state)
while the full pass over the same token is right: which KV head a query head reads, the weights
or projections the cached path computes with, or a position encoding that is absolute. Never a
mask offset (there is none) or a window."""

CHUNK_CANDIDATES = ("mask-offset", "positional-index")
"""What makes a multi-token step over a cache wrong where one-token steps and a one-shot prefill
are right: the chunk's mask origin or the chunk's positions."""

VISIBILITY_OFFSET = 8
"""The cache length of the visibility experiment: long enough that a mask from the chunk's origin
hides the last cached token from the chunk's first query."""


def _rows(path: DecodePath, calls: Sequence[torch.Tensor]) -> torch.Tensor:
    """One fresh session of `path` fed `calls` (a prefill, then appends): the last call's logits."""
    session = path.new_session(calls[0].shape[0])
    out = session.prefill(calls[0])
    for tokens in calls[1:]:
        out = session.append(tokens)
    return out.float().cpu()


def visibility(
    reference: DecodePath, candidate: DecodePath, vocab: int, tol: Tolerance, seed: int, width: int
) -> dict[str, Any]:
    """Model-level mask experiment: a prefill of VISIBILITY_OFFSET tokens, then a step of `width`
    tokens; the token just before the step is changed. Every query of the step sees that token
    under a causal mask, so the reference's first row moves; a candidate whose first row does not
    move at all (within its tolerance, and by a tenth of the reference's move where the reference
    moves by only a few bands) did not see it: its mask ignores the cache offset."""
    import torch

    from gate.checks._compare import random_tokens

    offset = VISIBILITY_OFFSET
    a = random_tokens(vocab, 1, offset + width, seed * 7919 + width)
    b = a.clone()
    b[0, offset - 1] = (a[0, offset - 1] + 1) % vocab
    with torch.no_grad():
        ref = [reference.full_logits(t)[:, offset].float().cpu() for t in (a, b)]
        cand = [_rows(candidate, [t[:, :offset], t[:, offset:]])[:, 0] for t in (a, b)]
    band = float(tol.row(ref[0]).max())
    ref_move = float((ref[0] - ref[1]).abs().max())
    cand_move = float((cand[0] - cand[1]).abs().nan_to_num(float("inf")).max())
    return {
        "cached": offset,
        "step_tokens": width,
        "reference_moves": ref_move,
        "candidate_moves": cand_move,
        # in float32 the reference moves by many bands; in bfloat16 the band is wide, and a candidate
        # blind to the token moves by nothing at all next to the reference's several bands
        "blind": cand_move <= band and (ref_move > 10 * band or (ref_move > 2 * band and cand_move <= 0.1 * ref_move)),
    }


def _one_shot_deviates(
    reference: DecodePath, candidate: DecodePath, tokens: torch.Tensor, at: int, tol: Tolerance
) -> bool:
    """The token at `at` appended after a one-shot prefill of the prefix, against the full pass."""
    from gate.checks._compare import compare_rows

    full = reference.full_logits(tokens[:, : at + 1])[:, at].float().cpu()
    got = _rows(candidate, [tokens[:, :at], tokens[:, at : at + 1]])[:, -1]
    cmp = compare_rows(full[None], got[None], tol)
    return bool((cmp.failed | cmp.over_tolerance).any())


def nan_only_on_cached_reads(candidate: DecodePath, tokens: torch.Tensor) -> bool:
    """The candidate's cached session returns NaN for `tokens` on an empty cache while its own full
    pass over the same tokens is finite: same weights, same arithmetic, only the cache read differs,
    so the read touched slots past the valid length (an overflow would show in both)."""
    import torch

    with torch.no_grad():
        cached = _rows(candidate, [tokens])
        full = candidate.full_logits(tokens).float().cpu()
    return bool(cached.isnan().any()) and bool(full.isfinite().all())


SHARED_PREFIX = 7
"""Tokens of request A before its continuation, and of request B prefilled in between (`shared_sessions`)."""


def shared_sessions(reference: DecodePath, candidate: DecodePath, tol: Tolerance, seed: int) -> dict[str, Any] | None:
    """Whether two live sessions of the candidate share one cache: request A is prefilled, a second
    session prefills request B, and A's next token is compared with A's full pass; so is A's next
    token when no other session is opened. Wrong beside B and right alone is A reading B's state
    (foreign-state: a cache object kept on the model and handed to every request); anything else
    says nothing here (None)."""
    import torch

    from gate.checks._compare import compare_rows

    vocab = min(reference.vocab_size, candidate.vocab_size)
    a, b = _seeded(vocab, SHARED_PREFIX + 1, seed), _seeded(vocab, SHARED_PREFIX, seed + 1)
    with torch.no_grad():
        full = reference.full_logits(a)[:, -1].float().cpu()
        alone = _rows(candidate, [a[:, :-1], a[:, -1:]])[:, -1]
        first = candidate.new_session(1)
        first.prefill(a[:, :-1])
        candidate.new_session(1).prefill(b)
        beside = first.append(a[:, -1:]).float().cpu()[:, -1]
    off = {}
    for name, rows in (("alone", alone), ("beside", beside)):
        cmp = compare_rows(full[None], rows[None], tol)
        off[name] = (bool((cmp.failed | cmp.over_tolerance).any()), float(cmp.max_abs_delta.max()))
    if off["alone"][0] or not off["beside"][0]:
        return None
    return {
        "bug_class": "foreign-state",
        "evidence": f"request A's next token after a second session prefilled {SHARED_PREFIX} other tokens "
        f"differs from A's full pass (max |Δ| {off['beside'][1]:.3g}), and A continued with no other session "
        f"agrees (max |Δ| {off['alone'][1]:.3g}): the two sessions share one cache, so A read B's state",
        "sessions": {"alone_max_delta": off["alone"][1], "beside_max_delta": off["beside"][1]},
    }


STEPWISE_LONGEST = 512
"""Longest prefix the stepwise experiment feeds one token per step (a step per token)."""

UNIFORM_LENGTHS = (1, 9, 17)
"""Prompt lengths of the uniform-prompt experiment: the first token on an empty cache, then one
token over 8 and over 16 cached copies of it."""


def _off(reference_row: torch.Tensor, candidate_row: torch.Tensor, tol: Tolerance) -> bool:
    """One row of logits [B, V] outside its tolerance (NaN counts) or with another argmax."""
    from gate.checks._compare import compare_rows

    cmp = compare_rows(reference_row[None], candidate_row[None], tol)
    return bool((cmp.failed | cmp.over_tolerance).any())


def stepwise_deviates(
    reference: DecodePath, candidate: DecodePath, tokens: torch.Tensor, at: int, tol: Tolerance
) -> bool | None:
    """The token at `at` after the prefix was fed one token per step (no step of several tokens
    anywhere), against the full pass; None past STEPWISE_LONGEST. A mask that depends on distance (a
    window) is wrong here too; one that depends on how the prefix was cut into chunks is not."""
    import torch

    if at > STEPWISE_LONGEST or at < 1:
        return None
    with torch.no_grad():
        full = reference.full_logits(tokens[:, : at + 1])[:, at].float().cpu()
        got = _rows(candidate, [tokens[:, i : i + 1] for i in range(at + 1)])[:, -1]
    return _off(full, got, tol)


def uniform_prompt(
    reference: DecodePath, candidate: DecodePath, vocab: int, tol: Tolerance, seed: int
) -> dict[str, Any]:
    """Model-level experiment on one token repeated: where the reference's full pass gives every
    row the same logits (positions enter only through relative scores, as with RoPE), every key
    attention reads holds the same value, so no mask, window, position or truncated read can move
    the answer (any weighting of equal values is that value). The candidate's last row after a
    prefill of n - 1 copies and a step of one, for n in UNIFORM_LENGTHS: which lengths deviate, by
    how much (`large`: beyond what an approximation moves), whether the deviation holds as the
    cache grows (a query head reading another KV head's values stays as wrong; one key of garbage
    read past the end weighs less the more keys there are), and whether the candidate gives one and
    the same answer at every length (`same_answer`: a path wrong in every step the same way is a
    model of its own, position-free like the reference)."""
    import torch

    from gate.checks._compare import random_tokens

    token = int(random_tokens(vocab, 1, 1, seed * 7919 + 3)[0, 0])
    longest = UNIFORM_LENGTHS[-1]
    prompt = torch.full((1, longest), token, dtype=torch.long)
    with torch.no_grad():
        ref = reference.full_logits(prompt)[0].float().cpu()  # [longest, V]
        rows = {
            n: _rows(candidate, [prompt[:, :n]] if n == 1 else [prompt[:, : n - 1], prompt[:, n - 1 : n]])[0, -1]
            for n in UNIFORM_LENGTHS
        }
    band = float(tol.row(ref[0]).max())
    position_free = float((ref - ref[0]).abs().max()) <= band
    deviating = [n for n in UNIFORM_LENGTHS if _off(ref[n - 1][None], rows[n][None], tol)]
    spread = float(ref[0].max() - ref[0].min())
    delta = {n: float((rows[n] - ref[n - 1]).abs().nan_to_num(float("inf")).max()) for n in UNIFORM_LENGTHS}
    return {
        "token": token,
        "position_free": position_free,
        "deviating_lengths": deviating,
        "max_delta": {str(n): round(d, 6) for n, d in delta.items()},
        "large": all(delta[n] > SMALL_RELATIVE_ERROR * spread for n in deviating),
        "holds": delta[longest] >= 0.5 * delta[UNIFORM_LENGTHS[-2]],
        "same_answer": bool(deviating)
        and all(float((rows[n] - rows[deviating[0]]).abs().max()) <= band for n in deviating),
    }


def head_map(
    reference: DecodePath, candidate: DecodePath, vocab: int, tol: Tolerance, seed: int, *, cached: bool
) -> dict[str, Any] | None:
    """kv-head-mapping where the uniform-prompt experiment supports it: the reference is
    position-free on one repeated token, the candidate's one-token step is wrong there (`cached`:
    only over a non-empty cache; else from the empty one on, the same answer at every length), by
    more than an approximation would move it, and not shrinking as the cache grows. None otherwise
    (the experiment is silent)."""
    seen = uniform_prompt(reference, candidate, vocab, tol, seed)
    finite = all(math.isfinite(d) for d in seen["max_delta"].values())
    if not (seen["position_free"] and seen["large"] and seen["holds"] and finite):
        return None
    # over a cache: only the steps over one (the first token right, a decode kernel's own map); on an
    # empty cache: every step, one and the same answer at every length (a cache written by one set of
    # weights and read with another, the reference's stale-weights fault, moves with the length)
    if seen["deviating_lengths"] != (list(UNIFORM_LENGTHS[1:]) if cached else list(UNIFORM_LENGTHS)):
        return None
    if not cached and not seen["same_answer"]:
        return None
    where = "over a cache of copies" if cached else "on an empty cache"
    return {
        "bug_class": "kv-head-mapping",
        "evidence": f"one token repeated: the full pass gives every row the same logits, so every key holds the "
        "same value and no mask, window, position or truncated read can move the answer; the candidate's "
        f"one-token step {where} is wrong there (lengths {seen['deviating_lengths']}, max |Δ| by length "
        f"{seen['max_delta']}), not shrinking as the cache grows: a query head reads another KV head's values "
        "(a cached path computing with other weights would look the same: LayerTracing would show the read map)",
        "uniform_prompt": seen,
    }


def window_or_chunk(
    reference: DecodePath, candidate: DecodePath, tokens: torch.Tensor, at: int, tol: Tolerance, seed: int
) -> dict[str, Any]:
    """An onset at length `at` (what a window predicts) put to the two experiments that separate a
    window from a chunk's mask origin: a window depends on distance, so a step of several tokens
    over a cache still sees the token before it and the prefix fed one token per step is wrong at
    `at` too; a chunk whose mask starts at the chunk is blind to that token, and the onset is where
    the subject first ran a chunk over a cache (its own chunked prefill), which one-token steps avoid.
    Only blindness names the chunk's origin: a step of several tokens that sees the token before it
    and still hides keys (what transformers 5.4-5.8's paged kernel does to the ordinary forwards
    after continuous batching) stays a window, right one token per step or not."""
    vocab = min(reference.vocab_size, candidate.vocab_size)
    seen = visibility(reference, candidate, vocab, tol, seed, width=2)
    stepwise = stepwise_deviates(reference, candidate, tokens, at, tol)
    found = {"visibility": seen, "stepwise_deviates": stepwise}
    if seen["blind"]:
        return {
            "bug_class": "mask-offset",
            "evidence": f"the failures start at prefix {at}, as a window's would, but a step of 2 over "
            f"{VISIBILITY_OFFSET} cached tokens does not see the token before it"
            + ("" if stepwise is None else f", and the prefix fed one token per step is {_right(stepwise)} at {at}")
            + ": a chunk's causal mask starts at the chunk, not at the cache offset (the onset is where a chunk "
            "first runs over a cache: chunked prefill)",
            **found,
        }
    if stepwise is not False:
        return {
            "bug_class": "mask-window",
            "evidence": f"the failures start at prefix {at}; every step sees the token before it, and "
            + ("" if stepwise is None else f"the prefix fed one token per step is wrong at {at} too: ")
            + "the mask depends on distance, not on how the prefix was cut",
            **found,
        }
    decide = "offer LayerTracing to see which keys the failing step's attention reads"
    return {
        "bug_class": "mask-window",
        "evidence": f"the failures start at prefix {at} and vanish when the prefix is fed one token per step: "
        "what the mask hides changes with the length of a step of several tokens, and no such step is blind to "
        f"the token before it (not a chunk's mask origin); {decide}",
        "decide": decide,
        **found,
    }


def _right(deviates: bool) -> str:
    return "wrong" if deviates else "right"


def offset_or_map(
    reference: DecodePath, candidate: DecodePath, vocab: int, tol: Tolerance, seed: int, at: int
) -> dict[str, Any]:
    """Failures from the shortest prefixes on (what a mask offset predicts, the first token on an
    empty cache right) put to the experiments that separate a mask offset from a KV-head map: a
    mask offset hides the token before the step (visibility), a KV-head map does not and stays
    wrong on one token repeated, where no mask or position can matter (head_map). Where neither
    shows, the profile's class stands, named as unconfirmed, with the capability that would decide
    (a beam cache never reordered, examples/hf-beam-fault-not-reordered.yaml, is such a case)."""
    seen = {width: visibility(reference, candidate, vocab, tol, seed, width=width) for width in (1, 2)}
    blind = [width for width, v in seen.items() if v["blind"]]
    found = {"visibility": seen[blind[0] if blind else 1]}
    if blind:
        return {
            "bug_class": "mask-offset",
            "evidence": f"wrong from prefix {at} on; a step of {blind[0]} over {VISIBILITY_OFFSET} cached tokens "
            "does not see the token before it: its causal mask starts at the step, not at the cache offset",
            **found,
        }
    mapped = head_map(reference, candidate, vocab, tol, seed, cached=True)
    if mapped is not None:
        mapped["evidence"] = (
            f"wrong from prefix {at} on, yet every step sees the token before it (not a mask offset); "
            + mapped["evidence"]
        )
        return {**mapped, **found}
    decide = "offer LayerTracing to decide between mask-offset, kv-head-mapping, positional-index and foreign-state"
    return {
        "bug_class": "mask-offset",
        "evidence": f"the length profile's class (wrong from prefix {at} on, the first token on an empty cache "
        "right), which the experiments do not confirm: every step sees the token before it, and one token "
        f"repeated is right; {decide}",
        "decide": decide,
        **found,
    }


def _uncertain(candidates: Sequence[str], why: str) -> dict[str, Any]:
    """Uncertain among `candidates`, with the capability that would decide between them."""
    capability = deciding_capability(candidates)
    decide = f"offer {capability} to decide between {', '.join(candidates)}"
    return {"bug_class": "uncertain", "candidates": list(candidates), "evidence": f"{why}; {decide}", "decide": decide}


def deciding_capability(candidates: Sequence[str]) -> str:
    """The optional capability (gate.protocols) whose evidence tells `candidates` apart: the
    attention probe where they are all mask classes it judges, else the layer trace."""
    probed = {name for name, row in DIAGNOSIS_TABLE.items() if row.probe != "-"}
    return "AttentionProbe or LayerTracing" if set(candidates) <= probed else "LayerTracing"


def model_level(
    reference: DecodePath,
    candidate: DecodePath,
    tokens: torch.Tensor,
    at: int,
    tol: Tolerance,
    seed: int,
    *,
    first_length: int | None,
    non_finite: bool,
    chunks: Sequence[tuple[int, int]],
    profile: str | None = None,
) -> dict[str, Any] | None:
    """What sessions alone tell about a failure at prefix `at` (the first deviating length;
    `first_length` the first deviating one overall, 0 for an empty cache; `profile` the length
    profile's kind) on a path with no layer trace: the class where an experiment supports one, else
    uncertain with the candidates and the capability that would decide; None when these experiments
    say nothing (the length profile stands). A profile that names a mask class is put to the
    experiments that class predicts: an onset at a length (a window) against a chunk over a cache
    blind to the token before it (chunked prefill's mask origin, window_or_chunk); failures from the
    shortest prefixes (a mask offset) against a step that sees that token and is wrong where no mask
    or position can matter (a KV-head map, offset_or_map)."""
    vocab = min(reference.vocab_size, candidate.vocab_size)
    if non_finite:
        if nan_only_on_cached_reads(candidate, tokens[:, :1]):
            return {
                "bug_class": "read-past-valid-length",
                "evidence": "NaN in the cached logits of one token on an empty cache, while the candidate's own "
                "full pass over it is finite: only the cache read differs, and it reads past the valid length",
            }
        return None
    if chunks and not _one_shot_deviates(reference, candidate, tokens, at, tol):
        # the same length is right after a one-shot prefill: the failure depends on how the prefix was cut
        seen = visibility(reference, candidate, vocab, tol, seed, width=2)
        step = {"chunk": {"start": chunks[0][0], "tokens": chunks[0][1] - chunks[0][0]}, "visibility": seen}
        if seen["blind"]:
            return {
                "bug_class": "mask-offset",
                "evidence": f"prefix {at} is right after a one-shot prefill and wrong after the sweep's chunks; "
                f"a chunk of 2 over {VISIBILITY_OFFSET} cached tokens does not see the token before it (its "
                "first row moves by no more than its tolerance when that token changes): the chunk's causal mask "
                "starts at the chunk, not at the cache offset",
                **step,
            }
        return {
            **_uncertain(
                CHUNK_CANDIDATES,
                f"prefix {at} is right after a one-shot prefill and wrong after the sweep's chunks: a multi-token "
                "step over a cache is wrong, and the chunk sees the token before it",
            ),
            **step,
        }
    if first_length == 0:
        return head_map(reference, candidate, vocab, tol, seed, cached=False) or _uncertain(
            EMPTY_CACHE_CANDIDATES,
            "wrong from one token on an empty cache (one key, no cache offset, no prefix state): not a mask "
            "offset or a window; without a layer trace or a probe the KV-head map, the weights the cached "
            "path uses and an absolute position cannot be told apart",
        )
    if profile == "onset-at-length" and candidate.max_len >= VISIBILITY_OFFSET + 2:
        return window_or_chunk(reference, candidate, tokens, at, tol, seed)
    if profile == "short-prefix" and candidate.max_len >= UNIFORM_LENGTHS[-1] + 1:
        return offset_or_map(reference, candidate, vocab, tol, seed, at)
    return None


def diagnose_reproducer(
    reference: DecodePath,
    candidate: DecodePath,
    steps: Sequence[tuple[Any, ...]],
    failure: dict[str, Any],
    tol: Tolerance,
    seed: int,
) -> dict[str, Any]:
    """The bug class of schedule-fuzz's failing schedule from what its failing step is. A schedule
    with a fork or a switch before it asks whether two live sessions share one cache
    (`shared_sessions`); one of prefill, append and reset steps of one request (anything else stays
    uncertain) is replayed: where both paths offer a
    layer trace, the step replayed under it (`traced_step`: a KV-head map judged at read time, a
    chunk's mask); else, or where the replay shows nothing, model-level
    experiments: a step over a non-empty cache blind to the token before it is a mask offset; NaN
    on an empty cache only through the cache is a read past the valid length; a one-token step
    wrong on one token repeated (head_map) is a KV-head map; else one token wrong on an empty cache
    is uncertain among EMPTY_CACHE_CANDIDATES, a chunk among CHUNK_CANDIDATES."""
    out: dict[str, Any] = {"bug_class": "uncertain"}
    index = int(failure["step"]) - 1
    if 0 <= index < len(steps) and any(step[0] in ("fork", "switch") for step in steps[: index + 1]):
        try:  # two sessions were live: does one read the other's state?
            shared = shared_sessions(reference, candidate, tol, seed)
        except Exception as err:  # diagnosis must never turn a failure into an error
            return {**out, "tracing_error": f"{err.__class__.__name__}: {err}"}
        return {**shared, "step": steps[index][0]} if shared else out
    if not 0 <= index < len(steps) or any(step[0] not in ("prefill", "append", "reset") for step in steps[: index + 1]):
        return out
    cached = 0
    for step in steps[:index]:
        cached = 0 if step[0] == "reset" else cached + int(step[1])
    kind, width = steps[index][0], int(steps[index][1])
    vocab = min(reference.vocab_size, candidate.vocab_size)
    try:
        traced = traced_step(reference, candidate, steps[:index], cached, width, seed)
        if traced is not None:
            return {**traced, "step": kind}
        if cached == 0:
            tokens = _seeded(vocab, width, seed)
            if nan_only_on_cached_reads(candidate, tokens):
                return {
                    "bug_class": "read-past-valid-length",
                    "evidence": f"NaN in the cached logits of {width} token(s) on an empty cache, while the "
                    "candidate's own full pass over them is finite: only the cache read differs",
                }
            if width == 1:
                mapped = head_map(reference, candidate, vocab, tol, seed, cached=False)
                return {
                    **(mapped or _uncertain(EMPTY_CACHE_CANDIDATES, "the first token on an empty cache is wrong")),
                    "step": kind,
                }
            return out
        if candidate.max_len < VISIBILITY_OFFSET + 2:
            return out
        seen = visibility(reference, candidate, vocab, tol, seed, width=min(width, 2))
        if seen["blind"]:
            return {
                "bug_class": "mask-offset",
                "evidence": f"the failing step appends {width} token(s) over {cached} cached; a step of "
                f"{seen['step_tokens']} over {VISIBILITY_OFFSET} cached tokens does not see the token before it: "
                "its causal mask starts at the step, not at the cache offset",
                "visibility": seen,
            }
        if width > 1:
            return {
                **_uncertain(CHUNK_CANDIDATES, f"a chunk of {width} over {cached} cached tokens is wrong"),
                "visibility": seen,
            }
        mapped = head_map(reference, candidate, vocab, tol, seed, cached=True)
        if mapped is not None:
            return {**mapped, "step": kind, "visibility": seen}
    except Exception as err:  # diagnosis must never turn a failure into an error
        out["tracing_error"] = f"{err.__class__.__name__}: {err}"
    return out


def traced_step(
    reference: DecodePath, candidate: DecodePath, before: Sequence[tuple[Any, ...]], cached: int, width: int, seed: int
) -> dict[str, Any] | None:
    """The failing step of a schedule replayed under a layer trace, where both paths offer one: the
    steps since the last reset as cuts, then the step itself (`width` tokens over `cached`), on
    seeded tokens. The class `classify` names from the first diverging layer, or None when the
    paths trace nothing, the replay diverges nowhere (state from before a reset, which a fresh
    session cannot replay) or the trace names no class: the model-level experiments stand then."""
    traced, _ = traced_reference(reference)
    tracing = offered(candidate, LayerTracing)
    if traced is None or tracing is None or (width != 1 and not _accepts(tracing.layer_states, "width")):
        return None
    cuts: list[int] = []
    done = 0
    for step in before:
        done = 0 if step[0] == "reset" else done + int(step[1])
        cuts = [] if step[0] == "reset" else [*cuts, done]
    vocab = min(reference.vocab_size, candidate.vocab_size)
    tokens = _seeded(vocab, cached + width, seed)
    layers = layer_divergence(
        traced, candidate, tokens, cached, str(getattr(candidate, "dtype", "float32")), cuts=cuts, width=width
    )
    if layers is None or layers["first"] is None:
        return None
    bug_class = classify({"profile": "chunk-step"}, layers)
    if bug_class == "uncertain":
        return None
    return {
        "bug_class": bug_class,
        "evidence": f"the failing step ({width} token(s) over {cached} cached) replayed under a layer trace: "
        f"first diverging layer {layers['first_diverging_layer']} ({layers['component']})",
        "first_diverging_layer": layers["first_diverging_layer"],
        "component": layers["component"],
        "traced_prefix_len": layers["prefix_len"],
        "layers": layers["layers"],
    }


def _seeded(vocab: int, length: int, seed: int) -> torch.Tensor:
    from gate.checks._compare import random_tokens

    return random_tokens(vocab, 1, length, seed * 7919 + 17)


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
    progressive: bool = False,
    tol: Tolerance | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Profile + first diverging layer + bug class, JSON-ready. The layers are traced at the first
    deviating length that has a prefix (length 0 has no cached K/V to compare); `progressive`: the
    candidate grew one session through `lengths` (gate.checks._sweep.cached_sweep), whose chunks
    the tracer replays where the traced step alone shows nothing. A small attention-output
    difference with clean K/V there is traced at the shortest swept length too: the same at both
    is numeric-precision, whatever lengths were swept and whichever of them flipped an argmax."""
    profile = length_profile(lengths, deviates, delta, flips)
    if any(x and not math.isfinite(d) for x, d in zip(deviates, delta, strict=True)):
        profile["non_finite"] = True  # NaN or inf in the candidate's logits at a deviating length
    at = trace_at
    if at is None:
        at = next((n for n, x in zip(lengths, deviates, strict=True) if x and n > 0), None)
    layers: dict[str, Any] | None = None
    error = None
    precision_at: list[int] = []
    shortest: int | None = None
    traced, seen = traced_reference(reference)
    if at is not None and traced is not None:
        try:
            cuts = progressive_cuts(lengths, int(at)) if progressive else []
            layers = traced_divergence(traced, candidate, tokens, int(at), dtype, cuts)
            shortest = min((n for n in lengths if n > 0), default=None)
            if _small_clean(layers) and shortest is not None:
                precision_at = [int(at)]
                if shortest != at and _small_clean(layer_divergence(traced, candidate, tokens, shortest, dtype)):
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
            cuts = progressive_cuts(lengths, int(at)) if progressive else []
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
        out["first_diverging_layer"] = layers["first_diverging_layer"]
        out["component"] = layers["component"]
        out["traced_prefix_len"] = layers["prefix_len"]
        out["layers"] = layers["layers"]
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
