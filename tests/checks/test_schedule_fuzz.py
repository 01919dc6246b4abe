"""schedule-fuzz: a seeded, budgeted hypothesis search over cache schedules finds every planted
cache fault of the reference decoder, shrinks each to at most five steps, replays the reproducer
through the adapters, and shows it in the dossier."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from gate.checks.schedule_fuzz import ScheduleFuzzParams, replay, schedule_fuzz
from gate.core.check import CheckContext
from gate.core.manifest import Manifest
from gate.models.faults import FAULTS
from tests.support.reference import MAX_LEN, path

CACHE_FAULTS = [name for name, fault in FAULTS.items() if fault.bug_class != "padding"]
"""Every planted fault a single-request schedule can reach (the padding faults need a padded batch)."""
PARAMS = ScheduleFuzzParams()
SUBJECT = {
    "reference": {"adapter": "reference", "options": {"path": "full", "max_len": MAX_LEN}},
    "candidate": {"adapter": "reference", "options": {"path": "static", "max_len": MAX_LEN}},
}


def context(candidate: object, *, fault: str | None = None, seed: int = 0, control: bool = False) -> CheckContext:
    """A positive run on `candidate` (a faulty one shrinks its failure, as a manifest naming the fault
    does), or with `control`, the runner's negative-control run of `fault`."""
    subject = SUBJECT
    if fault is not None and not control:  # the manifest names the faulty subject, as its example does
        options = {**SUBJECT["candidate"]["options"], "fault": fault}
        subject = {**SUBJECT, "candidate": {**SUBJECT["candidate"], "options": options}}
    manifest = Manifest.model_validate(
        {
            "apiVersion": "gate/v1",
            "name": "fuzz",
            "intervention": "layout",
            "claim": {"level": "tolerance"},
            "subject": subject,
        }
    )
    return CheckContext(
        manifest=manifest,
        reference=path("full"),
        candidate=candidate,  # type: ignore[arg-type]
        seed=seed,
        device="cpu",
        dtype="float32",
        control=fault if control else None,
        stop_at_first_failure=control,
    )


@pytest.mark.parametrize("fault", CACHE_FAULTS)
def test_every_cache_fault_is_found_and_shrunk_to_at_most_five_steps(fault: str) -> None:
    out = schedule_fuzz(context(path("static").with_fault(fault), fault=fault), PARAMS)
    assert out.status == "fail", f"{fault}: {out.message}"
    reproducer = out.evidence["reproducer"]
    assert 1 <= reproducer["steps"] <= 5, reproducer["text"]
    assert reproducer["reproduces_on_replay"]
    assert " → " in reproducer["text"] and out.detected_at is not None


@pytest.mark.parametrize("fault", ["reset-keeps-position", "stale-slot-on-join"])
def test_as_a_control_it_stops_at_the_first_failing_schedule_without_shrinking(fault: str) -> None:
    faulty = path("static").with_fault(fault)
    out = schedule_fuzz(context(faulty, fault=fault, control=True), PARAMS)
    assert out.status == "fail" and "not shrunk" in out.message, out.message
    assert out.metrics["shrink_runs"] == 0
    searched = out.metrics["schedules"]
    assert out.metrics["first_failure_at_schedule"] == searched  # nothing drawn after the first failure
    if fault == "stale-slot-on-join":  # only the joins' search reaches it: found after a first look at the other
        assert searched < PARAMS.max_examples
    # the positive run on the same faulty path shrinks its failure
    shrunk = schedule_fuzz(context(faulty, fault=fault), PARAMS)
    assert shrunk.metrics["shrink_runs"] > 0
    assert shrunk.evidence["reproducer"]["steps"] <= out.evidence["reproducer"]["steps"]


def test_a_correct_path_passes_with_its_coverage_as_evidence() -> None:
    out = schedule_fuzz(context(path("dynamic")), PARAMS)
    assert out.status == "pass", out.message
    coverage = out.evidence["coverage"]
    # two searches: the sessions' schedules, then joins and leaves of the running batch
    assert coverage["searches"] == 2 and coverage["continuous_batching"]
    assert coverage["schedules"] == 2 * PARAMS.max_examples
    assert set(coverage["operations_by_kind"]) >= {"prefill", "decode", "chunk", "reset", "fork", "switch"}
    assert set(coverage["operations_by_kind"]) >= {"join", "leave", "step", "mixed forward", "slot reuse"}
    assert coverage["operations_by_kind"]["slot reuse"] >= 1
    assert coverage["layout_edges"]["block"]["touched"] >= 1
    assert out.exercise["schedules_run"] == 2 * PARAMS.max_examples and out.observation is not None
    assert out.exercise["continuous"]["slots_reused"] >= 1  # the probe reuses a slot


def test_the_search_is_seeded_and_the_budget_in_seconds_binds() -> None:
    faulty = path("static").with_fault("reset-keeps-position")
    first = schedule_fuzz(context(faulty, fault="reset-keeps-position", seed=3), PARAMS)
    again = schedule_fuzz(context(faulty, fault="reset-keeps-position", seed=3), PARAMS)
    assert first.evidence["reproducer"]["text"] == again.evidence["reproducer"]["text"]
    spent = schedule_fuzz(context(path("static")), ScheduleFuzzParams(max_examples=10_000, max_seconds=0.5))
    assert spent.status == "pass" and spent.metrics["budget_spent"]
    assert spent.metrics["schedules"] < 10_000


def test_the_snippet_replays_the_minimal_schedule_through_the_adapters() -> None:
    fault = "truncated-last-block"  # as a control: the snippet plants the control's fault
    out = schedule_fuzz(context(path("static").with_fault(fault), fault=fault, control=True), PARAMS)
    reproducer = out.evidence["reproducer"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(reproducer["snippet"], "<reproducer>", "exec"), {})
    assert printed.getvalue().strip() == reproducer["text"]
    clean = replay(path("full"), path("static"), [("prefill", 1), ("append", 1)])
    assert clean == "prefill 1, append 1 → every step holds"


def test_the_dossier_shows_the_reproducer(tmp_path: Path) -> None:
    from gate.engine.pipeline import run_pipeline

    manifest = tmp_path / "fuzz.yaml"
    subject = {
        **SUBJECT,
        "candidate": {
            "adapter": "reference",
            "options": {"path": "static", "max_len": MAX_LEN, "fault": "mask-origin-reset"},
        },
    }
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "gate/v1",
                "name": "fuzz-dossier",
                "intervention": "layout",
                "claim": {"level": "tolerance"},
                "identity": ["token-ids", "positions", "kv-dtype"],
                "subject": {**subject, "device": "cpu", "dtype": "float32", "seed": 0},
                "checks": {"schedule-fuzz": {"params": {"max_examples": 30}}},
            }
        )
    )
    outputs = run_pipeline(manifest, tmp_path / "out", only=["schedule-fuzz"])
    markdown = (tmp_path / "out" / "dossier.md").read_text()
    html = (tmp_path / "out" / "dossier.html").read_text()
    assert outputs.result.verdict.value == "fail"
    assert "Minimal reproducer: prefill 1, append 1 → argmax differs at step 2" in markdown
    assert "from gate.checks.schedule_fuzz import replay" in markdown
    assert "Minimal reproducer</h4>" in html and "<li>append 1</li>" in html


def test_a_stale_slot_shrinks_to_a_join_after_a_leave_and_replays() -> None:
    fault = "stale-slot-on-join"
    out = schedule_fuzz(context(path("static").with_fault(fault), fault=fault), PARAMS)
    reproducer = out.evidence["reproducer"]
    assert reproducer["schedule"] == ["join 1", "leave 0", "join 1"], reproducer["text"]
    assert "at step 3 (request 1, position 0" in reproducer["failure"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(reproducer["snippet"], "<reproducer>", "exec"), {})
    assert printed.getvalue().strip() == reproducer["text"]
    schedule = [("join", 3), ("join", 2), ("step",), ("leave", 0), ("join", 4), ("step",)]
    assert replay(path("full"), path("static"), schedule).endswith("every step holds")
    assert "argmax differs" in replay(path("full"), path("static").with_fault(fault), schedule)


@pytest.mark.parametrize("bounded", [False, True])
def test_the_quick_judgement_of_a_step_agrees_with_the_full_comparison(bounded: bool) -> None:
    """A step whose rows all pick the reference's token (and, under a bounding claim, stay within the
    deny allowance) skips compare_rows; anything else (flips, ties, NaN, inf, a |Δ| beyond the
    allowance) takes the full comparison, so the verdict on every step is the full comparison's."""
    import torch

    from gate.checks._compare import DENY_ALLOWANCE, Tolerance
    from gate.checks._schedule import Oracle, ScheduleRunner

    tol = Tolerance(1e-3, 1e-3, "params")
    runner = ScheduleRunner(
        path("full"), path("static"), vocab=8, batch=2, max_tokens=8, seed=0, tol=tol, bounded=bounded
    )  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    start, n = 4, 3
    for case in range(400):
        full = torch.randn(2, start + n, 8, generator=gen)
        kind = case % 8
        if kind == 4:  # a near tie the candidate flips
            top = full[0, start + 1].argmax()
            full[0, start + 1, (top + 1) % 8] = full[0, start + 1, top] - 1e-5
        elif kind == 7:
            full[0, start + 2, 5] = float("-inf")
        ref = full[:, start:]
        out = ref.clone()
        if kind == 1:  # a small nudge: within tolerance
            out += 1e-4 * torch.randn(2, n, 8, generator=gen)
        elif kind == 2:  # beyond the deny allowance, argmax kept
            out += 0.5
        elif kind == 3:  # a flip
            out[1, 2] = -out[1, 2]
        elif kind == 4:
            out[0, 1, (out[0, 1].argmax() + 1) % 8] += 1e-3
        elif kind == 5:
            out[0, 0, 3] = float("nan")
        elif kind == 6:
            out[1, 0, 2] = float("inf")
        oracle = Oracle(full, full.argmax(-1), DENY_ALLOWANCE * tol.row(full))
        assert runner._judge(oracle, out, start) == runner._first_bad(ref, out, start), (case, kind)


def test_controls_share_the_schedules_strategy_and_the_references_rows_of_the_positive_run() -> None:
    """The strategy and the reference's rows for a seeded stream are the same for the positive run and
    every control of a run (a control's fault is in the candidate only): the run cache holds them once,
    and a control reads what the positive run computed."""
    from dataclasses import replace

    from gate.engine.run_cache import RunCache

    cache = RunCache()
    clean = schedule_fuzz(replace(context(path("static")), cache=cache), PARAMS)
    assert clean.status == "pass"
    hits, misses = cache.hits, cache.misses
    faulty = path("static").with_fault("stale-slot-on-join")
    out = schedule_fuzz(replace(context(faulty, fault="stale-slot-on-join", control=True), cache=cache), PARAMS)
    assert out.status == "fail"
    # the probe's rows and the strategies are all known; a control's short first look at each search
    # draws a few schedules the positive run did not (hypothesis's generation follows its budget)
    assert cache.hits - hits > 2 * (cache.misses - misses)
    # the shared rows are the reference's: the same verdicts as a run that computes its own
    alone = schedule_fuzz(context(faulty, fault="stale-slot-on-join", control=True), PARAMS)
    assert alone.message == out.message and alone.detected_at == out.detected_at


def test_a_schedules_sessions_are_freed_inside_a_subject_region() -> None:
    """Freeing the caches the subject allocated (in its own region) is the subject's work: the
    runner drops a schedule's sessions inside a subject region, so `--profile` books it there."""
    import weakref

    from gate._util import regions
    from gate.checks._compare import Tolerance
    from gate.checks._schedule import ScheduleRunner

    class Tracked:
        """The static path, remembering (weakly) every session it hands out."""

        def __init__(self, inner: Any) -> None:
            self.inner, self.sessions = inner, []

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def new_session(self, batch: int) -> Any:
            session = self.inner.new_session(batch)
            self.sessions.append(weakref.ref(session))
            return session

    candidate = Tracked(path("static"))
    events: list[tuple[str, list[bool]]] = []  # (enter or leave, which sessions are alive)

    class Observer:
        def subject_enter(self) -> None:
            events.append(("enter", [ref() is not None for ref in candidate.sessions]))

        def subject_leave(self) -> None:
            events.append(("leave", [ref() is not None for ref in candidate.sessions]))

    runner = ScheduleRunner(
        path("full"), candidate, vocab=256, batch=2, max_tokens=32, seed=0,
        tol=Tolerance(1e-4, 1e-4, "params"), bounded=True,
    )  # fmt: skip
    previous = regions.observe(Observer())
    try:
        result = runner.run([("feed", 5), ("switch",), ("feed", 2), ("fork",), ("feed", 1)])
    finally:
        regions.observe(previous)
    assert result.failure is None and len(candidate.sessions) == 3
    regions_seen = list(zip(events[::2], events[1::2], strict=True))
    # the fork replaced the first session (switched away from): freed inside a region of its own
    assert (("enter", [True, True, True]), ("leave", [False, True, True])) in regions_seen
    # the release region at the end: the other two freed inside it
    assert regions_seen[-1] == (("enter", [False, True, True]), ("leave", [False, False, False]))


def test_a_control_draws_its_first_looks_however_short_the_time_budget() -> None:
    """A control's power does not depend on the machine's load: the time budget ends its search only
    after each search's first looks, so a fault they reach is detected even with no time at all."""
    fault = "stale-slot-on-join"  # reached only by the continuous search, in its first look
    rushed = ScheduleFuzzParams(max_seconds=1e-9)
    out = schedule_fuzz(context(path("static").with_fault(fault), fault=fault, control=True), rushed)
    assert out.status == "fail", out.message
    positive = schedule_fuzz(context(path("static")), rushed)
    assert positive.status == "pass" and positive.metrics["budget_spent"] and positive.metrics["schedules"] == 0


class OneCacheForEveryRequest:
    """A path whose every new session is the same session, reset: the cache kept on the model that
    generate(cache_implementation="static") resets and hands to every call on transformers 5.13-5.14
    (docs/real-bugs.md). The sessions are the reference decoder's own; only their sharing is the bug."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.shared = inner, None

    def new_session(self, batch: int) -> Any:
        if self.shared is None or self.shared_batch != batch:
            self.shared, self.shared_batch = self.inner.new_session(batch), batch
        self.shared.reset()
        return self.shared

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_two_requests_sharing_one_cache_are_named_foreign_state() -> None:
    from gate.checks._compare import Tolerance
    from gate.checks._diagnosis.experiments import shared_sessions

    tol = Tolerance(1e-4, 1e-4, "params")
    shared = OneCacheForEveryRequest(path("static"))
    found = shared_sessions(path("full"), shared, tol, 0)  # type: ignore[arg-type]
    assert found is not None and found["bug_class"] == "foreign-state", found
    assert found["sessions"]["alone_max_delta"] < 1e-4 < found["sessions"]["beside_max_delta"]
    assert shared_sessions(path("full"), path("static"), tol, 0) is None  # its own cache per session
    out = schedule_fuzz(context(shared), PARAMS)
    assert out.status == "fail" and out.diagnosis is not None, out.message
    assert out.diagnosis["bug_class"] == "foreign-state", out.diagnosis
    assert "fork" in out.evidence["reproducer"]["text"] or "switch" in out.evidence["reproducer"]["text"]
