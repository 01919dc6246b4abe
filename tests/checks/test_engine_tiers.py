"""engine-invalidation's reset where the engine's reset cannot reach a cache tier, and engine-isolation on
an engine without a cache salt, against small engines that keep real caches (a slot tier the reset
endpoint clears, a host tier it cannot, and a per-salt cache).

- a tier no reset reaches is emptied by restarting the server inside the check, which then judges: a
  tier that outlives the restart fails, wrong output after the reset fails, and only a server gate
  cannot restart leaves the reset unproven;
- with no cache salt, engine-isolation is not applicable by the engine-serving policy (no warning), and
  with one it runs and fails a salt the engine ignores.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gate.checks._engine import common_prefix
from gate.checks.engine_invalidation import EngineInvalidationParams, engine_invalidation
from gate.checks.engine_isolation import EngineIsolationParams, engine_isolation
from gate.core.check import CheckContext
from gate.core.result import Status
from gate.engine.runner import decide, prepare, run_check
from gate.protocols import CacheGeometry, Capability, EngineServer, capabilities
from tests.support.reference import ctx, path
from tests.support.repo import EXAMPLES

VOCAB = 512


@dataclass
class _Completion:
    tokens: list[int]
    logprobs: list[float]
    top: list[dict[int, float]]
    cached_tokens: int | None
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "cached_tokens": self.cached_tokens}


@dataclass
class _Process:
    """One server process: the prompts its slots hold (cleared by the reset endpoint), those its host
    tier holds (no endpoint clears it), and, per salt, what it served."""

    slots: list[tuple[str, list[int]]] = field(default_factory=list)
    host: list[tuple[str, list[int]]] = field(default_factory=list)


@dataclass
class _Server:
    """A server as a check holds it: `host_tier` keeps a prompt past the reset; `restartable`: gate launched
    it; `persistent`: its host tier survives a restart (on disk); `stale_host`: what the host tier serves is
    another computation (wrong tokens); `salted`: the cache is keyed on the salt."""

    cache: bool
    host_tier: bool = False
    restartable: bool = True
    persistent: bool = False
    stale_host: bool = False
    salted: bool = True
    flavor: str = "generic"
    process: _Process = field(default_factory=_Process)
    restarts: int = 0
    info: dict[str, Any] = field(default_factory=lambda: {"vocab_size": VOCAB})
    reused: bool = False

    def complete(self, prompt: list[int], max_tokens: int, top_k: int, extra: Any = None) -> _Completion:
        salt = str((extra or {}).get("cache_salt", "")) if self.salted else ""
        held = [p for s, p in self.process.slots if s == salt]
        hosted = [p for s, p in self.process.host if s == salt]
        from_slots = max((common_prefix(prompt, p) for p in held), default=0)
        from_host = max((common_prefix(prompt, p) for p in hosted), default=0)
        cached = min(max(from_slots, from_host), len(prompt) - 1) if self.cache else 0
        self.process.slots.append((salt, list(prompt)))
        if self.host_tier:
            self.process.host.append((salt, list(prompt)))
        shift = 100 if self.stale_host and from_host > from_slots and cached else 0
        tokens = [3 + (sum(prompt) * 31 + 7 * i + shift) % (VOCAB - 3) for i in range(max_tokens)]
        top = [{t: -0.125, 3 + (t + 1) % (VOCAB - 3): -3.0} for t in tokens]
        return _Completion(tokens, [-0.125] * len(tokens), top, cached)

    def stream(self, prompt: list[int], max_tokens: int, top_k: int, extra: Any = None) -> Any:
        raise NotImplementedError("no check here streams")

    def reset_cache(self) -> str | None:
        self.process.slots.clear()
        return "POST /reset"

    def unreset_tiers(self) -> list[str]:
        return ["the host tier: no endpoint clears it"] if self.host_tier and self.cache else []

    def restart(self) -> bool:
        if not self.restartable:
            return False
        host = self.process.host if self.persistent else []
        self.process = _Process(host=host)
        self.restarts += 1
        return True

    def evidence(self) -> dict[str, Any]:
        return {"restarted_in_check": self.restarts}


@dataclass
class _Engine:
    """An EngineServing path serving one `_Server` per check (the reference: cache off)."""

    name: str
    server: _Server
    salt_field: str | None = None
    flavor: str = "generic"
    vocab_size: int = VOCAB
    max_len: int = 512
    top_k: int = 2
    cache_geometry: CacheGeometry = field(default_factory=lambda: CacheGeometry(block_size=1, source="stated"))

    @contextmanager
    def serve(self, label: str = "", model: Any = None, fresh: bool = False) -> Iterator[_Server]:
        yield self.server

    def changed_model(self, perturb_seed: int) -> Any:
        return None  # the restart on changed weights is not exercised here: the reset part is the point


def _engines(candidate: _Server, salt_field: str | None = None) -> CheckContext:
    context = ctx(path("dynamic"), path("dynamic"))
    context.reference = _Engine("reference", _Server(cache=False))
    context.candidate = _Engine("candidate", candidate, salt_field=salt_field)
    assert isinstance(candidate, EngineServer) and Capability.ENGINE_SERVING in capabilities(context.candidate)
    return context


def _invalidation(server: _Server) -> Any:
    return engine_invalidation(_engines(server), EngineInvalidationParams(length=64))


def test_a_tier_the_reset_cannot_reach_is_emptied_by_a_restart_and_the_check_judges() -> None:
    server = _Server(cache=True, host_tier=True)
    out = _invalidation(server)
    assert out.status == "pass", out.message
    assert server.restarts == 1
    reset = out.evidence["reset"]
    assert reset["restarted"] and reset["complete"] and reset["reused_after_restart"] == 0
    assert reset["served_from_tiers_not_reset"] == reset["hit_before_reset"] > 0  # the host tier served it
    assert "POST /reset cannot reach the host tier" in out.message and "; so gate restarted the server" in out.message


def test_a_reset_that_reaches_every_tier_needs_no_restart() -> None:
    server = _Server(cache=True)
    out = _invalidation(server)
    assert out.status == "pass" and server.restarts == 0, out.message
    assert out.evidence["reset"]["restarted"] is False and out.evidence["reset"]["reused_after_reset"] == 0
    assert out.message.startswith("after POST /reset nothing was reused")


def test_a_tier_that_outlives_the_restart_fails() -> None:
    out = _invalidation(_Server(cache=True, host_tier=True, persistent=True))
    assert out.status == "fail"
    assert "after a restart of the server the same prompt reused" in out.message and "outlives the process" in (
        out.message
    )


def test_wrong_output_from_the_tier_the_reset_left_fails_though_the_restart_clears_it() -> None:
    out = _invalidation(_Server(cache=True, host_tier=True, stale_host=True))
    assert out.status == "fail"
    assert "the output after POST /reset differs from the reference" in out.message
    assert out.evidence["reset"]["reused_after_restart"] == 0 and out.evidence["reset"]["tokens_match"]


def test_only_a_server_gate_cannot_restart_leaves_the_reset_unproven() -> None:
    out = _invalidation(_Server(cache=True, host_tier=True, restartable=False))
    assert out.status == "unproven"
    assert "the reset cannot reach the host tier: no endpoint clears it, and gate cannot restart the server" in (
        out.message
    )
    assert out.evidence["reset"]["complete"] is False


ENGINE_EXAMPLE = EXAMPLES / "engine-llamacpp-sliding-window.yaml"


def _isolation_under_policy(candidate: _Server, salt_field: str | None) -> Any:
    _, plan = prepare(ENGINE_EXAMPLE, [])
    planned = next(p for p in plan.checks if p.check == "engine-isolation")
    assert planned.not_applicable is not None and planned.not_applicable.without == "cache-salt"
    return run_check(planned, engine_isolation, EngineIsolationParams(), _engines(candidate, salt_field))


def test_without_a_cache_salt_isolation_is_not_applicable_and_the_verdict_carries_no_warning() -> None:
    result = _isolation_under_policy(_Server(cache=True), None)
    assert result.status == Status.not_applicable, result.message
    assert result.message.startswith("not applicable, because the engine offers no cache salt or tenant key")
    assert "the generic server offers no cache salt or tenant key" in result.message
    _, _, summary = decide([result], _engines(_Server(cache=True)).manifest.claim.level)
    assert "unproven" not in summary and "warning" not in summary


def test_with_a_cache_salt_isolation_runs_and_fails_a_salt_the_engine_ignores() -> None:
    isolated = _isolation_under_policy(_Server(cache=True), "cache_salt")
    assert isolated.status == Status.passed, isolated.message
    leaked = _isolation_under_policy(_Server(cache=True, salted=False), "cache_salt")
    assert leaked.status == Status.failed and "the salt is ignored" in leaked.message


def test_a_policy_rule_without_the_statement_keeps_isolation_unproven() -> None:
    out = engine_isolation(_engines(_Server(cache=True)), EngineIsolationParams())
    assert out.status == "skip" and out.absent == "cache-salt"


def test_a_batch_that_did_not_overlap_the_target_is_sent_again_before_batching_counts_as_never_happened(
    monkeypatch: Any,
) -> None:
    """Whether concurrent requests overlap the target is timing (a thread started late on a loaded machine):
    vLLM at its CPU defaults gave one UNPROVEN in six runs. The batch is sent again, up to SENDS times."""
    from gate.checks.engine_batch_invariance import EngineBatchParams, engine_batch_invariance
    from gate.checks.engine_batch_invariance import body as batch_body

    real = batch_body._batched
    overlaps = iter([0, 2])
    monkeypatch.setattr(batch_body, "_batched", lambda *a: (real(*a)[0], next(overlaps, 0)))
    out = engine_batch_invariance(_engines(_Server(cache=True)), EngineBatchParams(length=32, other_lengths=[16]))
    assert out.status == "pass" and out.exercise["batch_sends"] == 2 and "2 overlapping" in out.message, out.message

    overlaps = iter([])
    out = engine_batch_invariance(_engines(_Server(cache=True)), EngineBatchParams(length=32, other_lengths=[16]))
    assert out.status == "unproven" and out.exercise["batch_sends"] == batch_body.SENDS
    assert f"overlapped the target in {batch_body.SENDS} sends: batching never happened" in out.message
