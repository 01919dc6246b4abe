"""A path's capabilities are asked in one place: `gate.protocols.offered` / `capabilities`.

No module of gate outside gate/protocols/capability.py tests a path with `isinstance(x, <a capability
protocol>)`: the planner, the controls, the runner and the checks all read the same accessor, so
a flag a protocol alone cannot state (`continuous_batching`, `salt_field`) is read once.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gate
from gate import protocols
from gate.protocols import Capability, ContinuousBatching, capabilities, offered

ROOT = Path(gate.__file__).parent
PROTOCOLS = {
    name
    for name, value in vars(protocols).items()
    if isinstance(value, type) and getattr(value, "_is_protocol", False) and name in protocols.__all__
}


def _isinstance_on_protocols(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"):
            continue
        if len(node.args) != 2:
            continue
        classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
        named = {c.id for c in classes if isinstance(c, ast.Name)} | {
            c.attr for c in classes if isinstance(c, ast.Attribute)
        }
        for name in sorted(named & PROTOCOLS):
            found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: isinstance(..., {name})")
    return found


def test_no_module_outside_protocols_tests_a_capability_with_isinstance() -> None:
    assert {"DecodePath", "PrefixServing", "ContinuousBatching"} <= PROTOCOLS
    found = [
        hit
        for path in sorted(ROOT.rglob("*.py"))
        if path != ROOT / "protocols" / "capability.py"
        for hit in _isinstance_on_protocols(path)
    ]
    assert found == []


def test_the_scan_sees_an_isinstance_on_a_protocol(tmp_path: Path) -> None:
    probe = ROOT / "_probe_for_the_scan.py"
    try:
        probe.write_text("from gate.protocols import PrefixServing\nx = isinstance(object(), PrefixServing)\n")
        assert _isinstance_on_protocols(probe) == ["gate/_probe_for_the_scan.py:2: isinstance(..., PrefixServing)"]
    finally:
        probe.unlink()


class _Batcher:
    """Types ContinuousBatching; its flag says whether it offers it."""

    def __init__(self, on: bool) -> None:
        self.continuous_batching = on

    def new_continuous_session(self, slots: int) -> object:
        return object()


def test_offered_reads_the_flag_a_protocol_cannot_state() -> None:
    on, off = _Batcher(True), _Batcher(False)
    assert offered(on, ContinuousBatching) is on
    assert offered(off, ContinuousBatching) is None
    assert Capability.CONTINUOUS_BATCHING in capabilities(on)
    assert Capability.CONTINUOUS_BATCHING not in capabilities(off)


def test_offered_refuses_a_protocol_that_is_no_capability() -> None:
    import pytest

    with pytest.raises(TypeError, match="not a capability"):
        offered(object(), protocols.Session)
