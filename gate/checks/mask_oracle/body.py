"""mask-oracle's body: the fixture and its oracle (exact rationals; a float64 softmax for the
grouped-query case), measure (every case through the candidate's AttentionProbe), judge, explain."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import torch

from gate.checks._probe import probe_order as shared_probe_order
from gate.checks.mask_oracle import COVERED_BY, MaskOracleParams
from gate.core.check import CheckContext, Outcome, check
from gate.protocols import AttentionProbe, offered

SEED_VALUES = (2, 4, 8, 16, 32)
OTHER_VALUES = (3, 5, 7, 11, 13)
"""Batch row 1: a second, independent request."""
RESET_VALUES = ((1, 3, 5, 7), (6, 10, 14, 18))
"""The request after a reset (rows 0 and 1)."""


ORACLE_RTOL = {"float32": 1e-5, "float64": 1e-9, "bfloat16": 1.6e-2, "float16": 2e-3}
"""Relative tolerance by the dtype the probe computes in: about four units in the last place of a 16-bit
format (a mean and a softmax round several times); the wrong answers differ by tens of percent."""


def oracle_rtol(params: MaskOracleParams, dtype: str) -> float:
    """The params' rtol, else the dtype's entry of ORACLE_RTOL (float32's for a dtype not listed)."""
    return params.rtol if params.rtol is not None else ORACLE_RTOL.get(dtype, ORACLE_RTOL["float32"])


MODEL_LEVEL_STAND_INS = COVERED_BY
"""What observes mask-oracle's rule without an AttentionProbe: declared in the package's face (`COVERED_BY`)."""


@dataclass
class Case:
    name: str
    requests: list[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]
    expected: list[list[torch.Tensor]]
    """Per request, per chunk: [B, H, n, D] float64."""
    wrong: dict[str, list[list[torch.Tensor]]] = field(default_factory=dict)
    """Predicted wrong answers per bug class (zero-score cases): what mask-offset, kv-truncation and
    foreign-state return for each chunk."""
    per_kv_head: list[list[torch.Tensor]] = field(default_factory=list)
    """Grouped-query cases: per request, per chunk, what each query head returns reading each KV head,
    [B, H, H_kv, n, D] float64 (a wrong query-to-KV-head map at read time returns another column)."""


def visible_means(values: tuple[int, ...], positions: list[int]) -> list[Fraction]:
    """Mask oracle (background): the mean of values[:p + 1] for each position p (exact)."""
    return [Fraction(sum(values[: p + 1]), p + 1) for p in positions]


def _zero_score_case(name: str, requests: list[tuple[tuple[tuple[int, ...], ...], list[int]]]) -> Case:
    """Zero scores: q = 0, so every visible key gets equal weight. Each request is (values per
    batch row, chunk sizes), e.g. ((SEED_VALUES, OTHER_VALUES), [3, 2]): cache three, then two."""
    case = Case(name, [], [], {"mask-offset": [], "kv-truncation": [], "foreign-state": []})
    for row_values, sizes in requests:
        v = torch.tensor(row_values, dtype=torch.float32)[:, None, :, None]  # [B=2, H_kv=1, n, D=1]
        swapped = tuple(row_values[1:] + row_values[:1])  # row b reads row b + 1's cache
        chunks, exp, start = [], [], 0
        wrong: dict[str, list[torch.Tensor]] = {key: [] for key in case.wrong}
        for size in sizes:
            positions = list(range(start, start + size))
            zeros = torch.zeros(len(row_values), 1, size, 1)
            chunks.append((zeros, zeros.clone(), v[:, :, start : start + size].clone()))
            exp.append(_means(row_values, positions))
            # tril(ones(q_len, k_len)) from the chunk's origin: row i sees keys 0..i
            wrong["mask-offset"].append(_means(row_values, list(range(size))))
            own = tuple(tuple(values[start:]) for values in row_values)
            wrong["kv-truncation"].append(_means(own, list(range(size))))
            foreign = tuple(tuple(o[:start]) + tuple(r[start:]) for r, o in zip(row_values, swapped, strict=True))
            wrong["foreign-state"].append(_means(foreign, positions))
            start += size
        case.requests.append(chunks)
        case.expected.append(exp)
        for key, per_chunk in wrong.items():
            case.wrong[key].append(per_chunk)
    return case


def _means(row_values: tuple[tuple[int, ...], ...], positions: list[int]) -> torch.Tensor:
    rows = [[float(x) for x in visible_means(values, positions)] for values in row_values]
    return torch.tensor(rows, dtype=torch.float64)[:, None, :, None]  # [B, 1, n, 1]


def _gqa_case(params: MaskOracleParams, seed: int) -> Case:
    """Nonzero scores, several KV heads: 10 positions as chunks of 6, 3 and 1."""
    gen = torch.Generator().manual_seed(seed)
    b, h, hkv, d, n = 2, params.heads, params.kv_heads, params.head_dim, 10
    q = torch.randn(b, h, n, d, generator=gen, dtype=torch.float64)
    k = torch.randn(b, hkv, n, d, generator=gen, dtype=torch.float64)
    v = torch.randn(b, hkv, n, d, generator=gen, dtype=torch.float64)
    # oracle: explicit float64 softmax over keys 0..p for the query at absolute position p
    blocked = torch.ones(n, n, dtype=torch.bool).triu(1)
    # every query head against every KV head: [B, H, H_kv, n, D]; the right map reads head h // (h / h_kv)
    scores = q[:, :, None] @ k[:, None].transpose(-1, -2) / d**0.5
    each = scores.masked_fill(blocked, float("-inf")).softmax(dim=-1) @ v[:, None]
    full = each[:, torch.arange(h), torch.arange(h) // (h // hkv)]  # [B, H, n, D]
    chunks, expected, per_head, start = [], [], [], 0
    for size in (6, 3, 1):
        sl = slice(start, start + size)
        chunks.append((q[:, :, sl].float(), k[:, :, sl].float(), v[:, :, sl].float()))
        expected.append(full[:, :, sl])
        per_head.append(each[:, :, :, sl])
        start += size
    return Case("gqa-nonzero-scores", [chunks], [expected], per_kv_head=[per_head])


def oracle_cases(params: MaskOracleParams, seed: int) -> list[Case]:
    pair = (SEED_VALUES, OTHER_VALUES)
    return [
        _zero_score_case("seed-fixture", [(pair, [3, 2])]),
        _zero_score_case("empty-cache", [(pair, [5])]),
        _zero_score_case("one-token-cache", [(pair, [1, 4])]),
        _zero_score_case("multistep-append", [(pair, [3, 1, 1])]),
        _zero_score_case("reset-between-requests", [(pair, [3, 2]), (RESET_VALUES, [2, 2])]),
        _gqa_case(params, seed),
    ]


@dataclass(frozen=True)
class Probe:
    """One probe call: a case and its index in the positive run's order, and what the candidate returned."""

    case: Case
    position: int
    poisoned: bool
    outputs: list[list[torch.Tensor]]


@dataclass(frozen=True)
class Observations:
    """Every probe call in the order it ran (a control stops after the first wrong case)."""

    probes: list[Probe]
    variants: int
    exercise: dict[str, Any]


@dataclass(frozen=True)
class Judgement:
    """Each probe's row (as the evidence states it), the wrong cases' labels and the diagnosis."""

    rows: list[dict[str, Any]]
    failures: list[str]
    diagnosis: dict[str, Any] | None


def measure(ctx: CheckContext, params: MaskOracleParams, probe: AttentionProbe, rtol: float) -> Observations:
    """Every case (poisoned too, with poison_tail) through the candidate's attention path, in probe
    order; a control stops after its first wrong case (one wrong case proves power)."""
    # the fixture depends on the params and seed alone: built once a run, shared with the controls;
    # each probe gets its own copy, so a subject that writes into its inputs cannot change the fixture
    key = ("mask-oracle-cases", params.model_dump_json(), ctx.seed)
    cases = ctx.cache.get(key, lambda: oracle_cases(params, ctx.seed))
    variants = (False, True) if params.poison_tail else (False,)
    probes: list[Probe] = []
    for position in probe_order([case.name for case in cases], ctx.control):
        case = cases[position]
        for poison in variants:
            requests = [[(q.clone(), k.clone(), v.clone()) for q, k, v in chunks] for chunks in case.requests]
            probes.append(Probe(case, position, poison, probe.attention_probe(requests, poison_tail=poison)))
            if ctx.stop_at_first_failure and not _score(case, probes[-1].outputs, rtol)["ok"]:
                return Observations(probes, len(variants), _exercise(ctx, probes))
    return Observations(probes, len(variants), _exercise(ctx, probes))


def _exercise(ctx: CheckContext, probes: list[Probe]) -> dict[str, Any]:
    return {
        "probe_calls": len(probes),
        "path": ctx.candidate.name,
        "uses_cache": ctx.candidate.uses_cache,
        "chunks_through_cache": sum(len(chunks) for p in probes for chunks in p.case.requests),
    }


def judge(obs: Observations, rtol: float) -> Judgement:
    """Every probe against the oracle, the predicted wrong answer it matches, the bug class (pure)."""
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    for p in obs.probes:
        row = _score(p.case, p.outputs, rtol)
        row["case"], row["poisoned_tail"] = p.case.name, p.poisoned
        row["index"] = p.position * obs.variants + p.poisoned  # in the positive run's order
        rows.append(row)
        if not row["ok"]:
            failures.append(p.case.name + (" +poisoned-tail" if p.poisoned else ""))
    return Judgement(rows, failures, _diagnose(rows) if failures else None)


def explain(rtol: float, obs: Observations, j: Judgement) -> Outcome:
    """The Outcome of the judgement, built once: the wrong cases and their bug class, or a pass."""
    rows = j.rows
    seed_row = next((r for r in rows if r["index"] == 0), None)  # the seed fixture's, unpoisoned
    got = seed_row["got"] if seed_row else None
    # laid out in the positive run's order whatever order the cases ran in; a stopped control's is a
    # prefix of it only when it ran the first cases
    observed = {
        row["index"]: torch.cat([o.detach().double().cpu().flatten() for req in p.outputs for o in req])
        for row, p in zip(rows, obs.probes, strict=True)
    }
    seen: dict[str, Any] = {
        "metrics": {
            "cases": len(rows),
            "failed_cases": len(j.failures),
            "seed_fixture": got,
            "max_abs_error": max(r["max_abs_error"] for r in rows),
            "rtol": rtol,
        },
        "evidence": {
            "fixture": {
                "values": list(SEED_VALUES),
                "cached": 3,
                "queries_at": [3, 4],
                "expected": [7.5, 12.4],
                "wrong_origin": [2.0, 3.0],
                "got": got,
            },
            "cases": rows,
        },
        "exercise": obs.exercise,
        "observation": torch.cat([observed[i] for i in sorted(observed)]),
        # what observes the rule without the probe: the runner judges the check by it when none of
        # its own controls can run on this candidate (a probe never makes the check worse)
        "covered_by": dict(MODEL_LEVEL_STAND_INS),
    }
    if j.diagnosis is not None:
        return Outcome(
            status="fail",
            message=f"{len(j.failures)} of {len(rows)} oracle cases wrong: "
            f"{', '.join(j.failures[:4])}{' ...' if len(j.failures) > 4 else ''} ({j.diagnosis['bug_class']})",
            diagnosis=j.diagnosis,
            detected_at=int(next(r["index"] for r in rows if not r["ok"])),
            observation_in_run_order=sorted(observed) == list(range(len(observed))),
            **seen,
        )
    values = got if got is not None else [float("nan")] * 2
    return Outcome(
        status="pass",
        message=f"all {len(rows)} oracle cases exact: cached chunk at positions 3, 4 -> {values[0]:g}, {values[1]:g}",
        observation_in_run_order=True,
        **seen,
    )


@check("mask-oracle", params=MaskOracleParams)
def mask_oracle(ctx: CheckContext, params: MaskOracleParams) -> Outcome:
    """The mask oracle of the background (7.5 and 12.4, not 2 and 3) through the candidate's attention path."""
    candidate = ctx.candidate
    probe = offered(candidate, AttentionProbe)
    if probe is None:  # skipped, naming what observes the rule instead
        message = f"{candidate.name} offers no AttentionProbe (attention_probe)"
        return Outcome("skip", message, covered_by=dict(MODEL_LEVEL_STAND_INS))
    rtol = oracle_rtol(params, str(getattr(candidate, "dtype", ctx.dtype)).removeprefix("torch."))
    obs = measure(ctx, params, probe, rtol)
    return explain(rtol, obs, judge(obs, rtol))


def _score(case: Case, outputs: list[list[torch.Tensor]], rtol: float) -> dict[str, Any]:
    """Compare every chunk's output with the oracle; name the predicted wrong answer the cached
    chunks returned instead, if any."""
    err, ok = 0.0, True
    matches: dict[str, list[bool]] = {key: [] for key in case.wrong}
    for r, (exp_req, got_req) in enumerate(zip(case.expected, outputs, strict=True)):
        for c, (exp, got) in enumerate(zip(exp_req, got_req, strict=True)):
            got64 = got.detach().double().cpu()
            if got64.shape != exp.shape or bool(got64.isnan().any()):
                ok, err = False, float("inf")
                continue
            err = max(err, float((got64 - exp).abs().max()))
            ok &= _close(got64, exp, rtol)
            if c > 0:  # only chunks with something cached before them tell the bugs apart
                for key, predicted in case.wrong.items():
                    matches[key].append(_close(got64, predicted[r][c], rtol))
    last = outputs[0][-1].detach().double().cpu()
    got_values = [round(float(x), 6) for x in last[0, 0, :, 0]] if last.shape[-1] == 1 else []
    matched = [key for key, hits in matches.items() if hits and all(hits)] if not ok else []
    row: dict[str, Any] = {"ok": bool(ok), "max_abs_error": err, "got": got_values, "nan": err == float("inf")}
    if case.per_kv_head and not ok:
        row["read_map"] = _read_map(case, outputs, rtol)
        heads = len(row["read_map"])
        group = heads // case.per_kv_head[0][0].shape[2]
        if None not in row["read_map"] and row["read_map"] != [i // group for i in range(heads)]:
            matched.append("kv-head-mapping")
    return {**row, "matches": matched}


def _read_map(case: Case, outputs: list[list[torch.Tensor]], rtol: float) -> list[int | None]:
    """Per query head, the one KV head whose answer it returned in every wrong chunk (None: none or
    several); the chunks it answered right say nothing (a map wrong only in the one-token step over
    a cache, a decode kernel's own, leaves the prefill chunk right)."""
    heads, kv_heads = case.per_kv_head[0][0].shape[1:3]
    wrong = [
        [(each, got) for each, got, exp in zip(each_req, got_req, exp_req, strict=True) if not _close(got, exp, rtol)]
        for each_req, got_req, exp_req in zip(case.per_kv_head, outputs, case.expected, strict=True)
    ]
    mapping: list[int | None] = []
    for h in range(heads):
        found = [
            g for g in range(kv_heads) if all(_close(got[:, h], each[:, h, g], rtol) for c in wrong for each, got in c)
        ]
        mapping.append(found[0] if len(found) == 1 else None)
    return mapping


def _close(got: torch.Tensor, expected: torch.Tensor, rtol: float) -> bool:
    got64, bound = got.detach().double().cpu(), rtol * max(float(expected.abs().max()), 1.0)
    return got64.shape == expected.shape and float((got64 - expected).abs().max()) <= bound


def probe_order(names: list[str], control: str | None) -> list[int]:
    """The cases in the order a run probes them (gate.checks._probe): a control probes first a case
    its fault's name shares a word with (reset-keeps-position: reset-between-requests)."""
    return shared_probe_order(names, control, lambda fault, name: bool(set(fault.split("-")) & set(name.split("-"))))


EXPLANATIONS = {
    "read-past-valid-length": "NaN from the unused cache tail (written there by the fixture, or left there "
    "uninitialised) reached the output: attention reads past the valid length, even where the "
    "nominal length looks right (background: mask oracle)",
    "mask-offset": "cached chunks returned exactly the wrong-origin answer (2 and 3): the mask restarts "
    "at the chunk's origin (background: parity, mask oracle)",
    "kv-truncation": "cached chunks returned attention over the chunk alone: the cached keys are missing from the read",
    "foreign-state": "cached chunks returned attention over the other request's cached values: the "
    "cache handle belongs to another request",
    "kv-head-mapping": "each query head of the grouped-query case returned exactly what another KV head's "
    "keys and values give it: the query-to-KV-head map is wrong at read time (the cache holds every head)",
    "uncertain": "stopped at the first wrong case (a negative control), before the cases "
    "that tell a reset leak, a cached read and the attention kernel apart were run",
    "reset-leak": "only the request after a reset is wrong: reset "
    "left position state or K/V behind (background: mask oracle)",
    "cached-read": "an empty cache is right and cached prefixes are "
    "wrong: the read of cached keys (length, rows or blocks) is wrong",
    "attention": "wrong even with an empty cache: the mask or kernel itself",
}
"""Bug class -> what the cases run show; the four from mask-offset on are matched to predicted wrong answers."""
MATCHED = ("mask-offset", "kv-truncation", "foreign-state", "kv-head-mapping")


def _diagnose(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Name the bug class from the cases run: all of them on a positive run, those up to the first
    wrong one on a control (which stops there); a class that needs cases not run is not named."""
    by = {(r["case"], r["poisoned_tail"]): r for r in rows}
    poison_reached = any(r["nan"] and not by[(r["case"], False)]["nan"] for r in rows if r["poisoned_tail"])
    # every fixture input is finite: a NaN in an unpoisoned case came from slots never written
    garbage_read = any(r["nan"] for r in rows if not r["poisoned_tail"])
    matched = next((key for key in MATCHED if any(key in r["matches"] for r in rows)), None)
    if poison_reached or garbage_read:
        bug = "read-past-valid-length"
    elif matched is not None:
        bug = matched
    elif ("gqa-nonzero-scores", True) not in by and ("gqa-nonzero-scores", False) not in by:
        bug = "uncertain"
    elif [k for k, r in by.items() if not r["ok"] and not k[1]] == [("reset-between-requests", False)]:
        bug = "reset-leak"  # only the single-request case after a reset
    else:
        bug = "cached-read" if by[("empty-cache", False)]["ok"] else "attention"
    return {"bug_class": bug, "explanation": EXPLANATIONS[bug]}
