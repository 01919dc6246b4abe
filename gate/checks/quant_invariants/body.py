"""quant-invariants' body: measure the cache after every step, judge three invariants, explain."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from gate.checks._compare import random_tokens
from gate.checks._diagnosis import BUG_CLASSES
from gate.checks.quant_invariants import QuantInvariantsParams
from gate.core.check import CheckContext, Outcome, check
from gate.protocols import QuantizedKV, QuantScheme, QuantState, QuantTensorState, offered

CLASSES = ("quant-residual-overflow", "quant-error-bound", "quant-config-mismatch")
"""The invariants judged after every step, each a failure's bug class (gate.checks._diagnosis)."""
CONFIG_FIELDS = ("bits", "group_size", "key_axis", "value_axis", "max_residual")
"""What the cache states of itself that must equal the declaration."""


@dataclass(frozen=True)
class Step:
    """One call of the session and what the cache held after it."""

    index: int
    phase: str
    """prefill, chunk or decode."""
    tokens: int
    """Tokens written so far."""
    quantized: int
    residual: int
    nbytes: int
    expected_bytes: int
    error_ratio: float
    """Largest reconstruction error over its element's bound (> 1: broken)."""
    scale_ratio: float
    """Largest stored scale over its group's range / (2^bits - 1) bound (> 1: broken)."""
    drift_ratio: float
    """Largest error against the tokens as written over the same bound (reported, not judged: a
    library that re-quantises its dequantised history adds each flush's rounding)."""
    problems: dict[str, list[str]] = field(default_factory=dict)
    """Class -> what broke it at this step."""

    def record(self) -> dict[str, Any]:
        return {
            "step": self.index,
            "phase": self.phase,
            "tokens": self.tokens,
            "quantized_tokens": self.quantized,
            "full_precision_tokens": self.residual,
            "bytes": self.nbytes,
            "declared_scheme_bytes": self.expected_bytes,
            "max_error_over_bound": round(self.error_ratio, 4),
            "max_scale_over_bound": round(self.scale_ratio, 4),
            "max_error_vs_written_over_bound": round(self.drift_ratio, 4),
            **({"broken": self.problems} if self.problems else {}),
        }

    def row(self) -> list[float]:
        return [self.quantized, self.residual, self.nbytes, self.error_ratio, self.scale_ratio, len(self.problems)]


@dataclass(frozen=True)
class Observations:
    declared: QuantScheme
    stated: QuantScheme | None
    steps: list[Step]
    exercise: dict[str, Any]
    stopped: bool


def _group_size(scheme: QuantScheme, axis: str, head_dim: int) -> int:
    """Elements per group: a token's channels (clipped to the head dimension), else as declared."""
    return min(scheme.group_size, head_dim) if axis == "token" else scheme.group_size


def expected_bytes(scheme: QuantScheme, state: QuantState) -> int:
    """Bytes the declared scheme needs for the tokens the cache holds: codes, one scale and one zero
    point per group, and the full-precision residual at its own element size."""
    total = 0
    for i, t in enumerate(state.tensors):
        axis = scheme.key_axis if i % 2 == 0 else scheme.value_axis
        elements = t.dequantized.numel()
        total += elements * scheme.bits // 8
        total += elements // _group_size(scheme, axis, int(t.written.shape[-1])) * 2 * scheme.param_bytes
        total += t.residual.numel() * t.residual.element_size()
    return total


def _error_ratios(t: QuantTensorState, scheme: QuantScheme) -> tuple[float, float]:
    """(largest error / bound, largest scale / (range / levels)) of one tensor's quantised elements."""
    q = t.dequantized.shape[2]
    if q == 0:
        return 0.0, 0.0
    x = (t.written[:, :, :q] if t.quantized_from is None else t.quantized_from).float()
    got = t.dequantized.float()
    levels = (1 << scheme.bits) - 1
    eps, read_eps = scheme.param_eps, torch.finfo(t.dequantized.dtype).eps
    slack = 2 * eps * (t.zero.abs() + levels * t.scale) + read_eps * x.abs() + 1e-7
    bound = t.scale / 2 + slack
    error = ((got - x).abs() / bound).max()
    groups = t.group.flatten()
    n = int(groups.max()) + 1
    flat = x.flatten()
    high = torch.full((n,), -torch.inf, device=flat.device).scatter_reduce(0, groups, flat, "amax")
    low = torch.full((n,), torch.inf, device=flat.device).scatter_reduce(0, groups, flat, "amin")
    scale = torch.zeros(n, device=flat.device).scatter_reduce(0, groups, t.scale.flatten(), "amax", include_self=False)
    allowed = (high - low) / levels * (1 + 4 * eps) + 2.0**-14
    return float(error), float((scale / allowed).max())


def inspect(index: int, phase: str, state: QuantState, declared: QuantScheme, rtol: float) -> Step:
    """One step's judgement of the cache's state (pure)."""
    overflow: list[str] = []
    bound: list[str] = []
    config: list[str] = []
    first = state.tensors[0]
    tokens, quantized, residual = (int(x.shape[2]) for x in (first.written, first.dequantized, first.residual))
    for t in state.tensors:
        q, r, n = int(t.dequantized.shape[2]), int(t.residual.shape[2]), int(t.written.shape[2])
        if r > declared.max_residual:
            overflow.append(
                f"{t.name} holds {r} tokens in full precision, more than the declared {declared.max_residual}"
            )
        if q + r != n:
            overflow.append(f"{t.name} holds {q} quantised + {r} full-precision tokens of the {n} written")
        elif r and not torch.equal(t.residual, t.written[:, :, n - r :].to(t.residual.dtype)):
            overflow.append(f"{t.name}'s {r} full-precision tokens are not the newest {r} written")
    ratios = [_error_ratios(t, state.stated) for t in state.tensors]
    error_ratio, scale_ratio = max(e for e, _ in ratios), max(s for _, s in ratios)
    for t, (e, s) in zip(state.tensors, ratios, strict=True):
        if e > 1:
            bound.append(
                f"{t.name} reads back {e:.3g}x farther from what was written than half its stored scale allows"
            )
        if s > 1:
            bound.append(
                f"{t.name} stores a scale {s:.3g}x coarser than its group's range over {state.stated.bits}-bit levels"
            )
    stated, wanted = state.stated.model_dump(), declared.model_dump()
    for name in CONFIG_FIELDS:
        if stated[name] != wanted[name]:
            config.append(f"the cache states {name} {stated[name]}, the manifest declares {wanted[name]}")
    want_bytes = expected_bytes(declared, state)
    if abs(state.nbytes - want_bytes) > rtol * want_bytes:
        config.append(
            f"the cache holds {state.nbytes} bytes; the declared scheme needs {want_bytes} for the tokens it holds"
        )
    problems = {cls: found for cls, found in zip(CLASSES, (overflow, bound, config), strict=True) if found}
    # against the tokens as written: above 1 where a library re-quantises its dequantised history
    drift = max(_error_ratios(replace(t, quantized_from=None), state.stated)[0] for t in state.tensors)
    return Step(
        index, phase, tokens, quantized, residual, state.nbytes, want_bytes, error_ratio, scale_ratio, drift, problems
    )


def schedule(params: QuantInvariantsParams) -> list[tuple[str, int]]:
    """The calls of the session in order: the prefill, the chunks, the decode steps."""
    return [("prefill", params.prefill), *(("chunk", c) for c in params.chunks), *(("decode", 1),) * params.decode]


def measure(ctx: CheckContext, params: QuantInvariantsParams, path: QuantizedKV) -> Observations:
    """Drive one session through the schedule, reading and judging the cache after every call."""
    calls = schedule(params)
    total = sum(n for _, n in calls)
    tokens = random_tokens(ctx.candidate.vocab_size, params.batch, total, ctx.seed * 1000 + 17)
    declared = path.quant_declared()
    session = path.new_quant_session(params.batch)
    steps: list[Step] = []
    stated: QuantScheme | None = None
    at = 0
    for index, (phase, n) in enumerate(calls):
        (session.prefill if index == 0 else session.append)(tokens[:, at : at + n])
        at += n
        state = session.quant_state()
        stated = state.stated
        steps.append(inspect(index, phase, state, declared, params.memory_rtol))
        if ctx.stop_at_first_failure and steps[-1].problems:
            break
    return Observations(declared, stated, steps, dict(session.exercise()), stopped=len(steps) < len(calls))


@dataclass(frozen=True)
class Judgement:
    first_bad: Step | None
    broken: dict[str, int]
    """Class -> the first step that broke it."""


def judge(obs: Observations) -> Judgement:
    """The first failing step and, per class, where it first broke (pure)."""
    broken: dict[str, int] = {}
    for step in obs.steps:
        for name in step.problems:
            broken.setdefault(name, step.index)
    return Judgement(next((s for s in obs.steps if s.problems), None), broken)


def explain(obs: Observations, j: Judgement) -> Outcome:
    last = obs.steps[-1]
    seen: dict[str, Any] = {
        "metrics": {
            "steps": len(obs.steps),
            "tokens": last.tokens,
            "max_full_precision_tokens": max(s.residual for s in obs.steps),
            "declared_max_residual": obs.declared.max_residual,
            "max_error_over_bound": max(s.error_ratio for s in obs.steps),
            "max_scale_over_bound": max(s.scale_ratio for s in obs.steps),
            "max_error_vs_written_over_bound": max(s.drift_ratio for s in obs.steps),
            "bytes": last.nbytes,
            "declared_scheme_bytes": last.expected_bytes,
            "broken": j.broken,
        },
        "evidence": {
            "declared": obs.declared.model_dump(),
            "stated": None if obs.stated is None else obs.stated.model_dump(),
            "invariants": {name: ("broken" if name in j.broken else "held") for name in CLASSES},
            "steps": [s.record() for s in obs.steps],
        },
        "exercise": {**obs.exercise, **({"stopped_at_first_failure": {"step": last.index}} if obs.stopped else {})},
        "observation": torch.tensor([s.row() for s in obs.steps], dtype=torch.float64).flatten(),
        "observation_in_run_order": True,
    }
    if j.first_bad is not None:
        step = j.first_bad
        bug_class = next(iter(step.problems))
        what = "; ".join(f"{name}: {', '.join(found[:2])}" for name, found in step.problems.items())
        return Outcome(
            status="fail",
            message=f"after step {step.index} ({step.phase}, {step.tokens} tokens written) the quantised cache "
            f"breaks what it declares: {what}",
            diagnosis={
                "bug_class": bug_class,
                "explanation": BUG_CLASSES[bug_class],
                "step": step.index,
                "broken": dict(step.problems),
            },
            detected_at=step.index,
            **seen,
        )
    d = obs.declared
    drift = seen["metrics"]["max_error_vs_written_over_bound"]
    drifted = (
        f"; re-quantising its own dequantised history, it reads back up to {drift:.2f}x that bound away from the "
        "tokens as written (each flush adds its rounding: reported, not judged)"
        if drift > 1
        else ""
    )
    return Outcome(
        status="pass",
        message=f"over {len(obs.steps)} steps ({last.tokens} tokens: prefill, multi-token appends, decode) the cache "
        f"held at most {seen['metrics']['max_full_precision_tokens']} tokens in full precision (declared at most "
        f"{d.max_residual}), the newest; every quantised element read back within its {d.bits}-bit bound (worst "
        f"{seen['metrics']['max_error_over_bound']:.2f} of it); it states the declared scheme and holds the "
        f"{last.expected_bytes} bytes it needs{drifted}",
        **seen,
    )


@check("quant-invariants", params=QuantInvariantsParams)
def quant_invariants(ctx: CheckContext, params: QuantInvariantsParams) -> Outcome:
    """A quantised cache keeps what it declares: residual, error bound, configuration."""
    path = offered(ctx.candidate, QuantizedKV)
    if path is None:
        return Outcome(
            "unproven",
            f"{ctx.candidate.name} exposes no readable quantised state (gate.protocols.QuantizedKV): the adapter "
            "cannot read back which tokens the cache holds quantised, their scales and zero points, or its "
            "configuration, so none of the invariants can be judged",
        )
    obs = measure(ctx, params, path)
    return explain(obs, judge(obs))
