"""Servers as a budget: a cap on servers alive at once (the server the plan needs last makes room; without
a plan, controls' servers first), control servers stopped after their last use, every start with why it
happened, and a server launched with its cache off handed over unreset."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from gate.adapters.openai import Options
from gate.adapters.openai.path import (
    EVICTED,
    FIRST,
    RESTART,
    EnginePath,
    engine_starts,
    live_servers,
    peak_servers,
    start_reasons,
)
from gate.protocols import CacheGeometry
from gate.report.provenance import servers_words

SERVER = str(Path(__file__).with_name("misbehaving_server.py"))


def path_for(max_servers: int, controls: str = "ab") -> EnginePath:
    options = Options.model_validate(
        {
            "flavor": "generic",
            "launch": {"command": [sys.executable, SERVER, "{port}", "serves"], "ready_timeout_s": 20},
            "controls": {name: {"args": [name]} for name in controls},
            "max_servers": max_servers,
        }
    )
    return EnginePath(options=options, dtype="float32", seed=0)


def test_the_cap_stops_an_idle_control_server_first_and_the_last_use_stops_the_rest() -> None:
    path = path_for(max_servers=2)
    with path.serve(label="candidate") as first:
        pass
    with path.with_fault("a").serve(label="control a"):
        assert live_servers() == 2
    with path.with_fault("b").serve(label="control b"):
        assert live_servers() == 2  # control a's idle server made room, not the candidate's
    with path.serve(label="candidate") as again:
        assert again.reused and again.server is first.server  # the candidate's server was kept
    assert len(engine_starts()) == 3 and peak_servers() == 2
    assert path.release_controls({"a"}) == [f"control b ({path.label} [control b])"]
    assert live_servers() == 1
    with path.with_fault("b").serve(label="control b") as restarted:
        assert not restarted.reused  # its last use was over: a later use starts it again


def test_with_a_plan_the_cap_stops_the_server_no_later_check_needs_not_the_least_recently_used() -> None:
    path = path_for(max_servers=3, controls="abc")
    path.plan_servers([[None, "a", "b", "c"], [None, "a"]])  # what the runner states before the first check
    with path.serve(label="candidate") as first:
        pass
    with path.with_fault("a").serve(label="control a") as control_a:
        pass
    with path.with_fault("b").serve(label="control b"):
        pass
    with path.with_fault("c").serve(label="control c"):
        assert live_servers() == 3  # b made room (no later check names it), not a (least recently used)
    path.plan_servers([[None, "a"]])  # the second check
    with path.serve(label="candidate") as again:
        assert again.reused and again.server is first.server
    with path.with_fault("a").serve(label="control a") as again_a:
        assert again_a.reused and again_a.server is control_a.server  # kept for the check that needs it
    why = start_reasons()
    assert why["why"] == {FIRST: 4} and why["configurations"] == 4, why
    assert again_a.evidence()["engine_starts_in_run"]["starts"][-1] == f"control c ({path.label} [control c]): {FIRST}"


def test_without_a_plan_the_least_recently_used_control_makes_room_and_its_next_start_says_so() -> None:
    path = path_for(max_servers=3, controls="abc")
    with path.serve(label="candidate"):
        pass
    for name in "abc":
        with path.with_fault(name).serve(label=f"control {name}"):
            pass
    with path.with_fault("a").serve(label="control a") as again_a:
        assert not again_a.reused  # no plan said a later check needs it: the least recently used went
        assert again_a.server is not None and again_a.restart()
    assert start_reasons()["why"] == {FIRST: 4, EVICTED: 1, RESTART: 1}, start_reasons()
    assert len(engine_starts()) == 6
    # the run's record (results.json `servers`, the dossier's Run line) counts every start, controls' apart
    servers = path.servers_started()
    assert servers is not None and (servers["checks"], servers["controls"], servers["alive_peak"]) == (1, 5, 3)
    assert servers_words(servers) == (
        f"1 for the checks + 5 for their controls ({FIRST}: 4; {EVICTED}: 1; {RESTART}: 1), "
        "4 launch configurations, at most 3 alive at once"
    )


def test_a_server_launched_with_its_cache_off_is_handed_over_without_a_reset() -> None:
    path = path_for(max_servers=3)
    path.cache_geometry = CacheGeometry(prefix_caching=False, source="test")
    resets: list[str] = []
    path.reset_cache = lambda client: resets.append("reset")  # type: ignore[method-assign]
    with path.serve():
        pass
    with path.serve() as again:
        assert again.reused
    assert resets == []
    path.cache_geometry = CacheGeometry(prefix_caching=True, source="test")
    with path.serve():
        pass
    assert resets == ["reset"]


def test_a_restart_hands_the_new_process_over_in_the_old_ones_place_and_counts_one_start() -> None:
    path = path_for(max_servers=3)
    with path.serve(label="candidate") as held:
        old = held.server
        assert old is not None and old.proc is not None and held.restart()
        assert held.server is not old and old.proc.poll() is not None  # the old process is gone
        assert held.server is not None and held.client.base_url == held.server.base_url
        assert held.evidence()["restarted_in_check"] == 1
    with path.serve(label="candidate") as again:
        assert again.reused and again.server is held.server  # the next check gets the new process
    assert engine_starts() == [f"candidate ({path.label})", f"candidate ({path.label}), restarted"]
    assert live_servers() == 1
    with path.serve(label="restart", fresh=True) as fresh:
        first = fresh.server
        assert fresh.restart() and fresh.server is not first
    assert live_servers() == 1  # the fresh block's restarted process stopped with its block
    assert len(engine_starts()) == 4


def test_identity_names_the_model_digest_the_geometry_and_the_resolved_command(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"vocab_size": 512}')
    options = Options.model_validate(
        {
            "flavor": "generic",
            "launch": {
                "command": [Path(sys.executable).name, SERVER, "{port}", "serves", "{model}"],
                "model_file": str(model),
                "ready_timeout_s": 20,
            },
        }
    )
    path = EnginePath.probe(options, dtype="float32", seed=0)
    identity = path.identity()
    from gate.models.tiny_hf import directory_sha256

    assert identity["model_file"] == str(model) and identity["model_sha256"] == directory_sha256(model)
    assert identity["resolved_command"].split()[0] == shutil.which(Path(sys.executable).name)  # as found on PATH
    assert str(model) in identity["resolved_command"] and "{port}" not in identity["resolved_command"]
    assert identity["block_size"] is None and identity["prefix_caching"] is None
    assert "engine-prefix-parity probes it" in identity["cache_geometry_from"]
