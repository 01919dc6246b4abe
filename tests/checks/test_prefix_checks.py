"""The prefix-reuse checks on the reference decoder's prefix-cache path: each passes on the correct
cache with proof of reuse, and fails under every control the policy names for it."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks.cache_identity import cache_identity
from gate.checks.faces import EVIDENCE
from gate.checks.hash_collision import hash_collision
from gate.checks.invalidation import invalidation
from gate.checks.prefix_reuse_parity import prefix_reuse_parity
from gate.checks.tenant_isolation import tenant_isolation
from gate.cli.main import cli
from gate.core.check import CheckContext, CheckSpec, Outcome
from gate.core.manifest import ClaimLevel, Intervention, Manifest
from gate.core.plan import PlannedCheck
from gate.core.policy import load_policies
from gate.core.result import Status
from gate.engine.run_cache import RunCache
from gate.engine.runner import decide, run_check
from gate.prefix.worker import PrefixWorker
from gate.protocols import PREFIX_CAPABILITIES, PrefixCaching, PrefixHashing, PrefixServing
from gate.report.evidence import read_evidence
from tests.support.repo import EXAMPLES

CHECKS: dict[str, CheckSpec[Any]] = {
    spec.name: spec for spec in (prefix_reuse_parity, cache_identity, tenant_isolation, invalidation, hash_collision)
}
IDENTITY = [
    "token-ids",
    "positions",
    "model-revision",
    "adapter",
    "tokenizer",
    "rope-scaling",
    "attention-window",
    "kv-dtype",
    "tenant",
]


def manifest(claim: dict[str, Any] | None = None, identity: list[str] | None = None) -> Manifest:
    return Manifest.model_validate(
        {
            "apiVersion": "gate/v1",
            "name": "prefix",
            "intervention": "prefix-reuse",
            "claim": claim or {"level": "tolerance"},
            "identity": identity or IDENTITY,
            "subject": {"reference": {"adapter": "reference"}, "candidate": {"adapter": "reference"}},
        }
    )


@cache
def paths(dtype: str = "float32", cache_bytes: int | None = None) -> tuple[Any, Any]:
    adapter = ReferenceAdapter()
    ref = adapter.build(Options(path="full", max_len=256), device="cpu", dtype=dtype, seed=0)
    prefix = {"cache_bytes": cache_bytes} if cache_bytes else None
    cand = adapter.build(
        Options(path="prefix-cache", max_len=256, block_size=4, prefix=prefix),  # type: ignore[arg-type]
        device="cpu",
        dtype=dtype,
        seed=0,
    )
    return ref, cand


def context(
    fault: str | None = None, dtype: str = "float32", cache_bytes: int | None = None, **manifest_args: Any
) -> CheckContext:
    ref, cand = paths(dtype, cache_bytes)
    return CheckContext(
        manifest=manifest(**manifest_args),
        reference=ref,
        candidate=cand.with_fault(fault) if fault else cand,
        seed=0,
        device="cpu",
        dtype=dtype,
        control=fault,
    )


def policy_controls() -> list[tuple[str, str, str]]:
    """(claim, check, fault) for every detect-control of the prefix-reuse policy; a check whose
    params do not change with the claim is run once."""
    resolved = load_policies().interventions[Intervention.prefix_reuse]
    found: dict[tuple[str, str, str], str] = {}
    for level, claim in resolved.claims.items():
        if claim.rule.admissible:
            for rule, _ in claim.checks:
                for control in rule.controls:
                    if control.expect == "detect":
                        found.setdefault((rule.check, control.fault, repr(sorted(rule.params.items()))), level.value)
    return [(level, check, fault) for (check, fault, _), level in found.items()]


def assert_typed(name: str, outcome: Outcome) -> None:
    """The evidence validates into the check's record, and the dossier reads it by field (json round trip)."""
    stored = json.loads(json.dumps(outcome.evidence))
    assert EVIDENCE[name].model_validate(stored).dump() == stored
    views = read_evidence(name, stored)
    assert not views.notes and {"unproven_assertions", "store_starts_in_run"} <= views.consumed
    if name in ("cache-identity", "tenant-isolation", "invalidation"):  # every field drawn by its own view
        assert not any(t.title.startswith("Other evidence") for t in views.tables), name


def test_the_candidate_offers_the_capability() -> None:
    _, cand = paths()
    assert isinstance(cand, PrefixWorker) and isinstance(cand, PrefixCaching)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_check_passes_on_the_correct_cache_with_proof_of_reuse(name: str) -> None:
    outcome = CHECKS[name](context(), CHECKS[name].params())
    assert outcome.status == "pass", outcome.message
    assert outcome.exercise["reused_tokens"] > 0 and outcome.exercise["hit_blocks"] > 0
    assert outcome.observation is not None
    assert_typed(name, outcome)


@pytest.mark.parametrize("claim,name,fault", policy_controls(), ids=lambda x: str(x))
def test_every_policy_control_is_detected(claim: str, name: str, fault: str) -> None:
    level = {"level": claim, "tokens": [4]} if claim == ClaimLevel.greedy_tokens.value else {"level": claim}
    params = CHECKS[name].params(
        **({"compare": "greedy"} if name == "prefix-reuse-parity" and "tokens" in level else {})
    )
    outcome = CHECKS[name](context(fault, claim=level), params)
    assert outcome.status == "fail", f"{name} missed {fault}: {outcome.message}"
    assert_typed(name, outcome)
    # as a negative control: it stops at its first failing request, and still fails
    stopped = CHECKS[name](replace(context(fault, claim=level), stop_at_first_failure=True), params)
    assert stopped.status == "fail", f"{name} as a control missed {fault}: {stopped.message}"
    served = len(outcome.evidence["requests"]) if "requests" in outcome.evidence else None
    if "stopped_at_request" in stopped.metrics and served is not None:
        assert stopped.metrics["requests"] == stopped.metrics["stopped_at_request"] + 1
        assert stopped.metrics["requests"] <= outcome.metrics.get("requests", served)
        assert stopped.detected_at is not None


def test_a_control_probes_the_field_its_fault_names_first_and_a_positive_run_probes_all() -> None:
    from gate.checks.cache_identity import probe_order

    fields = ["token-ids", "positions", "adapter", "tenant", "model-revision", "rope-scaling", "attention-window"]
    assert probe_order(fields, None) == fields
    assert probe_order(fields, "key-ignores-tenant")[0] == "tenant"
    assert probe_order(fields, "key-ignores-revision")[0] == "model-revision"
    assert probe_order(fields, "key-ignores-window")[0] == "attention-window"
    assert probe_order(fields, "key-ignores-position")[0] == "positions"
    assert probe_order(fields, "unordered-blocks") == fields  # no field named: the declared order
    assert sorted(probe_order(fields, "key-ignores-rope")) == sorted(fields)  # every field still probed


@pytest.mark.parametrize(
    "fault,names",
    [
        ("key-ignores-adapter", "adapter"),
        ("key-ignores-tenant", "tenant"),
        ("key-ignores-revision", "model-revision"),
        ("key-ignores-tokenizer", "tokenizer"),
        ("key-ignores-rope", "rope-scaling"),
        ("key-ignores-window", "attention-window"),
        ("key-ignores-kv-dtype", "kv-dtype"),
        ("key-ignores-position", "positions"),
        ("unordered-blocks", "cache-identity example"),
    ],
)
def test_cache_identity_names_the_missing_field(fault: str, names: str) -> None:
    outcome = cache_identity(context(fault), cache_identity.params())
    assert outcome.status == "fail", outcome.message
    assert outcome.message.startswith(names) or f"; {names}" in outcome.message, outcome.message


def test_parity_names_the_broken_rule_and_where() -> None:
    moved = prefix_reuse_parity(context("key-ignores-position"), prefix_reuse_parity.params())
    assert "position: blocks were served at other offsets" in moved.message and moved.detected_at == 0
    unordered = prefix_reuse_parity(context("unordered-blocks"), prefix_reuse_parity.params())
    assert "order: blocks were reused after an earlier block missed" in unordered.message
    assert unordered.detected_at == 4  # the first changed position of the mutated sequences


def test_parity_sweeps_block_boundaries_and_a_full_prompt_hit() -> None:
    outcome = prefix_reuse_parity(context(), prefix_reuse_parity.params(sequences=1))
    rows = {r["request"]: r for r in outcome.evidence["requests"]}
    for length in (3, 4, 5, 7, 8, 9):
        assert f"s0 prefix {length}" in rows
    assert rows["s0 prefix 5"]["reused"] == 4 and rows["s0 prefix 3"]["reused"] == 0
    full = rows["s0 full-prompt hit"]
    assert full["hit_blocks"] == 4 and full["reused"] == full["prompt_tokens"] - 1 == 15


def test_identity_example_holds_exactly_at_block_sizes_one_and_two() -> None:
    _, cand = paths()
    for block_size in (1, 2):
        worker = cand.fresh(block_size=block_size)
        worker.request([11, 24, 31, 42, 57])
        reply = worker.request([11, 24, 99, 42, 57])
        assert reply.stats.reused_spans == [(0, 2)] and reply.stats.served_at == list(range(0, 2, block_size))


def test_a_cache_that_never_stores_fails_the_checks_that_need_reuse_as_proof() -> None:
    ctx = context(cache_bytes=1)  # no block fits: every lookup misses
    tenant = tenant_isolation(ctx, tenant_isolation.params())
    assert tenant.status == "fail" and "same-tenant reuse did not happen" in tenant.message
    identity = cache_identity(ctx, cache_identity.params())
    assert identity.status == "fail" and "the cache is off" in identity.message
    parity = prefix_reuse_parity(ctx, prefix_reuse_parity.params(sequences=1))
    assert parity.status == "fail" and "proves nothing" in parity.message


def test_parity_holds_under_eviction_within_the_byte_budget() -> None:
    outcome = prefix_reuse_parity(context(cache_bytes=8 * 2048), prefix_reuse_parity.params())
    assert outcome.status == "pass", outcome.message
    cache_state = outcome.evidence["cache"]
    assert cache_state["evicted"] > 0 and cache_state["bytes_held"] <= cache_state["byte_budget"]


def test_parity_passes_in_bfloat16() -> None:
    outcome = prefix_reuse_parity(context(dtype="bfloat16"), prefix_reuse_parity.params(sequences=1))
    assert outcome.status == "pass", outcome.message


def test_an_identity_field_the_candidate_cannot_vary_is_unproven_and_named() -> None:
    outcome = cache_identity(context(identity=[*IDENTITY, "attention-mask"]), cache_identity.params())
    assert outcome.status == "unproven" and "attention-mask" in outcome.message
    assert outcome.lacking == {
        "attention-mask": "the store cannot build a sibling that differs in attention-mask alone"
    }
    failed = cache_identity(context(identity=[*IDENTITY, "attention-mask"]), cache_identity.params(unverifiable="fail"))
    assert failed.status == "fail"


def test_gates_worker_offers_every_prefix_capability() -> None:
    _, cand = paths()
    for name, protocol in PREFIX_CAPABILITIES.items():
        assert isinstance(cand, protocol), name
        assert isinstance(cand.fresh(), protocol), name


class ServeOnly:
    """A correct store that offers serve and recompute and nothing else (gate's worker, narrowed)."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.name, self.vocab_size, self.max_len = "serve-only", worker.vocab_size, worker.max_len
        self.uses_cache, self.dtype, self.block_size = True, worker.dtype, worker.block_size

    def request(self, tokens: Any, **kw: Any) -> Any:
        return self.worker.request(tokens, **kw)

    def recompute(self, tokens: Any, **kw: Any) -> Any:
        return self.worker.recompute(tokens, **kw)

    def adapters(self) -> tuple[str, ...]:
        return self.worker.adapters()  # type: ignore[no-any-return]

    def fresh(self, *, block_size: int | None = None) -> ServeOnly:
        return ServeOnly(self.worker.fresh(block_size=block_size))

    def reset_cache(self) -> int:
        return self.worker.reset_cache()  # type: ignore[no-any-return]

    def cache_state(self) -> dict[str, Any]:
        return {"blocks": self.worker.cache_state()["blocks"]}

    def faults(self) -> tuple[str, ...]:
        return self.worker.faults()  # type: ignore[no-any-return]

    def with_fault(self, fault: str) -> ServeOnly:
        return type(self)(self.worker.with_fault(fault))


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_a_correct_store_with_one_capability_is_never_failed_and_never_passed_where_it_lacks(name: str) -> None:
    ctx = context()
    _, cand = paths()
    ctx.candidate = ServeOnly(cand)  # type: ignore[assignment]
    assert isinstance(ctx.candidate, PrefixServing) and not isinstance(ctx.candidate, PrefixHashing)
    outcome = CHECKS[name](ctx, CHECKS[name].params())
    if name == "prefix-reuse-parity":  # everything but the budget contract needs serve and recompute only
        assert outcome.status == "unproven" and set(outcome.lacking) == {"bytes held within the declared budget"}
        assert outcome.exercise["reused_tokens"] > 0
    elif name == "tenant-isolation":
        assert outcome.status == "unproven" and set(outcome.lacking) == {"isolation under a weak hash"}
    else:
        assert outcome.status == "unproven", outcome.message
    assert all("gate.protocols." in why or "adapters" in why or "sibling" in why for why in outcome.lacking.values())
    assert_typed(name, outcome)
    assert outcome.message.count("unproven") >= 1 and "fail" not in outcome.message


class OldProtocolPath:
    """A plugin written against the single PrefixCaching protocol of policy v2: `fresh` with hash and
    budget keywords, no reset_cache / with_hash / with_budget / restarted."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.name, self.vocab_size, self.max_len = "old-protocol", worker.vocab_size, worker.max_len
        self.uses_cache, self.dtype, self.block_size = True, worker.dtype, worker.block_size
        for name in ("request", "recompute", "identity_for", "adapters", "update_weights", "save_cache"):
            setattr(self, name, getattr(worker, name))
        self.restore_cache, self.cache_state = worker.restore_cache, worker.cache_state

    def sibling(self, field: str) -> Any:
        sibling = self.worker.sibling(field)
        return None if sibling is None else OldProtocolPath(sibling)

    def fresh(self, **options: Any) -> OldProtocolPath:
        return OldProtocolPath(self.worker.fresh(**options))


def test_an_old_protocol_store_keeps_its_injected_hash_and_budget_across_resets_and_restarts() -> None:
    from gate.checks._prefix_store import LegacyStore
    from gate.prefix.cache import weak_hash

    _, cand = paths()
    store = LegacyStore(OldProtocolPath(cand))
    weak = weak_hash(2)
    hashed = store.with_hash(weak)
    assert hashed.cache_state()["hash"] == weak.__name__
    hashed.reset_cache()  # the shim's reset is a fresh old-style store: made with the same hash
    assert hashed.cache_state()["hash"] == weak.__name__
    assert hashed.restarted().cache_state()["hash"] == weak.__name__
    budget = store.with_budget(4096)
    budget.reset_cache()
    assert budget.cache_state()["byte_budget"] == 4096


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_a_plugin_written_against_the_old_single_protocol_still_passes(name: str) -> None:
    ctx = context()
    _, cand = paths()
    ctx.candidate = OldProtocolPath(cand)  # type: ignore[assignment]
    assert not isinstance(ctx.candidate, PrefixServing)
    outcome = CHECKS[name](ctx, CHECKS[name].params())
    assert outcome.status == "pass", outcome.message


@pytest.mark.parametrize("name", ["hash-collision", "tenant-isolation"])
def test_through_the_runner_a_missing_capability_is_unproven_as_the_policy_says_never_failed(name: str) -> None:
    ctx = context()
    _, cand = paths()
    ctx.candidate = ServeOnly(cand)  # type: ignore[assignment]
    rule = next(
        r
        for r, _ in load_policies().interventions[Intervention.prefix_reuse].claims[ClaimLevel.tolerance].checks
        if r.check == name
    )
    planned = PlannedCheck(
        check=name,
        step=rule.step,
        severity="deny",
        why=rule.why,
        controls=rule.controls,
        missing_capability=rule.missing_capability,
        source="test",
        available=True,
    )
    result = run_check(planned, CHECKS[name], CHECKS[name].params(), ctx)
    assert result.status == Status.unproven and result.unproven == "warn", result.message
    assert "pluggable hash" in result.message
    if name == "hash-collision":  # nothing asserted: no control could change anything, none ran
        assert result.controls == []
    else:  # the rest was asserted, and its controls showed power
        assert any(c.outcome.value == "detected" for c in result.controls)
    assert decide([result], ClaimLevel.tolerance)[0].value == "pass"


class ReportsNoTenant(ServeOnly):
    """Keys on the tenant (it is gate's worker) but reports identities without it."""

    def fresh(self, *, block_size: int | None = None) -> ReportsNoTenant:
        return ReportsNoTenant(self.worker.fresh(block_size=block_size))

    def identity_for(self, *, adapter: str | None = None, tenant: str | None = None) -> Any:
        return self.worker.identity_for(adapter=adapter, tenant=None)


def test_a_reported_identity_that_is_not_what_the_store_keys_on_fails() -> None:
    ctx = context(identity=["token-ids", "positions", "tenant"])
    _, cand = paths()
    ctx.candidate = ReportsNoTenant(cand)  # type: ignore[assignment]
    outcome = cache_identity(ctx, cache_identity.params())
    assert outcome.status == "fail", outcome.message
    assert "tenant: the store reports the same identity for both requests" in outcome.message
    assert "does not say what it keys on" in outcome.message


def test_store_starts_are_shared_across_checks_and_counted() -> None:
    ctx = context()
    ctx.cache = RunCache()
    for name in ("prefix-reuse-parity", "tenant-isolation", "hash-collision", "cache-identity", "invalidation"):
        outcome = CHECKS[name](ctx, CHECKS[name].params())
        assert outcome.status == "pass", outcome.message
    starts = outcome.evidence["store_starts_in_run"]
    # base, budget, 2-bit hash, 5 siblings, block size 1, weight update, two restarts: 12 (26 before)
    assert starts.count("base") == 1 and starts.count("hash/2") == 1 and len(starts) == 12, starts


def test_prefix_options_are_validated() -> None:
    with pytest.raises(ValidationError, match="does not apply to path 'dynamic'"):
        Options(path="dynamic", fault="trust-hash")
    with pytest.raises(ValidationError, match="does not apply to path 'prefix-cache'"):
        Options(path="prefix-cache", fault="mask-origin-reset")
    with pytest.raises(ValidationError, match="applies only to path 'prefix-cache'"):
        Options(path="dynamic", prefix={"cache_bytes": 1024})  # type: ignore[arg-type]


def test_a_manifest_missing_tenant_is_rejected_before_anything_runs(tmp_path: Path) -> None:
    text = (EXAMPLES / "reference-prefix-basic.yaml").read_text().replace("kv-dtype, tenant]", "kv-dtype]")
    path = tmp_path / "no-tenant.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["plan", str(path)])
    assert result.exit_code == 2
    assert "identity must declare 'tenant'" in result.output
    assert "computational sameness does not grant permission to share state" in result.output


@pytest.mark.slow
@pytest.mark.parametrize("example,verdict", [("reference-prefix-basic", 0), ("reference-prefix-fault-trust-hash", 1)])
def test_examples_run_end_to_end(tmp_path: Path, example: str, verdict: int) -> None:
    result = CliRunner().invoke(cli, ["run", str(EXAMPLES / f"{example}.yaml"), "--out", str(tmp_path)])
    assert result.exit_code == verdict, result.output
