"""`gate run --profile`: the table it prints from a result record."""

from __future__ import annotations

import tests.report.results as fx
from gate.engine.profile import profile_lines


def test_profile_lists_every_check_and_control_with_forward_share() -> None:
    result = fx.passing_run()
    lines = profile_lines(result)
    text = "\n".join(lines)
    for check in result.checks:
        assert check.check in text
        for control in check.controls:
            assert f"control {control.fault}" in text
    sweep = next(line for line in lines if line.strip().startswith("prefix-sweep"))
    assert "2.50s" in sweep and "2.30s" in sweep  # wall and inside forwards, from the record
    assert "controls / run: 0.01" in text  # 30 ms of controls over a 2.2 s run
    assert lines[-1].strip().startswith("all checks") and "outside model forwards" in lines[-1]
