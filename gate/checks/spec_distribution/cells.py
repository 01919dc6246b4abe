"""spec-distribution's cells: seeded continuations drawn in increments, counted per enumerated cell at
each look, tested by depth, and tabled for the dossier."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

import numpy as np
import torch

from gate.checks._spec import sampling_generator
from gate.checks.spec_distribution import SpecDistributionParams
from gate.checks.spec_distribution.evidence import Look
from gate.core.check import CheckContext
from gate.protocols import SpeculativePath
from gate.speculative.gof import GTest, g_test
from gate.speculative.law import Seq
from gate.speculative.sampler import SpecStats

MAX_EVIDENCE_CELLS = 300


class Sampler:
    """Seeded continuations through the candidate, drawn in increments (one generator throughout)."""

    def __init__(
        self, spec: SpeculativePath, prompt: torch.Tensor, horizon: int, p: SpecDistributionParams, ctx: CheckContext
    ) -> None:
        self.spec, self.prompt, self.horizon, self.p, self.ctx = spec, prompt, horizon, p, ctx
        self.gen = sampling_generator(ctx.seed, ctx.device)
        self.parts: list[torch.Tensor] = []
        self.stats = SpecStats(k=spec.num_draft_tokens)
        self.n, self.seconds = 0, 0.0

    def draw_to(self, n: int, budget: int) -> torch.Tensor:
        """Draw until `n` continuations exist; all of them, [n, horizon]."""
        started = time.perf_counter()
        while self.n < n:
            b = min(self.p.batch_size, n - self.n)
            out = self.spec.sample(
                self.prompt.expand(b, -1),
                self.horizon,
                temperature=self.p.temperature,
                top_k=self.p.top_k,
                generator=self.gen,
            )
            self.parts.append(out.tokens.cpu())
            self.stats = self.stats.add(out.stats)
            self.n += b
            self.ctx.progress("samples drawn", self.n, budget)
        self.seconds += time.perf_counter() - started
        return torch.cat(self.parts)


def walk(
    sampler: Sampler, sizes: list[int], level: float, index: dict[Seq, int], p0: np.ndarray, history: list[Look]
) -> tuple[np.ndarray, int, list[Seq], GTest]:
    """Look at each cumulative size in turn until one rejects at `level`: the last look's counts and test."""
    for n_look in sizes:
        tokens = sampler.draw_to(n_look, sizes[-1])
        observed, other, strays = count(tokens, index)
        test = g_test([*observed, other], [*p0, 0.0])
        history.append(Look(n=n_look, statistic=test.statistic, dof=test.dof, p_value=test.p_value))
        if test.p_value < level:
            break  # rejected: the sequence stops at its first rejection (a control at its first detection)
    return observed, other, strays, test


def count(tokens: torch.Tensor, index: dict[Seq, int]) -> tuple[np.ndarray, int, list[Seq]]:
    """Counts per cell, the count outside every enumerated cell, and a few of those sequences."""
    observed = np.zeros(len(index))
    other, strays = 0, []
    seqs, counts = torch.unique(tokens, dim=0, return_counts=True)
    for seq, c in zip(map(tuple, seqs.tolist()), counts.tolist(), strict=True):
        if seq in index:
            observed[index[seq]] += c
        else:
            other += c
            strays.append(seq)
    return observed, other, strays[:5]


def by_depth(cells: list[Seq], observed: np.ndarray, other: int, p0: np.ndarray, horizon: int) -> list[dict[str, Any]]:
    """The same test on the first t tokens, t = 1..horizon: where the distribution first departs."""
    rows = []
    for t in range(1, horizon + 1):
        o: dict[Seq, float] = defaultdict(float)
        e: dict[Seq, float] = defaultdict(float)
        for cell, oc, pc in zip(cells, observed, p0, strict=True):
            o[cell[:t]] += oc
            e[cell[:t]] += pc
        keys = sorted(set(o) | set(e))
        test = g_test([*(o[c] for c in keys), other], [*(e[c] for c in keys), 0.0])
        rows.append({"tokens": t, "statistic": finite(test.statistic), "dof": test.dof, "p_value": test.p_value})
    return rows


def bounded_table(cells: list[Seq], observed: np.ndarray, expected: np.ndarray, other: int) -> dict[str, list[Any]]:
    """Observed and expected counts for the dossier, at most MAX_EVIDENCE_CELLS rows."""
    order = list(range(len(cells)))
    rest_o = rest_e = 0.0
    if len(order) > MAX_EVIDENCE_CELLS - 2:
        order.sort(key=lambda i: -(expected[i] + observed[i]))
        kept, dropped = order[: MAX_EVIDENCE_CELLS - 2], order[MAX_EVIDENCE_CELLS - 2 :]
        rest_o, rest_e = float(observed[dropped].sum()), float(expected[dropped].sum())
        order = sorted(kept)
    table: dict[str, list[Any]] = {
        "categories": [" ".join(map(str, cells[i])) for i in order],
        "observed": [int(observed[i]) for i in order],
        "expected": [round(float(expected[i]), 3) for i in order],
    }
    for name, o, e in (("(rest)", rest_o, rest_e), ("(outside enumeration)", float(other), 0.0)):
        if o or e:
            table["categories"].append(name)
            table["observed"].append(int(o))
            table["expected"].append(round(e, 3))
    return table


def finite(x: float) -> float | str:
    return x if math.isfinite(x) else "inf"
