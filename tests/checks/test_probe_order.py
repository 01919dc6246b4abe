"""One probe order for every check (gate.checks._probe): each check's matching rule, the same order as before."""

from __future__ import annotations

from gate.checks._probe import probe_order
from gate.checks.mask_oracle import probe_order as mask_order


def test_a_positive_run_keeps_the_declared_order_and_a_control_moves_matches_first_stably() -> None:
    items = ["a-b", "c", "b-d", "e"]
    assert probe_order(items, None, lambda _f, _i: True) == [0, 1, 2, 3]
    assert probe_order(items, "x-b", lambda f, i: "b" in i.split("-")) == [0, 2, 1, 3]
    assert probe_order(items, "none", lambda _f, _i: False) == [0, 1, 2, 3]


def test_mask_oracle_probes_first_the_case_its_fault_shares_a_word_with() -> None:
    names = ["single-request", "batched", "reset-between-requests", "chunked"]
    assert mask_order(names, None) == [0, 1, 2, 3]
    assert mask_order(names, "reset-keeps-position") == [2, 0, 1, 3]
    assert mask_order(names, "mask-origin") == [0, 1, 2, 3]
