"""The diagnosis of schedule-fuzz's failing schedule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gate.checks._diagnosis.classes import uncertain
from gate.checks._diagnosis.classifier import classify
from gate.checks._diagnosis.experiments import (
    VISIBILITY_OFFSET,
    head_map,
    nan_only_on_cached_reads,
    seeded_tokens,
    shared_sessions,
    visibility,
)
from gate.checks._diagnosis.layers import accepts, layer_divergence, layer_fields, traced_reference
from gate.checks._diagnosis.model_level import CHUNK_CANDIDATES, EMPTY_CACHE_CANDIDATES
from gate.protocols import LayerTracing, offered

if TYPE_CHECKING:
    from gate.checks._compare import Tolerance
    from gate.protocols import DecodePath


def diagnose_reproducer(
    reference: DecodePath,
    candidate: DecodePath,
    steps: Sequence[tuple[Any, ...]],
    failure: dict[str, Any],
    tol: Tolerance,
    seed: int,
) -> dict[str, Any]:
    """The bug class of schedule-fuzz's failing schedule from what its failing step is: after a fork or
    a switch, whether two live sessions share one cache; a step of prefill, append and reset steps of
    one request (anything else stays uncertain) replayed under a layer trace where both paths offer
    one, else (or where the replay shows nothing) put to the model-level experiments."""
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
            tokens = seeded_tokens(vocab, width, seed)
            if nan_only_on_cached_reads(candidate, tokens):
                return {
                    "bug_class": "read-past-valid-length",
                    "evidence": f"NaN in the cached logits of {width} token(s) on an empty cache, while the "
                    "candidate's own full pass over them is finite: only the cache read differs",
                }
            if width == 1:
                mapped = head_map(reference, candidate, vocab, tol, seed, cached=False)
                return {
                    **(mapped or uncertain(EMPTY_CACHE_CANDIDATES, "the first token on an empty cache is wrong")),
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
                **uncertain(CHUNK_CANDIDATES, f"a chunk of {width} over {cached} cached tokens is wrong"),
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
    """The failing step of a schedule (`width` tokens over `cached`, the steps since the last reset as
    cuts) replayed on seeded tokens under a layer trace: the class the first diverging layer names, or
    None where the paths trace nothing, the replay diverges nowhere (state from before a reset) or
    the trace names no class."""
    traced, _ = traced_reference(reference)
    tracing = offered(candidate, LayerTracing)
    if traced is None or tracing is None or (width != 1 and not accepts(tracing.layer_states, "width")):
        return None
    cuts: list[int] = []
    done = 0
    for step in before:
        done = 0 if step[0] == "reset" else done + int(step[1])
        cuts = [] if step[0] == "reset" else [*cuts, done]
    vocab = min(reference.vocab_size, candidate.vocab_size)
    tokens = seeded_tokens(vocab, cached + width, seed)
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
        **layer_fields(layers),
    }
