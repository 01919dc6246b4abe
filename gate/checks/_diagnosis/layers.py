"""The first diverging layer (LayerTracing): per layer, compare what attention read (K and V over
the prefix and the appended token) and the block's hidden state between the candidate's cached step
and the reference's full pass (gate.checks._diagnosis.classifier reads the class from it).
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gate.checks._diagnosis.classes import SMALL_RELATIVE_ERROR
from gate.errors import AdapterUnavailable
from gate.protocols import LayerTracing, LayoutEdges, LiveCounterpart, offered

if TYPE_CHECKING:
    import torch

    from gate.protocols import DecodePath

STATE_TOLERANCE = {"float32": 1e-4, "bfloat16": 4e-2, "float16": 1e-2}
"""Relative tolerance for K, V and hidden-state comparisons (of the reference's max |value|)."""


def _bad(a: torch.Tensor, b: torch.Tensor, rel: float) -> torch.Tensor:
    """Where `a` differs from `b` by more than `rel` of b's max |value| (NaN counts)."""
    return ((a - b).abs() > rel * max(float(b.abs().max()), 1e-6)) | a.isnan()


def _differs(a: torch.Tensor, b: torch.Tensor, rel: float) -> bool:
    return bool(b.numel()) and bool(_bad(a, b, rel).any())


def _rows_differing(a: torch.Tensor, b: torch.Tensor, rel: float) -> list[int]:
    """Positions t of [B, H_kv, T, D] where any batch row, head or dim differs."""
    return [int(t) for t in _bad(a, b, rel).any(dim=(0, 1, 3)).nonzero().flatten()] if b.numel() else []


def _foreign_rows(cand_k: torch.Tensor, ref_k: torch.Tensor, rel: float) -> bool:
    """Whether each candidate row's prefix K matches a *different* reference row's."""
    rows = cand_k.shape[0]
    return rows >= 2 and all(
        any(not _differs(cand_k[b], ref_k[o], rel) for o in range(rows) if o != b) for b in range(rows)
    )


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over the reference's max |b| (0 for empty tensors)."""
    return float((a - b).abs().nan_to_num(float("inf")).max()) / max(float(b.abs().max()), 1e-6) if b.numel() else 0.0


def _heads_permuted(cand_k: torch.Tensor, ref_k: torch.Tensor, rel: float) -> bool:
    """Whether the candidate's KV heads [B, H_kv, T, D] are the reference's under a non-identity mapping."""
    heads = ref_k.shape[1]
    if heads < 2 or cand_k.shape != ref_k.shape:
        return False
    mapping = [
        next((o for o in range(heads) if not _differs(cand_k[:, h], ref_k[:, o], rel)), None) for h in range(heads)
    ]
    return None not in mapping and mapping != list(range(heads))


def _max_delta(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """max |a - b| (NaN counts as infinite), or None when the shapes differ."""
    if a.shape != b.shape or a.numel() == 0:
        return None
    return float((a.float() - b.float()).abs().nan_to_num(float("inf")).max())


def traced_reference(reference: DecodePath) -> tuple[DecodePath | None, str | None]:
    """The path whose full pass a layer trace reads, and what the diagnosis says about it: a stored
    reference holds no layer states, so its live counterpart is traced instead, where there is one."""
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


def accepts(method: Any, name: str) -> bool:
    try:
        return name in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


def read_map(state: dict[str, Any], rel: float) -> list[int | None] | None:
    """Which KV head each query head read at the traced step's last query: the one whose expected output
    (a float64 softmax over every key read) its output equals (None: no KV head, or several, explain
    it). None when the layer records no per-head query and output."""
    import torch

    if "q" not in state or "attn" not in state:
        return None
    q, k, v, out = (state[key].double().cpu() for key in ("q", "k", "v", "attn"))
    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads < 2 or heads % kv_heads or out.shape != q.shape or not bool(k.isfinite().all()):
        return None

    def expected(h: int, g: int) -> Any:  # [B, 1, D]: query head h over KV head g
        return torch.softmax(q[:, h] @ k[:, g].transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v[:, g]

    found = [[g for g in range(kv_heads) if not _differs(out[:, h], expected(h, g), rel)] for h in range(heads)]
    return [f[0] if len(f) == 1 else None for f in found]


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
    """Compare the candidate's cached step at `prefix_len` (`width` tokens appended, the prefix fed as
    `cuts` say) with the reference's full pass, layer by layer; None without LayerTracing on both."""
    ref_trace, cand_trace = offered(reference, LayerTracing), offered(candidate, LayerTracing)
    if ref_trace is None or cand_trace is None:
        return None
    rel = STATE_TOLERANCE.get(dtype, 1e-3)
    ref_states = ref_trace.full_layer_states(tokens, prefix_len + width - 1)
    extra: dict[str, Any] = {}
    if cuts and accepts(cand_trace.layer_states, "cuts"):
        extra["cuts"] = list(cuts)
    if width != 1:
        if not accepts(cand_trace.layer_states, "width"):
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
            pck, prk, pcv, prv = (x[:, :, :prefix_len] for x in (cand_k, ref_k, cand_v, ref_v))
            nck, nrk, ncv, nrv = (x[:, :, prefix_len:] for x in (cand_k, ref_k, cand_v, ref_v))
            cand_h, ref_h = cand["hidden"].cpu(), ref["hidden"].cpu()
            past_k, past_v = _rows_differing(pck, prk, rel), _rows_differing(pcv, prv, rel)
            new_k, new_v, hidden = _differs(nck, nrk, rel), _differs(ncv, nrv, rel), _differs(cand_h, ref_h, rel)
            info.update(past_k_rows=len(past_k), past_v_rows=len(past_v), new_k=new_k, new_v=new_v, hidden=hidden)
            info["past_kv_relative_error"] = round(max(_relative_error(pck, prk), _relative_error(pcv, prv)), 6)
            info["hidden_relative_error"] = round(_relative_error(cand_h, ref_h), 6)
            if "attn" in cand and "attn" in ref and cand["attn"].shape == ref["attn"].shape:
                # the attention output itself, without the residual stream that dilutes the block's
                info["attention_relative_error"] = round(_relative_error(cand["attn"].cpu(), ref["attn"].cpu()), 6)
            # magnitudes for the dossier's per-layer plot: the appended step's K, V and hidden state
            info.update(
                k_delta=_max_delta(nck, nrk), v_delta=_max_delta(ncv, nrv), hidden_delta=_max_delta(cand_h, ref_h)
            )
            if past_k or past_v:
                info["component"] = "past-kv"
                info["first_past_row"] = min(past_k + past_v)
                info["past_rows_differing"] = len(set(past_k + past_v))
                info["v_agrees"] = not past_v
                info["foreign"] = _foreign_rows(pck, prk, rel)
                info["heads_permuted"] = _heads_permuted(pck, prk, rel)
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
    """The call edges of gate.checks._sweep.cached_sweep's one growing session up to its step at `at`."""
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
    """The steps of several tokens over a non-empty cache that reached `prefix_len`."""
    edges = {c for c in cuts if 0 < c <= prefix_len}
    if (layout := offered(candidate, LayoutEdges)) is not None:
        edges |= {e for e in layout.layout_edges().get("chunk", ()) if 0 < e < prefix_len}
    return [(a, b) for a, b in itertools.pairwise([0, *sorted(edges | {prefix_len})]) if a > 0 and b - a > 1]


def traced_divergence(
    reference: DecodePath, candidate: DecodePath, tokens: torch.Tensor, at: int, dtype: str, cuts: Sequence[int] = ()
) -> dict[str, Any] | None:
    """The layer divergence of the step at `at`, then, where it shows nothing or only prefix K/V gone wrong
    in a later layer (state an earlier step wrote), the multi-token steps that reached it replayed one by
    one: the first that diverges at a lower layer stands instead, marked `replayed_chunk`."""
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


def layer_fields(layers: dict[str, Any]) -> dict[str, Any]:
    return {
        "first_diverging_layer": layers["first_diverging_layer"],
        "component": layers["component"],
        "traced_prefix_len": layers["prefix_len"],
        "layers": layers["layers"],
    }


def small_clean(layers: dict[str, Any] | None) -> bool:
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
