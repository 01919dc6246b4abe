"""Length coverage of the sweep checks: the lengths a policy wants against the ones the paths reach.

Torch-free, so `gate plan` can state it before a run from the adapters' capability lists, and the
checks compute the same thing at run time from the built paths.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gate.checks.prefix_sweep import PrefixSweepParams
from gate.core.plan import LengthCoverage
from gate.protocols import CacheGeometry


def prefix_sweep_coverage(wanted: list[int], scoped: int | None, reachable: int | None) -> LengthCoverage:
    """prefix-sweep: a wanted length (within an explicit `longest`) the paths cannot reach leaves it unproven."""
    in_scope = sorted(x for x in wanted if scoped is None or x <= scoped)
    return LengthCoverage(
        wanted=in_scope,
        scoped_to=scoped,
        reachable_longest=reachable,
        unreachable=[] if reachable is None else [x for x in in_scope if x > reachable],
        effect="unproven: a wanted length the paths cannot reach is never silently clipped",
    )


def _prefix_sweep(params: Mapping[str, Any], max_len: int | None, geometry: CacheGeometry | None) -> LengthCoverage:
    p = PrefixSweepParams.model_validate(dict(params))
    return prefix_sweep_coverage(list(p.lengths), p.longest, None if max_len is None else max_len - 1)


def _engine_prefix_parity(
    params: Mapping[str, Any], max_len: int | None, geometry: CacheGeometry | None
) -> LengthCoverage:
    """The lengths planned on the candidate's cache geometry as its launch flags state it (else as given)."""
    from gate.checks._engine import not_reusable
    from gate.checks.engine_prefix_parity import SUFFIX, EnginePrefixParams, planned_lengths  # torch-free

    p = EnginePrefixParams.model_validate(dict(params))
    limit = None if max_len is None else max_len - SUFFIX - p.new_tokens - 1
    block = geometry.block_size if geometry is not None and p.geometry else None
    if block is None or block <= 1:  # the lengths as given: one beyond the context is clipped there
        wanted = sorted(set(p.lengths))
        unreachable = [] if limit is None else [x for x in wanted if x > limit]
    else:  # planned within reach (up to the longest given length where the context is not stated yet)
        wanted = planned_lengths(p, limit if limit is not None else max(p.lengths), block)
        unreachable = []
    planned_on = None
    if p.geometry and geometry is not None:
        planned_on = geometry.words()
        if geometry.block_size is None:
            planned_on += ": the lengths are planned again on the block the server states when it runs"
    return LengthCoverage(
        wanted=wanted,
        reachable_longest=limit,
        unreachable=unreachable,
        effect="clipped: a longer prefix is replaced by the longest the servers' context holds",
        planned_on=planned_on,
        not_reusable=not_reusable(block, wanted),
    )


def _engine_concurrent_conversations(
    params: Mapping[str, Any], max_len: int | None, geometry: CacheGeometry | None
) -> LengthCoverage:
    """The lengths the aimed workload sends at each reuse mechanism (gate.checks._mechanisms)."""
    from gate.checks._mechanisms import plan_mechanisms
    from gate.checks.engine_concurrent_conversations import EngineConversationsParams

    p = EngineConversationsParams.model_validate(dict(params))
    room = None if max_len is None else max_len - 1 - p.new_tokens
    if not p.aim or geometry is None:
        why = "aim: false" if not p.aim else "the candidate's launch states no cache geometry"
        return LengthCoverage(wanted=[], reachable_longest=room, effect="-", planned_on=f"no aimed workload ({why})")
    width = p.max_concurrent or min(8, (geometry.slots or 3) + 1)
    plan = plan_mechanisms(geometry, room if room is not None else 8192, width, p.turn_tokens)
    wanted = sorted({x for name, lengths in plan.aimed.items() if name != "edited-turn" for x in lengths})
    return LengthCoverage(
        wanted=wanted,
        reachable_longest=room,
        effect="not aimed at: a mechanism the context cannot hold is listed, never aimed at in silence",
        planned_on=f"the candidate's reuse mechanisms ({geometry.mechanisms_from or geometry.source}): {plan.words()}",
    )


SWEEP_CHECKS: dict[str, Callable[[Mapping[str, Any], int | None, CacheGeometry | None], LengthCoverage]] = {
    "prefix-sweep": _prefix_sweep,
    "engine-prefix-parity": _engine_prefix_parity,
    "engine-concurrent-conversations": _engine_concurrent_conversations,
}
"""How each check that sweeps lengths turns its params and the paths' max_len into coverage."""


def planned_coverage(
    check: str,
    params: Mapping[str, Any],
    max_lens: Mapping[str, tuple[int | None, str]],
    geometry: CacheGeometry | None = None,
) -> LengthCoverage | None:
    """Coverage of one planned check from each role's (max_len, its source); None where it sweeps none."""
    rule = SWEEP_CHECKS.get(check)
    if rule is None:
        return None
    known = [m for m, _ in max_lens.values()]
    max_len = None if not known or None in known else min(m for m in known if m is not None)
    coverage = rule(params, max_len, geometry)
    coverage.limited_by = {role: source for role, (_, source) in max_lens.items()}
    return coverage
