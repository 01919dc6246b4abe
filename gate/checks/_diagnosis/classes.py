"""The bug classes a failed cache-parity check is named by (`BUG_CLASSES`), and which evidence names
each with sessions alone, a layer trace or the attention probe (`DIAGNOSIS_TABLE`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

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
    """How a class is told apart with sessions alone, the layer trace, the probe ("-": adds nothing)."""

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
"""docs/plugins.md carries it as a table (`gate checks --diagnoses`, diagnosis_table)."""


def diagnosis_table() -> str:
    """DIAGNOSIS_TABLE as the markdown table docs/plugins.md carries."""
    head = "| bug class | with sessions alone | `LayerTracing` adds | `AttentionProbe` adds |\n|---|---|---|---|\n"
    return head + "".join(
        f"| `{n}` | {row.sessions} | {row.trace} | {row.probe} |\n" for n, row in DIAGNOSIS_TABLE.items()
    )


def explanation(diagnosis: dict[str, Any]) -> str:
    """The class's explanation, with an undecided one's candidates and what would decide (the dossier's headline)."""
    text = BUG_CLASSES[diagnosis["bug_class"]]
    if diagnosis.get("candidates"):
        text += f"; candidates: {', '.join(diagnosis['candidates'])}"
    if diagnosis.get("decide"):
        text += f"; {diagnosis['decide']}"
    return text


def uncertain(candidates: Sequence[str], why: str) -> dict[str, Any]:
    """Uncertain among `candidates`, with the capability that would decide between them."""
    probed = {name for name, row in DIAGNOSIS_TABLE.items() if row.probe != "-"}  # classes the probe judges
    capability = "AttentionProbe or LayerTracing" if set(candidates) <= probed else "LayerTracing"
    decide = f"offer {capability} to decide between {', '.join(candidates)}"
    return {"bug_class": "uncertain", "candidates": list(candidates), "evidence": f"{why}; {decide}", "decide": decide}


SMALL_RELATIVE_ERROR = 0.1
"""Largest relative K/V or hidden-state error read as an approximation or a precision change rather
than a wrong index, mask or state (those move values by their own scale)."""
