"""phase-performance's body: measure both paths' interleaved replays, judge every clock's interval, explain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gate.checks._engine import NEW_TOKENS, PREFIX_BLOCKS, failure_words, reuse_block
from gate.checks._engine import judge as judge_reply
from gate.checks._noise import NoiseFloor, measure_noise
from gate.checks._serving import replay, replay_engine
from gate.checks._topk import worst as worst_of
from gate.checks.phase_performance import PhasePerformanceParams
from gate.checks.phase_performance.evidence import ClockRow, ServingEvidence
from gate.core.check import CheckContext, Outcome, check
from gate.core.clocks import METRICS, Interval, Metric, ServingTrace, compare, gaps, summary, theory_bytes, tpots, ttfts
from gate.core.manifest import Budget
from gate.core.scenario import Conversation, Scenario, conversations, load_scenario
from gate.errors import AdapterUnavailable, EngineBadReply
from gate.protocols import (
    DecodePath,
    EngineCompletion,
    EngineServer,
    EngineServing,
    KVGeometry,
    LiveCounterpart,
    offered,
)

BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2}
MAX_SAMPLES = 400
"""Latency samples per path kept in the evidence for the dossier's distribution plot."""
MAX_MEMORY_POINTS = 200
"""Live-bytes points per path kept in the evidence for the dossier's plot."""

SECTIONS = (
    ("fail", "over budget"),
    ("not-shown", "saving not shown"),
    ("regressed", "confidently worse, no budget"),
    ("gross", "a gross slowdown the noise leaves unresolved (rerun with more repeats)"),
    ("unproven", "unproven"),
    ("pass", "budgets held"),
    ("within-noise", "within noise of the budget"),
)
"""A clock's verdict (or `unproven`: a budgeted clock no interval could judge) -> the words heading
its section of the message, in order."""


@dataclass(frozen=True)
class Observations:
    """The scenario as run, both paths' traces per repeat, the candidate's exercise, (engines) `served`."""

    scenario: Scenario
    convs: list[Conversation]
    paths: dict[str, DecodePath]
    traces: dict[str, list[ServingTrace]]
    exercise: dict[str, Any]
    served: dict[str, Any]

    @property
    def slo(self) -> tuple[float, float]:
        return (self.scenario.slo.ttft_s, self.scenario.slo.tpot_s)


Status = Literal["pass", "warn", "fail"]
Finding = Literal["wrong-replies", "over-budget", "doubtful", "no-saving", "held"]


@dataclass(frozen=True)
class Judgement:
    """Per clock its evidence row, per section (SECTIONS) the clocks in it in words, how many clocks
    each family of intervals was widened for, the KV bytes against theory, and the finding."""

    finding: Finding
    rows: list[dict[str, Any]]
    sections: dict[str, list[str]]
    sums: dict[str, dict[str, Any]]
    k_budgets: int
    k_free: int
    kv: dict[str, Any] | None

    @property
    def by_name(self) -> dict[str, dict[str, Any]]:
        return {row["clock"]: row for row in self.rows}


def _verdict(
    interval: Interval, budget: Budget | None, better: str, *, min_effect: float, show: bool, gross: float = 2.0
) -> str:
    """pass, within-noise, fail, not-shown; without a budget: regressed (confidently worse), gross
    (a point estimate `gross` times worse that the noise leaves unresolved) or ok."""
    if budget is None:
        worse = interval.low > 1 + min_effect if better == "lower" else interval.high < 1 / (1 + min_effect)
        if worse:
            return "regressed"
        point = interval.point if better == "lower" else 1 / max(interval.point, 1e-12)
        return "gross" if point >= gross else "ok"
    verdicts = set()
    # a min_ratio bound is a max_ratio bound on the negated interval (negation is exact)
    for sign, m in ((1, budget.max_ratio), (-1, budget.min_ratio)):
        if m is None:
            continue
        low, high = (interval.low, interval.high) if sign > 0 else (-interval.high, -interval.low)
        if low > sign * m:
            verdicts.add("fail")
        elif high <= sign * m:
            verdicts.add("pass")
        else:
            verdicts.add("not-shown" if show and sign * m < sign else "within-noise")
    return next((worst for worst in ("fail", "not-shown", "within-noise") if worst in verdicts), "pass")


def _budget_words(budget: Budget | None) -> str:
    if budget is None:
        return "none"
    bounds = (("<=", budget.max_ratio), (">=", budget.min_ratio))
    return " and ".join(f"{op} {m}" for op, m in bounds if m is not None)


def _ci(interval: Interval) -> str:
    noise = "; no difference detectable at this noise" if interval.straddles(1.0) else ""
    return f"x{interval.point:.3g} [{interval.low:.3g}, {interval.high:.3g}]{noise}"


def shared_prefix_on(scenario: Scenario, block: int | None, max_len: int) -> Scenario:
    """The scenario for an engine that reuses whole blocks of `block` tokens only: a shared system
    prefix below PREFIX_BLOCKS blocks is raised to that many (within a quarter of the context)."""
    if block is None or scenario.system_prefix >= PREFIX_BLOCKS * block:
        return scenario
    raised = max(scenario.system_prefix, min(PREFIX_BLOCKS * block, max_len // 4))
    return scenario.model_copy(update={"system_prefix": raised})


# --- measure --------------------------------------------------------------------------------------


def live_reference(ctx: CheckContext) -> tuple[DecodePath, str] | Outcome:
    """The reference to time and how a stored one was made live, in words; else the skip Outcome."""
    stored = offered(ctx.reference, LiveCounterpart)
    if stored is None:
        return ctx.reference, ""
    mode = stored.mode
    try:
        reference = stored.live_reference()
    except AdapterUnavailable as err:
        return Outcome(
            "skip",
            f"the reference is a {mode}: it answers from a store, so it has no clock, and {err}; "
            "performance is measured with both paths live, side by side (docs/baselines.md)",
        )
    built = " (built in this job from what baseline.json names, same model identity)"
    return reference, f"; the {mode} timed live as {reference.name}{built if mode == 'recorded baseline' else ''}"


def measure(ctx: CheckContext, params: PhasePerformanceParams, reference: DecodePath) -> Observations:
    """The scenario replayed through both paths' sessions on a measured clock, or engines' streaming APIs."""
    scenario = load_scenario(params.scenario)
    overrides = params.model_dump(include={"conversations", "max_concurrent"}, exclude_none=True)
    vocab = min(reference.vocab_size, ctx.candidate.vocab_size)
    max_len = min(reference.max_len, ctx.candidate.max_len)
    engines = offered(reference, EngineServing), offered(ctx.candidate, EngineServing)
    block = reuse_block(engines[1]) if engines[1] is not None else None
    scenario = shared_prefix_on(scenario.model_copy(update=overrides), block, max_len)
    convs = conversations(scenario, seed=ctx.seed, vocab=vocab, max_len=max_len)
    paths: dict[str, DecodePath] = {"reference": reference, "candidate": ctx.candidate}
    if engines[0] is not None and engines[1] is not None:
        pair = (engines[0], engines[1])
        traces, exercise, served = _engine_traces(ctx, params, pair, scenario, vocab=vocab, max_len=max_len)
    else:
        (traces, exercise), served = _session_traces(ctx, params, paths, scenario, convs), {}
    return Observations(scenario, convs, paths, traces, exercise, served)


def _session_traces(
    ctx: CheckContext,
    params: PhasePerformanceParams,
    paths: dict[str, DecodePath],
    scenario: Scenario,
    convs: list[Conversation],
) -> tuple[dict[str, list[ServingTrace]], dict[str, Any]]:
    """In-process paths: the same conversations replayed through each path's sessions, on a measured clock."""
    for path in paths.values():  # warm-up: allocator, kernels, lazy imports
        replay(path, convs[:1], device=ctx.device, max_concurrent=1)
    traces: dict[str, list[ServingTrace]] = {"reference": [], "candidate": []}
    exercise: dict[str, Any] = {}
    for i in range(params.repeats):
        order = ("reference", "candidate") if i % 2 == 0 else ("candidate", "reference")
        for role in order:
            trace, last = replay(paths[role], convs, device=ctx.device, max_concurrent=scenario.max_concurrent)
            traces[role].append(trace)
            if role == "candidate":
                exercise = last
        ctx.log(f"phase-performance: repeat {i + 1}/{params.repeats}")
    return traces, exercise


def _engine_traces(
    ctx: CheckContext,
    params: PhasePerformanceParams,
    pair: tuple[EngineServing, EngineServing],
    scenario: Scenario,
    *,
    vocab: int,
    max_len: int,
) -> tuple[dict[str, list[ServingTrace]], dict[str, Any], dict[str, Any]]:
    """Engines behind HTTP, side by side: a server keeps its prefix cache between repeats, so each repeat
    draws its own (paired) conversations and the caches are reset where the engine can."""
    reference, candidate = pair
    top_k = min(reference.top_k, candidate.top_k)
    paths = {"reference": reference, "candidate": candidate}
    traces: dict[str, list[ServingTrace]] = {"reference": [], "candidate": []}
    cached = {"reference": 0, "candidate": 0}
    resets: dict[str, str] = {}
    streamed = 0
    replies: list[tuple[int, int, list[int], EngineCompletion]] = []
    with reference.serve(label="reference") as ref, candidate.serve(label="candidate") as cand:
        servers = {"reference": ref, "candidate": cand}
        warm = conversations(scenario, seed=ctx.seed * 7919 + 1, vocab=vocab, max_len=max_len)[:1]
        for role, server in servers.items():  # warm-up: first requests pay for lazy start-up work
            replay_engine(server, warm, name=role, max_concurrent=1, top_k=top_k)
        for i in range(params.repeats):
            convs = conversations(scenario, seed=ctx.seed * 7919 + 2 + i, vocab=vocab, max_len=max_len)
            order = ("reference", "candidate") if i % 2 == 0 else ("candidate", "reference")
            last = i == params.repeats - 1
            for role in order:
                resets[role] = _reset_cache(servers[role])
                trace, done = replay_engine(
                    servers[role],
                    convs,
                    name=str(getattr(paths[role], "name", role)),
                    max_concurrent=scenario.max_concurrent,
                    top_k=top_k,
                    replies=replies if last and role == "candidate" else None,
                )
                traces[role].append(trace)
                cached[role] += int(done["cached_prompt_tokens"])
                streamed += int(done["streamed_requests"]) if role == "candidate" else 0
            ctx.log(f"phase-performance: repeat {i + 1}/{params.repeats}")
        noise = measure_noise(
            ctx,
            cand,
            candidate.salt_field,
            vocab=vocab,
            lengths=[len(prompt) for _, _, prompt, _ in replies],
            width=scenario.max_concurrent,
            new_tokens=NEW_TOKENS,
            top_k=top_k,
            limit=max_len - NEW_TOKENS - 1,
        )
        correctness = _judge_replies(ctx, ref, replies, top_k, noise)  # the last repeat, timed and judged
        servers_evidence = {role: server.evidence() for role, server in servers.items()}
    exercise = {
        "streamed_requests": streamed,
        "cached_prompt_tokens": cached["candidate"],
        "reference_cached_prompt_tokens": cached["reference"],
        "replies_judged": correctness["compared"],
    }
    return traces, exercise, {"servers": servers_evidence, "cache_reset": resets, "correctness": correctness}


def _reset_cache(server: EngineServer) -> str:
    """Reset a server's prefix cache before a repeat, where the engine can; how, in words."""
    try:
        done = server.reset_cache() or "none: the engine has no cache reset"
        if untouched := server.unreset_tiers():
            done += "; not reached: " + "; ".join(untouched)
        return done
    except EngineBadReply as err:  # e.g. llama.cpp without --slot-save-path: fresh prompts suffice
        return f"unavailable ({err})"


def _judge_replies(
    ctx: CheckContext,
    reference: EngineServer,
    replies: list[tuple[int, int, list[int], EngineCompletion]],
    top_k: int,
    noise: NoiseFloor | None,
) -> dict[str, Any]:
    """The candidate's replies against the reference's answer to each prompt sent alone, under the claim
    and the candidate's measured noise floor (gate.checks._engine.judge)."""
    failures: list[str] = []
    worst_delta = 0.0
    for conv, turn, prompt, completion in sorted(replies, key=lambda r: (r[0], r[1])):
        judged = judge_reply(ctx, reference.complete(prompt, len(completion.tokens), top_k), completion, noise)
        worst_delta = worst_of([worst_delta, judged.comparison.max_abs_delta])
        if judged.failed:
            failures.append(
                f"conversation {conv} turn {turn} ({len(prompt)}-token prompt): "
                + failure_words(ctx.manifest.claim.level, judged)
            )
    failures = [f"not noise: {d}" for d in (noise.defects if noise is not None else [])] + failures
    return {
        "compared": len(replies),
        "failed": len(failures),
        "failures": failures[:20],
        "max_abs_dlogprob": worst_delta,
        "against": "the reference's answer to the same prompt sent alone, under the claim"
        + (f", against the {noise.words()}" if noise is not None else ""),
        "noise_floor": None if noise is None else noise.evidence(),
    }


# --- judge ----------------------------------------------------------------------------------------


def judge(ctx: CheckContext, params: PhasePerformanceParams, obs: Observations) -> Judgement:
    """Every clock's candidate/reference ratio with its interval, judged against its budget (pure)."""
    # the policy's budgets, replaced clock by clock by the manifest's `performance` section
    budgets: dict[str, Budget] = {str(k): v for k, v in (params.budgets | ctx.manifest.performance).items()}
    sums = {role: summary(runs, obs.slo) for role, runs in obs.traces.items()}
    rows: list[dict[str, Any]] = []
    sections: dict[str, list[str]] = {section: [] for section, _ in SECTIONS}
    # Several clocks are judged at once; each family's error rate is held at 1 - confidence by
    # widening every interval in it (Bonferroni): budgets form one family, unbudgeted clocks another.
    k_budgets = max(1, sum(1 for name in METRICS if name in budgets))
    watched = [name for name in METRICS if name not in budgets and name in params.watch]
    k_free = max(1, len(watched))
    for index, (name, metric) in enumerate(METRICS.items()):
        level = 1 - (1 - params.confidence) / (k_budgets if name in budgets else k_free)
        interval = compare(
            obs.traces["reference"],
            obs.traces["candidate"],
            name,
            slo=obs.slo,
            confidence=round(level, 5),
            resamples=params.resamples,
            seed=ctx.seed * 1000 + index,
        )
        judged = name in budgets or name in watched
        row, section, text = _judge_clock(params, name, metric, interval, budgets.get(name), sums, judged=judged)
        rows.append(row)
        if section is not None:
            sections[section].append(text)
    finding = _finding(params, obs, sections, saves=bool(budgets) or _saves_something(rows))
    return Judgement(finding, rows, sections, sums, k_budgets, k_free, _kv_theory(obs.paths, obs.traces))


def _judge_clock(
    params: PhasePerformanceParams,
    name: str,
    metric: Metric,
    interval: Interval | None,
    budget: Budget | None,
    sums: dict[str, dict[str, Any]],
    *,
    judged: bool,
) -> tuple[dict[str, Any], str | None, str]:
    """One clock's evidence row, the message section it goes in (None: none) and its words there."""
    row: dict[str, Any] = {
        "clock": name,
        "measures": metric.words,
        "unit": metric.unit,
        "better": metric.better,
        "reference": sums["reference"][name],
        "candidate": sums["candidate"][name],
        "budget": _budget_words(budget),
    }
    if interval is None:
        zero = sums["reference"][name] == 0
        row["verdict"] = "reference is zero" if zero else "not reported"
        if budget is None:
            return row, None, ""
        why = "the reference's value is zero" if zero else "not reported by these paths"
        return row, "unproven", f"{name} (budget {_budget_words(budget)}): {why}, unproven"
    verdict = "reported"
    if judged:
        verdict = _verdict(
            interval, budget, metric.better, min_effect=params.min_effect, show=params.show_savings, gross=params.gross
        )
    row.update(interval.as_dict(), verdict=verdict)
    text = f"{name} {_ci(interval)}" + (f" (budget {_budget_words(budget)})" if budget is not None else "")
    return row, verdict if verdict in dict(SECTIONS) else None, text


def _finding(
    params: PhasePerformanceParams, obs: Observations, sections: dict[str, list[str]], *, saves: bool
) -> Finding:
    """What the clocks (and the replies) amount to; `saves`: a budget was set, or a clock is confidently better."""
    if (obs.served.get("correctness") or {}).get("failed"):
        return "wrong-replies"
    if sections["fail"] or sections["not-shown"]:
        return "over-budget"
    if sections["regressed"] or sections["unproven"] or sections["gross"]:
        return "doubtful"
    if params.show_savings and not saves:
        return "no-saving"
    return "held"


def _saves_something(rows: list[dict[str, Any]]) -> bool:
    """Some clock is confidently better than the reference's."""
    return any(
        (row["high"] < 1 if row["better"] == "lower" else row["better"] == "higher" and row["low"] > 1)
        for row in rows
        if "ratio" in row
    )


def _kv_theory(paths: dict[str, DecodePath], traces: dict[str, list[ServingTrace]]) -> dict[str, Any] | None:
    """Peak live KV bytes of each path against the theoretical bytes for the tokens held then."""
    role = "reference" if offered(paths["reference"], KVGeometry) is not None else "candidate"
    geometry = offered(paths[role], KVGeometry)
    if geometry is None:
        return None
    dtype = paths[role].dtype
    layers, kv_heads, head_dim = geometry.kv_geometry()
    per_element = BYTES_PER_ELEMENT.get(dtype, 4)
    out: dict[str, Any] = {
        "formula": "2 x layers x kv_heads x head_dim x tokens x bytes_per_element",
        "layers": layers,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "bytes_per_element": per_element,
        "dtype": dtype,
    }
    for role, runs in traces.items():
        peak = max(runs[-1].memory, key=lambda m: (m.live_bytes, m.tokens), default=None)
        if peak is None:
            continue
        theory = theory_bytes(
            peak.tokens, layers=layers, kv_heads=kv_heads, head_dim=head_dim, bytes_per_element=per_element
        )
        out[role] = {
            "peak_live_bytes": peak.live_bytes,
            "tokens_at_peak": peak.tokens,
            "theory_bytes": theory,
            "live_over_theory": round(peak.live_bytes / theory, 4) if theory else None,
        }
    return out


# --- explain --------------------------------------------------------------------------------------


def _plot_series(traces: dict[str, list[ServingTrace]], kv_per_token: int | None) -> dict[str, Any]:
    latency: dict[str, Any] = {}
    memory: dict[str, Any] = {}
    for role, runs in traces.items():
        latency[role] = {
            key: [round(float(x), 6) for run in runs for x in samples(run)][:MAX_SAMPLES]
            for key, samples in (("ttft_s", ttfts), ("tpot_s", tpots), ("itl_s", gaps))
        }
        points = runs[-1].memory[:: max(1, len(runs[-1].memory) // MAX_MEMORY_POINTS)]
        memory[role] = {
            "t_s": [round(m.t_s, 6) for m in points],
            "live_bytes": [m.live_bytes for m in points],
            "theory_bytes": [m.tokens * kv_per_token for m in points] if kv_per_token else None,
        }
    return {"latency_samples": latency, "live_bytes_over_time": memory}


def _metrics(params: PhasePerformanceParams, obs: Observations, j: Judgement) -> dict[str, Any]:
    metrics: dict[str, Any] = {
        f"{name}_{key}": row[key] for name, row in j.by_name.items() for key in ("ratio", "low", "high") if key in row
    }
    metrics["requests"] = len(obs.traces["candidate"][-1].requests)
    metrics["repeats"] = params.repeats
    if j.kv is not None and "candidate" in j.kv:
        metrics["candidate_live_over_theory"] = j.kv["candidate"]["live_over_theory"]
    return metrics


def _evidence(ctx: CheckContext, params: PhasePerformanceParams, obs: Observations, j: Judgement) -> dict[str, Any]:
    kv, traces, convs, scenario, slo = j.kv, obs.traces, obs.convs, obs.scenario, obs.slo
    per_token = 2 * kv["layers"] * kv["kv_heads"] * kv["head_dim"] * kv["bytes_per_element"] if kv is not None else None
    return ServingEvidence(
        scenario={
            "name": scenario.name,
            "conversations": len(convs),
            "requests": sum(len(c.turns) for c in convs),
            "system_prefix": scenario.system_prefix,
            "max_concurrent": scenario.max_concurrent,
            "slo": {"ttft_s": slo[0], "tpot_s": slo[1]},
            "tokens": sum(c.tokens for c in convs),
        },
        timer=traces["candidate"][-1].clock,
        device=ctx.device,
        repeats=params.repeats,
        confidence=params.confidence,
        clocks=[ClockRow(**row) for row in j.rows],
        kv_theory=kv,
        pressure={role: runs[-1].pressure for role, runs in traces.items()},
        goodput_share={role: j.sums[role]["goodput_share"] for role in traces},
        paths={role: path.name for role, path in obs.paths.items()},
        **_plot_series(traces, per_token),
        **obs.served,
    ).dump()


def _summary_words(params: PhasePerformanceParams, obs: Observations, j: Judgement, timed_live: str) -> str:
    """The headline ratios, the KV saving against theory, the replies judged, and how it was run."""
    headline = ", ".join(
        f"{name} {_ci(Interval(r['ratio'], r['low'], r['high'], r['confidence'], params.repeats))}"
        for name in ("ttft_p95", "tpot_p95", "throughput", "live_bytes")
        if "ratio" in (r := j.by_name[name])
    )
    saving = ""
    if (kv := j.kv) is not None and "candidate" in kv and kv["candidate"]["live_over_theory"] is not None:
        saving = f"; candidate holds x{kv['candidate']['live_over_theory']} of theoretical KV bytes at its peak"
    where = (
        f"{len(obs.convs)} conversations of {obs.scenario.name}, {params.repeats} interleaved repeats, intervals "
        f"holding {params.confidence:.0%} jointly over {j.k_budgets} budgeted and {j.k_free} watched clocks"
    )
    checked = obs.served.get("correctness") or {}
    if checked.get("compared") and not checked.get("failed"):
        saving += (
            f"; all {checked['compared']} replies of the last repeat equal the reference's answer to the same "
            "prompt alone"
        )
    return f"candidate/reference: {headline}{saving} ({where}{timed_live})"


def explain(
    ctx: CheckContext, params: PhasePerformanceParams, obs: Observations, j: Judgement, timed_live: str
) -> Outcome:
    """The Outcome of the judgement, built once."""
    metrics, evidence = _metrics(params, obs, j), _evidence(ctx, params, obs, j)
    exercise = {
        **obs.exercise,
        "requests_served": sum(len(t.requests) for t in obs.traces["candidate"]),
        "tokens_decoded": sum(len(r.token_s) for t in obs.traces["candidate"] for r in t.requests),
    }
    parts = [f"{label}: {', '.join(j.sections[section])}" for section, label in SECTIONS if j.sections[section]]
    message = "; ".join([*parts, _summary_words(params, obs, j, timed_live)])
    if j.finding == "wrong-replies":
        wrong = obs.served["correctness"]
        shown = "; ".join(wrong["failures"][:3])
        message = (
            f"{wrong['failed']} wrong answers (the last repeat's {wrong['compared']} replies against the reference's "
            f"answer to the same prompt alone, the same prompts alone and batched off the cache): {shown}; {message}"
        )
        return Outcome("fail", message, metrics, evidence, exercise, diagnosis={"problems": wrong["failures"]})
    if j.finding == "no-saving":
        message = f"the candidate shows no saving in memory or time; {message}"
    worst: Status = (
        "fail" if j.finding == "over-budget" else "warn" if j.finding in ("no-saving", "doubtful") else "pass"
    )
    return Outcome(worst, message, metrics, evidence, exercise)


@check("phase-performance", params=PhasePerformanceParams)
def phase_performance(ctx: CheckContext, params: PhasePerformanceParams) -> Outcome:
    """Four clocks on a serving scenario, reference vs candidate, with bootstrap intervals and budgets."""
    live = live_reference(ctx)
    if isinstance(live, Outcome):
        return live
    reference, timed_live = live
    obs = measure(ctx, params, reference)
    return explain(ctx, params, obs, judge(ctx, params, obs), timed_live)
