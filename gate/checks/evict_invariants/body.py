"""evict-invariants' body: measure what the press kept on every step, judge it against its promise, explain."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from gate.checks._compare import random_tokens
from gate.checks.evict_invariants import EvictInvariantsParams
from gate.core.check import CheckContext, Outcome, check
from gate.errors import SubjectCrash
from gate.protocols import EvictionPolicy, EvictionReport, EvictionStep, offered

CLASSES: dict[str, str] = {
    "evict-protected": "a position the press promises to keep (a sink, the recent window, the last token) was evicted",
    "evict-ranking": "the kept entries outside the protected positions are not the top of the press's own score",
    "evict-budget": "a layer and KV head kept more or fewer entries than the budget (or the compression ratio) says",
    "evict-position": "a kept entry carries another position than the one it was written at",
    "evict-short": "a prompt no longer than the budget and the window lost tokens it had room for",
}
"""The invariants and what breaking each means (each is a failure's bug class)."""
CRASH = "crash"
"""The class of a scenario in which the subject raised (SubjectCrash): a finding about that scenario."""


@dataclass(frozen=True)
class Step:
    """One eviction the candidate recorded, with where it happened."""

    scenario: str
    phase: str
    """prefill, chunk (gate's chunked prefill) or decode."""
    short: bool
    step: EvictionStep


@dataclass(frozen=True)
class Observations:
    policy: EvictionPolicy
    steps: list[Step]
    exercise: dict[str, Any]
    stopped: bool
    crashes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Scenarios in which the subject raised, with SubjectCrash.diagnosis (the other scenarios still ran)."""


@dataclass(frozen=True)
class Finding:
    cls: str
    index: int
    """The step's index in run order."""
    where: dict[str, Any]


@dataclass
class Judgement:
    findings: list[Finding] = field(default_factory=list)
    ties: list[dict[str, Any]] = field(default_factory=list)
    """Ties across the keep boundary: notes, never failures."""
    score_mismatch: float = 0.0
    """Largest |press's score - gate's float32 recomputation| over every pool (0 where not comparable)."""
    recomputed: bool = False
    """Gate recomputed the score (else the press's own reported scores ranked the pool)."""
    judged: int = 0


def recompute(score: str, step: EvictionStep) -> torch.Tensor | None:
    """Gate's own float32 score of the pool [B, H, N], from the keys the press scored (None: not
    a score gate knows, or no keys)."""
    if score == "position":
        return torch.zeros(tuple(step.pool.shape), dtype=torch.float32)
    if score == "knorm" and step.keys is not None:
        norms: torch.Tensor = torch.linalg.vector_norm(step.keys.detach().float().cpu(), dim=-1)
        return -norms
    return None


def budget_of(policy: EvictionPolicy, pool: int) -> int:
    """Entries a layer and KV head keeps of a pool of `pool`: the fixed budget, else the ratio's."""
    if policy.budget is not None:
        return min(pool, policy.budget)
    if policy.compression_ratio is not None:
        return min(pool, max(1, int(pool * (1 - policy.compression_ratio))))
    return pool


def judge_step(policy: EvictionPolicy, s: Step, index: int, rtol: float, j: Judgement) -> None:
    """Every invariant on one eviction, per (batch row, KV head); findings and ties into `j` (pure)."""
    st = s.step
    pool, kept_from = st.pool.long().cpu(), st.kept_from.long().cpu()
    positions = st.positions.long().cpu()
    b_n, h_n, n = pool.shape
    want = budget_of(policy, n)
    window = policy.window if policy.window is not None else max(want - policy.sink, 0)
    gate_score = recompute(policy.score, st)
    press_score = None if st.scores is None else st.scores.detach().float().cpu()
    compare = gate_score is not None and press_score is not None and press_score.shape == gate_score.shape
    j.recomputed = j.recomputed or gate_score is not None
    score = gate_score if gate_score is not None else press_score
    where = {"scenario": s.scenario, "phase": s.phase, "layer": st.layer, "seen": st.seen, "pool": n}
    j.judged += 1

    def found(cls: str, **detail: Any) -> None:
        j.findings.append(Finding(cls, index, {**where, **detail}))

    for b in range(b_n):
        for h in range(h_n):
            pos, kb = pool[b, h], kept_from[b, h]
            mask = torch.zeros(n, dtype=torch.bool)
            mask[kb] = True
            count = int(mask.sum())
            if count != want or int(kb.numel()) != count:
                short = s.short and n <= want
                found("evict-short" if short else "evict-budget", row=b, head=h, kept=int(kb.numel()), budget=want)
            protected = pos < policy.sink
            if window:
                protected |= pos >= st.seen - window
            if policy.keeps_last:
                protected |= pos == st.seen - 1
            dropped = protected & ~mask
            if dropped.any():
                found("evict-protected", row=b, head=h, dropped=pos[dropped].tolist()[:8])
            carried = positions[b, h]
            if carried.shape != kb.shape or not torch.equal(carried, pos[kb]):
                moved = (carried != pos[kb]).nonzero().flatten()[:4].tolist() if carried.shape == kb.shape else []
                found(
                    "evict-position", row=b, head=h, written_at=pos[kb][moved].tolist(), carried=carried[moved].tolist()
                )
            if score is None:
                continue
            cand = ~protected
            if compare and bool(cand.any()):  # the press's score beside gate's, where it ranks (not protected)
                assert gate_score is not None and press_score is not None
                gap = float((press_score[b, h][cand] - gate_score[b, h][cand]).abs().max())
                j.score_mismatch = max(j.score_mismatch, gap)
            chosen = mask & cand
            m = int(chosen.sum())
            if m == 0 or m == int(cand.sum()):
                continue
            sc = score[b, h]
            top = sc[cand].sort(descending=True).values
            edge = float(top[m - 1])
            tol = rtol * max(float(sc[cand].abs().max()), 1e-30)
            above = cand & (sc > edge + tol)
            if bool((above & ~mask).any()) or bool((chosen & (sc < edge - tol)).any()):
                missed = pos[above & ~mask].tolist()[:4]
                found("evict-ranking", row=b, head=h, kept=m, evicted_above_edge=missed, edge=edge)
                continue
            tie = cand & ((sc - edge).abs() <= tol)
            if bool((tie & mask).any()) and bool((tie & ~mask).any()):
                j.ties.append({**where, "row": b, "head": h, "size": int(tie.sum()), "kept": int((tie & mask).sum())})


def judge(obs: Observations, params: EvictInvariantsParams) -> Judgement:
    """Every recorded eviction against the press's promise (pure)."""
    j = Judgement()
    for index, s in enumerate(obs.steps):
        judge_step(obs.policy, s, index, params.rtol, j)
    return j


def _drive(
    ctx: CheckContext, params: EvictInvariantsParams, name: str, tokens: torch.Tensor, calls: list[tuple[str, int]]
) -> tuple[list[Step], dict[str, Any]]:
    """One fresh session fed `calls` ((phase, tokens) in order); every eviction it recorded, tagged."""
    session = ctx.candidate.new_session(params.batch)
    report = offered(session, EvictionReport)
    assert report is not None  # measure asked the path's sessions first
    log = report.watch_evictions()
    steps: list[Step] = []
    at = 0
    short = name.startswith("short")
    for phase, n in calls:
        before = len(log)
        (session.prefill if at == 0 else session.append)(tokens[:, at : at + n])
        at += n
        steps += [Step(name, phase, short, st) for st in log[before:]]
    return steps, dict(session.exercise())


def _scenarios(policy: EvictionPolicy, params: EvictInvariantsParams) -> dict[str, list[tuple[str, int]]]:
    """Prompt whole, prompt in chunks, and the two short prompts, each followed by decode steps."""
    room = policy.budget if policy.budget is not None else 24
    length = params.prompt or 2 * room + 5
    decode = [("decode", 1)] * params.decode
    chunks = [("chunk", min(params.chunk, length - i)) for i in range(0, length, params.chunk)]
    out = {"prefill": [("prefill", length), *decode], "chunked": [*chunks, *decode]}
    window = policy.window or 0
    for short in sorted({1, window - 1} - {0, -1}):
        out[f"short-{short}"] = [("prefill", short), *decode[:2]]
    return out


def measure(ctx: CheckContext, params: EvictInvariantsParams) -> Observations | str:
    """Every eviction of every scenario (a control: up to its first failing one), or why none can be read."""
    probe = ctx.candidate.new_session(params.batch)
    report = offered(probe, EvictionReport)
    if report is None:
        return (
            f"{ctx.candidate.name}'s sessions do not say what their cache kept (gate.protocols.EvictionReport: "
            "the press's promise and, per write, the pool and the kept entries), so what it evicted cannot be judged"
        )
    policy = report.eviction_policy()
    plan = _scenarios(policy, params)
    longest = max(sum(n for _, n in calls) for calls in plan.values())
    tokens = random_tokens(ctx.candidate.vocab_size, params.batch, longest, ctx.seed * 7919 + 11)
    steps: list[Step] = []
    exercise: dict[str, Any] = {}
    crashes: dict[str, dict[str, Any]] = {}
    for name, calls in plan.items():
        try:
            got, exercise[name] = _drive(ctx, params, name, tokens, calls)
        except SubjectCrash as crash:  # a finding about this scenario: the other scenarios still run
            if ctx.stop_at_first_failure:
                raise  # a control stops at its first failure: the engine counts the crash (detected)
            crashes[name] = crash.diagnosis()
            ctx.log(f"  evict-invariants: the subject crashed in scenario {name} ({crash}); the others run on")
            continue
        steps += got
        # a control stops at its first failing scenario
        if ctx.stop_at_first_failure and judge(Observations(policy, got, {}, False), params).findings:
            break
    return Observations(policy, steps, exercise, len(exercise) + len(crashes) < len(plan), crashes)


def explain(params: EvictInvariantsParams, obs: Observations, j: Judgement) -> Outcome:
    p = obs.policy
    by_class = dict(Counter(f.cls for f in j.findings))
    if obs.crashes:
        by_class[CRASH] = len(obs.crashes)
    crashed = {name: {"crashed": d["exception"], "call": d["call"]} for name, d in obs.crashes.items()}
    phases = sorted({s.phase for s in obs.steps})
    promised = ("press", "score", "sink", "window", "keeps_last", "budget", "compression_ratio", "scope")
    # what was judged, in run order: per eviction the kept entries' written and carried positions
    observed = [
        t.flatten().float()
        for s in obs.steps
        for t in (s.step.pool.long().cpu().gather(2, s.step.kept_from.long().cpu()), s.step.positions.long().cpu())
    ]
    seen: dict[str, Any] = {
        "metrics": {
            "evictions_judged": j.judged,
            "broken": by_class,
            "ties_across_boundary": len(j.ties),
            "largest_tie": max((t["size"] for t in j.ties), default=0),
            "score_recomputed_float32": j.recomputed,
            "max_score_mismatch": j.score_mismatch,
        },
        "evidence": {
            "promise": {name: getattr(p, name) for name in promised},
            "invariants": {cls: ("broken" if cls in by_class else "held") for cls in CLASSES},
            "phases": phases,
            "findings": [{"class": f.cls, **f.where} for f in j.findings[:20]],
            "ties": j.ties[:20],
            **({"crashed": crashed} if crashed else {}),
        },
        "exercise": {
            "scenarios": obs.exercise,
            "evictions": len(obs.steps),
            **({"stopped_at_first_failure": True} if obs.stopped else {}),
        },
        "observation": torch.cat(observed) if observed else torch.zeros(0),
        "observation_in_run_order": True,
    }
    ties = (
        f"; {len(j.ties)} tie(s) across the keep boundary (largest {seen['metrics']['largest_tie']})" if j.ties else ""
    )
    crash_notes = [f"crashed in scenario {n}, {c['call']}: {c['crashed']}" for n, c in crashed.items()]
    if not j.findings and obs.crashes:
        name, d = next(iter(obs.crashes.items()))
        ran = [n for n in obs.exercise if n not in obs.crashes]
        held = f"; scenarios {', '.join(ran)} ran and held every invariant" if ran else ""
        also = "".join(f"; also {note}" for note in crash_notes[1:])
        return Outcome(
            status="fail",
            message=f"the subject crashed in scenario {name} in {d['call']}: {d['exception']}{also}{held}{ties}",
            diagnosis={**d, "scenario": name, "classes": [CRASH]},
            **seen,
        )
    if j.findings:
        first = j.findings[0]
        w = first.where
        detail = ", ".join(f"{k} {v}" for k, v in w.items() if k not in ("scenario", "phase", "layer", "seen", "pool"))
        counts = ", ".join(f"{cls} x{n}" for cls, n in by_class.items())
        return Outcome(
            status="fail",
            message=f"{first.cls}: {CLASSES[first.cls]} (scenario {w['scenario']}, a {w['phase']} write, "
            f"layer {w['layer']}, {w['seen']} tokens seen, pool {w['pool']}: {detail}); broken: {counts}{ties}"
            + "".join(f"; {note}" for note in crash_notes),
            diagnosis={
                "bug_class": first.cls,
                "explanation": CLASSES[first.cls],
                "where": w,
                "classes": sorted(by_class),
            },
            detected_at=first.index,
            **seen,
        )
    scored = "recomputed in float32" if j.recomputed else "as the press reported it"
    return Outcome(
        status="pass",
        message=f"{j.judged} evictions ({', '.join(phases)}; press {p.press}, sink {p.sink}, window {p.window}, "
        f"budget {p.budget if p.budget is not None else f'ratio {p.compression_ratio}'}) kept every protected "
        f"position, the top of the score ({scored}), the budget per layer and head, their positions, and all of "
        f"every short prompt{ties}",
        **seen,
    )


@check("evict-invariants", params=EvictInvariantsParams)
def evict_invariants(ctx: CheckContext, params: EvictInvariantsParams) -> Outcome:
    """What an evicting cache kept is what its press promises, on every step."""
    obs = measure(ctx, params)
    if isinstance(obs, str):
        return Outcome("unproven", obs, evidence={"why": obs})
    return explain(params, obs, judge(obs, params))
