"""The speculative sampler, its exact output laws, and the G-test it is judged with.

Models here are synthetic causal tables (logits from the last two tokens), so the tests need no
transformer and run in seconds."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable

import numpy as np
import pytest
import torch

from gate.errors import UnknownFault
from gate.speculative.gof import g_test, pool_cells, power, required_samples
from gate.speculative.law import Law, NextProbsFn, NextTokenTable, answers_again, sampler_law, target_law
from gate.speculative.sampler import CORRECT, FAULTS, SpeculativeSampler, apply_fault, target_only_sample, warp

V, K, H, TOP_K = 12, 2, 3, 4
PROMPT = torch.tensor([3, 5, 7])


def next_probs_from_logits(
    logits_fn: Callable[[torch.Tensor], torch.Tensor], temperature: float, top_k: int | None
) -> NextProbsFn:
    """A NextProbsFn from a full-logits function: warp the last position's logits in float64."""
    return lambda ctx: warp(logits_fn(ctx)[:, -1].double(), temperature, top_k)


def marginal(law: Law, length: int) -> Law:
    """The law of the first `length` tokens."""
    out: Law = defaultdict(float)
    for seq, p in law.items():
        out[seq[:length]] += p
    return dict(out)


class TableModel:
    """Causal logits [B, T, V] from each token and its predecessor: a[t_i] + b[t_{i-1}]."""

    def __init__(self, seed: int, base: TableModel | None = None, noise: float = 1.0) -> None:
        gen = torch.Generator().manual_seed(seed)
        a, b = torch.randn(V, V, generator=gen) * 2, torch.randn(V, V, generator=gen) * 2
        self.a = a if base is None else base.a + noise * a / 2
        self.b = b if base is None else base.b + noise * b / 2

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        prev = torch.cat([tokens[:, :1], tokens[:, :-1]], 1)
        return self.a[tokens] + self.b[prev]


TARGET = TableModel(0)
DRAFT = TableModel(1, base=TARGET, noise=1.5)


def tables(temperature: float = 1.0, top_k: int | None = TOP_K) -> tuple[NextTokenTable, NextTokenTable]:
    return (
        NextTokenTable(next_probs_from_logits(TARGET, temperature, top_k), PROMPT),
        NextTokenTable(next_probs_from_logits(DRAFT, temperature, top_k), PROMPT),
    )


def counts(tokens: torch.Tensor) -> Counter[tuple[int, ...]]:
    return Counter(map(tuple, tokens.tolist()))


def g_against(law: dict[tuple[int, ...], float], observed: Counter[tuple[int, ...]]) -> float:
    cells = sorted(set(law) | set(observed))
    return g_test([observed.get(c, 0) for c in cells], [law.get(c, 0.0) for c in cells]).p_value


def sample(sampler: SpeculativeSampler, n: int, seed: int, horizon: int = H):
    gen = torch.Generator().manual_seed(seed)
    return sampler.sample(PROMPT.expand(n, -1), horizon, temperature=1.0, top_k=TOP_K, generator=gen)


def test_warp_applies_temperature_then_top_k_and_greedy_is_one_hot() -> None:
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
    p = warp(logits, 0.5, 2)
    assert p[0, [0, 3]].tolist() == [0.0, 0.0]
    assert torch.allclose(p[0, 1] / p[0, 2], torch.exp(torch.tensor(2.0)))
    assert warp(logits, 0.0, None).tolist() == [[0.0, 1.0, 0.0, 0.0]]


def test_correct_sampler_law_is_the_target_law_and_faults_move_it() -> None:
    target, draft = tables()
    law0 = target_law(target, H)
    assert len(law0) == TOP_K**H and sum(law0.values()) == pytest.approx(1.0)
    correct = sampler_law(target, draft, CORRECT, K, H)
    assert max(abs(correct.get(c, 0) - p) for c, p in law0.items()) < 1e-12
    for fault in FAULTS:
        law = sampler_law(target, draft, apply_fault(CORRECT, fault), K, H)
        assert sum(law.values()) == pytest.approx(1.0)
        tv = 0.5 * sum(abs(law.get(c, 0) - law0.get(c, 0)) for c in set(law) | set(law0))
        if fault == "drop-bonus":
            assert tv < 1e-12, "dropping the bonus token keeps the distribution"
        else:
            assert tv > 5e-3, fault


def test_a_table_records_its_batches_and_a_model_that_answers_any_of_them_differently_is_told_apart() -> None:
    """What lets a run share a law: the same answers to the same batches give the same law."""
    target, draft = tables()
    law = sampler_law(target, draft, CORRECT, K, H)
    assert draft.asked and all(probs.dtype == torch.float64 for _, probs in draft.asked)
    assert sum(len(contexts) for contexts, _ in draft.asked) == len(draft._cache)
    probs = next_probs_from_logits(DRAFT, 1.0, TOP_K)
    assert answers_again(probs, draft.asked)
    deepest = max(contexts.shape[1] for contexts, _ in draft.asked)

    def deep_only(contexts: torch.Tensor) -> torch.Tensor:  # a different draft two tokens past the prompt
        out = probs(contexts)
        return out.roll(1, dims=-1) if contexts.shape[1] == deepest else out

    assert not answers_again(deep_only, draft.asked)
    _, changed = tables()
    changed.probs_fn = deep_only
    assert sampler_law(tables()[0], changed, apply_fault(CORRECT, "bonus-from-draft"), K, H) != sampler_law(
        target, draft, apply_fault(CORRECT, "bonus-from-draft"), K, H
    )
    assert law == sampler_law(*tables(), CORRECT, K, H)


def test_bonus_faults_are_invisible_within_the_draft_length() -> None:
    """Why the horizon must exceed k: the bonus token first appears at position k + 1."""
    target, draft = tables()
    law0 = target_law(target, H)
    bonus = sampler_law(target, draft, apply_fault(CORRECT, "bonus-from-draft"), K, H)
    short0, short = marginal(law0, K), marginal(bonus, K)
    assert max(abs(short.get(c, 0) - p) for c, p in short0.items()) < 1e-12
    assert max(abs(bonus.get(c, 0) - p) for c, p in law0.items()) > 1e-3


@pytest.mark.parametrize("rules", ["correct", *FAULTS])
def test_sampler_follows_its_exact_law(rules: str) -> None:
    """The batched sampler and the enumerated law agree, faults included (one test, two codes)."""
    target, draft = tables()
    sampler = SpeculativeSampler(TARGET, DRAFT, K)
    if rules != "correct":
        sampler = sampler.with_fault(rules)
    law = sampler_law(target, draft, sampler.rules, K, H)
    out = sample(sampler, 20_000, seed=11)
    assert g_against(law, counts(out.tokens)) > 1e-3


def test_faults_are_detected_and_the_correct_sampler_is_not() -> None:
    target, _ = tables()
    law0 = target_law(target, H)
    sampler = SpeculativeSampler(TARGET, DRAFT, K)
    assert g_against(law0, counts(sample(sampler, 20_000, seed=3).tokens)) > 0.01
    for fault in ("accept-all", "inverted-ratio", "residual-from-target", "residual-abs", "bonus-from-draft"):
        assert g_against(law0, counts(sample(sampler.with_fault(fault), 20_000, seed=3).tokens)) < 0.01, fault


def test_false_alarms_over_twenty_seeds_at_alpha_001() -> None:
    target, _ = tables()
    law0 = target_law(target, H)
    sampler = SpeculativeSampler(TARGET, DRAFT, K)
    alarms = sum(g_against(law0, counts(sample(sampler, 8_000, seed=s).tokens)) < 0.01 for s in range(20))
    assert alarms <= 1


def test_sampling_is_seeded_and_batched() -> None:
    sampler = SpeculativeSampler(TARGET, DRAFT, K)
    a, b = sample(sampler, 500, seed=5, horizon=9), sample(sampler, 500, seed=5, horizon=9)
    assert torch.equal(a.tokens, b.tokens) and a.tokens.shape == (500, 9)
    assert not torch.equal(a.tokens, sample(sampler, 500, seed=6, horizon=9).tokens)
    s = a.stats
    # every sequence gets at least ceil(9 / (k + 1)) target passes; calls are batched across rows
    assert s.target_passes >= 500 * 3 and s.target_calls <= 9
    assert s.draft_passes == K * s.target_passes and s.proposed == K * s.target_passes
    assert s.emitted == s.accepted + s.rejections + s.bonus
    assert 0 < s.acceptance_rate < 1 and 1 < s.tokens_per_target_pass <= K + 1


def test_drop_bonus_costs_target_passes_not_distribution() -> None:
    sampler = SpeculativeSampler(TARGET, DRAFT, K)
    good, dropped = (
        sample(sampler, 4000, 1, horizon=12).stats,
        sample(sampler.with_fault("drop-bonus"), 4000, 1, horizon=12).stats,
    )
    assert dropped.bonus == 0 and good.bonus > 0
    assert dropped.tokens_per_target_pass < good.tokens_per_target_pass - 0.1
    assert dropped.target_passes > good.target_passes


def test_identical_draft_accepts_everything() -> None:
    sampler = SpeculativeSampler(TARGET, TARGET, K)
    stats = sample(sampler, 2000, 0, horizon=6).stats
    assert stats.acceptance_rate == 1.0 and stats.rejections == 0


def test_greedy_speculation_reproduces_target_greedy_and_accept_all_does_not() -> None:
    prompts = torch.randint(0, V, (16, 4), generator=torch.Generator().manual_seed(0))
    expected = target_only_sample(
        TARGET, prompts, 10, temperature=0.0, top_k=None, generator=torch.Generator().manual_seed(0)
    )
    sampler = SpeculativeSampler(TARGET, DRAFT, K)
    out = sampler.sample(prompts, 10, temperature=0.0, top_k=None, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out.tokens, expected) and out.stats.rejections > 0
    faulty = sampler.with_fault("accept-all").sample(
        prompts, 10, temperature=0.0, top_k=None, generator=torch.Generator().manual_seed(0)
    )
    assert not torch.equal(faulty.tokens, expected)


def test_unknown_fault_is_refused() -> None:
    with pytest.raises(UnknownFault):
        apply_fault(CORRECT, "no-such-fault")


def test_pooling_keeps_every_group_above_five_and_drops_impossible_cells() -> None:
    expected = [0.0, 0.5, 1.0, 2.0, 3.0, 40.0, 53.5]
    groups = pool_cells(expected)
    assert sorted(i for g in groups for i in g) == [1, 2, 3, 4, 5, 6]
    assert all(sum(expected[i] for i in g) >= 5 for g in groups)


def test_g_test_rejects_impossible_samples_outright() -> None:
    result = g_test([10, 10, 1], [0.5, 0.5, 0.0])
    assert result.p_value == 0.0 and result.impossible == 1


def test_power_prediction_matches_simulation() -> None:
    rng = np.random.default_rng(0)
    p0 = np.full(20, 0.05)
    p1 = p0 * (1 + 0.3 * np.sin(np.arange(20)))
    p1 /= p1.sum()
    n = required_samples(p0, p1, 0.01, 0.8, 100_000)
    assert n is not None and power(p0, p1, n, 0.01) >= 0.8
    simulated = np.mean([g_test(rng.multinomial(n, p1), p0).p_value < 0.01 for _ in range(300)])
    assert abs(simulated - 0.8) < 0.1
    assert power(p0, p0, n, 0.01) == pytest.approx(0.01)
    assert required_samples(p0, p0, 0.01, 0.8, 100_000) is None
