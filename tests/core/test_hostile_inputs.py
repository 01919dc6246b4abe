"""Hostile and careless manifests: exit 2 and one located line before anything runs, never a traceback.

A hypothesis strategy mutates a valid manifest with what an attacker or a careless user writes: deep
nesting, huge integers, non-finite floats and decimals, control characters and bidi overrides, and
alias bombs; `prepare` (what validate, plan and run share) must accept the document or refuse it
with an InputError. The same inputs through `gate validate` and `gate plan` give exit 2 and one line.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gate.cli.main import cli
from gate.engine.runner import prepare
from gate.errors import GateError, InputError
from tests.support.repo import EXAMPLES

BASE = EXAMPLES / "reference-static-layout.yaml"
BOUNDED = EXAMPLES / "hf-quantized-2bit.yaml"
LOCATED = re.compile(r"^gate: [^:]+\.yaml:\d+:\d+: ")


def _laughs(depth: int = 6) -> str:
    lines = ["x0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, depth)]
    return "\n".join(lines) + "\n"


def _with(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


base_text = BASE.read_text()
bounded_text = BOUNDED.read_text()
HOSTILE: dict[str, str] = {
    "YAML nested 5000 deep": base_text + "extra: " + "[" * 5000 + "]" * 5000 + "\n",
    "mappings nested 40 deep": base_text + "".join(f"{'  ' * i}k{i}:\n" for i in range(40)) + "  " * 40 + "v: 1\n",
    "seed above int64": _with(base_text, "seed: 0", "seed: 9223372036854775808"),
    "seed of 6000 digits": _with(base_text, "seed: 0", "seed: " + "9" * 6000),
    "seed .inf": _with(base_text, "seed: 0", "seed: .inf"),
    "negative seed": _with(base_text, "seed: 0", "seed: -1"),
    "device cuda:99": _with(base_text, "device: cpu", "device: cuda:99"),
    "device with a shell command": _with(base_text, "device: cpu", "device: 'cpu; rm -rf /'"),
    "threshold -Infinity": _with(bounded_text, '"0.90"', '"-Infinity"'),
    "threshold 1e999999": _with(bounded_text, '"0.90"', '"1e999999"'),
    "threshold NaN": _with(bounded_text, '"0.90"', '"NaN"'),
    "threshold sNaN": _with(bounded_text, '"0.90"', '"sNaN"'),
    "threshold 0 on >= (cannot fail)": _with(bounded_text, '"0.90"', '"0"'),
    "threshold 1.5 on a rate": _with(bounded_text, '"0.90"', '"1.5"'),
    "billion laughs at the top": _laughs() + base_text,
    "billion laughs inside params": base_text
    + "checks:\n  prefix-sweep:\n    params:\n"
    + "".join("      " + line + "\n" for line in _laughs().splitlines()),
    "recursive alias": base_text + "extra: &r [*r]\n",
    "params: unknown key": base_text + "checks:\n  prefix-sweep:\n    params: {bogus: 1}\n",
    "params: negative length": base_text + "checks:\n  prefix-sweep:\n    params: {lengths: [-5, 3]}\n",
    "params: 100000 lengths": base_text
    + "checks:\n  prefix-sweep:\n    params: {lengths: ["
    + ", ".join(["3"] * 300)
    + "]}\n",
    "claimed work 1000 x 100000 greedy tokens": _with(
        base_text,
        "claim:\n  level: exact",
        "claim:\n  level: greedy-tokens\n  tokens: [" + ", ".join(["100000"] * 1000) + "]",
    ),
    "200,000 keys": base_text + "extra:\n" + "".join(f"  k{i}: {i}\n" for i in range(200_000)),
    "a 2 MiB description": _with(base_text, "description: >", "description: " + "a" * (2 * 1024 * 1024) + "\nx: >"),
    "duplicate key": base_text + "name: again\n",
    "not a mapping": "- just\n- a list\n",
    "tab indentation": base_text + "subject:\n\treference: 1\n",
    "NUL byte": base_text.replace("name:", "name: \x00", 1),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_every_listed_bad_input_is_exit_2_and_one_located_line(tmp_path: Path, name: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(HOSTILE[name])
    for command in ("validate", "plan"):
        result = CliRunner().invoke(cli, [command, str(path)])
        assert result.exception is None or isinstance(result.exception, SystemExit), (name, result.exception)
        assert result.exit_code == 2, (name, command, result.output)
        lines = result.output.splitlines()
        assert len(lines) == 1 and len(lines[0]) < 400, (name, result.output[:500])
        assert LOCATED.match(lines[0]) or "m.yaml: larger than" in lines[0], (name, lines[0])


# --- generated: a valid manifest with hostile values planted at random places -----------------------

BASE_DOC: dict[str, Any] = yaml.safe_load(base_text)
CONTROL = "\x00\x07\x1b[2J\x7f\x85\u202e\u2066\u200f\ufeff"

hostile_scalars = st.one_of(
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([float("inf"), float("-inf"), float("nan"), 1e308, -0.0]),
    st.sampled_from(["NaN", "-Infinity", "1e999999", "Infinity", "0", "1", "-1", "1E-999999", "0.95"]),
    st.text(alphabet=st.sampled_from(list(CONTROL) + list("ab.:/-")), max_size=30),
    st.just(None),
    st.booleans(),
)


def _nested(depth: int, leaf: Any) -> Any:
    for i in range(depth):
        leaf = [leaf] if i % 2 else {"k": leaf}
    return leaf


hostile_values = st.one_of(
    hostile_scalars,
    st.builds(_nested, st.integers(min_value=1, max_value=200), hostile_scalars),
    st.lists(hostile_scalars, max_size=5),
)
PATHS = [
    ("name",),
    ("description",),
    ("intervention",),
    ("claim", "level"),
    ("claim", "tokens"),
    ("claim", "envelopes"),
    ("identity",),
    ("subject", "seed"),
    ("subject", "device"),
    ("subject", "dtype"),
    ("subject", "reference", "options"),
    ("subject", "candidate", "options", "path"),
    ("checks", "prefix-sweep", "params"),
    ("checks", "prefix-sweep", "params", "lengths"),
    ("checks", "prefix-sweep", "params", "batch"),
    ("change", "pull-request"),
    ("extra",),
]
TRIED = {"inputs": 0, "accepted": 0, "refused": 0}


@pytest.fixture(scope="module", autouse=True)
def _figures() -> Iterator[None]:
    """Add what was tried to $GATE_RELIABILITY_FIGURES (docs/reliability.md), when set."""
    yield
    target = os.environ.get("GATE_RELIABILITY_FIGURES")
    if target and TRIED["inputs"]:
        path = Path(target)
        figures = json.loads(path.read_text()) if path.is_file() else {}
        figures["generated hostile manifests"] = dict(TRIED)
        figures["listed bad inputs"] = {"inputs": len(HOSTILE), "commands": 2, "exit_2_one_line": 2 * len(HOSTILE)}
        path.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")


def _plant(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node = out
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plants=st.lists(st.tuples(st.sampled_from(PATHS), hostile_values), min_size=1, max_size=3))
def test_generated_hostile_manifests_are_accepted_or_refused_in_one_line(
    tmp_path: Path, plants: list[tuple[tuple[str, ...], Any]]
) -> None:
    doc = BASE_DOC
    for path, value in plants:
        doc = _plant(doc, path, value)
    target = tmp_path / "m.yaml"
    try:
        target.write_text(yaml.safe_dump(doc, allow_unicode=True))
    except RecursionError:
        return  # PyYAML itself cannot write it: nothing for gate to read
    TRIED["inputs"] += 1
    try:
        prepare(target, [])
    except InputError as err:
        TRIED["refused"] += 1
        assert "\n" not in str(err) and err.line is not None, str(err)
        return
    except GateError as err:  # e.g. an adapter that is not installed: still one line, never a traceback
        TRIED["refused"] += 1
        assert "\n" not in str(err)
        return
    TRIED["accepted"] += 1
