"""Every cached intervention runs reset-isolation and invalidation where the path offers them:
quantisation and eviction included (policies quantisation@5 and eviction@4)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gate.adapters.reference import Options, ReferenceAdapter
from gate.adapters.reference.paths import ReferencePath
from gate.checks.invalidation import InvalidationParams, invalidation
from gate.checks.reset_isolation import ResetIsolationParams, reset_isolation
from gate.cli.main import cli
from tests.support import reference as ref
from tests.support.repo import EXAMPLES


@pytest.mark.parametrize(
    "name", ["reference-quant-int8", "reference-evict-sink", "hf-quantized-hqq", "hf-sliding-window"]
)
def test_approximate_cache_plans_run_reset_isolation_and_invalidation(name: str) -> None:
    out = CliRunner().invoke(cli, ["plan", str(EXAMPLES / f"{name}.yaml"), "--format", "json"])
    assert out.exit_code == 0, out.output
    checks = {c["check"]: c for c in json.loads(out.output)["checks"]}
    assert [c["fault"] for c in checks["reset-isolation"]["controls"]] == ["reset-keeps-position"]
    assert checks["reset-isolation"]["severity"] == "deny" and checks["reset-isolation"]["unproven"] == "deny"
    assert checks["invalidation"]["severity"] == "deny" and checks["invalidation"]["unproven"] == "warn"


@pytest.mark.parametrize(
    "options",
    [
        {"path": "quantized", "quant": {"bits": 4, "group_size": 16}},
        {"path": "evicting", "evict": {"window": 16, "sink": 4}},
    ],
    ids=["int4", "sink+window"],
)
def test_reset_isolation_passes_an_approximate_cache_and_catches_a_reset_that_keeps_its_state(
    options: dict[str, object],
) -> None:
    full = ref.path("full")
    built = ReferenceAdapter().build(
        Options.model_validate({"max_len": ref.MAX_LEN, **options}), device="cpu", dtype="float32", seed=0
    )
    assert isinstance(built, ReferencePath)
    candidate = built
    clean = reset_isolation(ref.ctx(full, candidate), ResetIsolationParams())
    assert clean.status == "pass", clean.message
    # the planted reset keeps the quantised codes (or kept tokens) and the position
    leaky = reset_isolation(ref.ctx(full, candidate.with_fault("reset-keeps-position")), ResetIsolationParams())
    assert leaky.status == "fail" and leaky.diagnosis is not None
    assert leaky.diagnosis["bug_class"] == "reset-leak" and leaky.diagnosis["cache_len_after_reset"] == 32


def test_invalidation_on_a_path_without_a_cross_request_cache_cannot_run_and_says_why() -> None:
    out = invalidation(ref.ctx(ref.path("full"), ref.path("quantized")), InvalidationParams())
    assert out.status == "skip" and "keeps no entries across requests" in out.message
