"""Each built-in check's params model, as `gate validate` and `gate plan` load it without torch, is the
one the check itself runs with."""

from __future__ import annotations

import pytest

from gate.checks._params import BUILTIN_PARAMS
from gate.core.registry import check_names, entry_point_of, load_check
from gate.engine.runner import load_params_model


@pytest.mark.parametrize("name", sorted(BUILTIN_PARAMS))
def test_the_torch_free_params_model_is_the_checks_own(name: str) -> None:
    assert load_params_model(name) is load_check(name).params is BUILTIN_PARAMS[name]


def test_every_built_in_check_has_its_params_in_the_table() -> None:
    built_in = {
        n for n in check_names() if (ep := entry_point_of("gate.checks", n)) and ep.value.startswith("gate.checks.")
    }
    assert built_in == set(BUILTIN_PARAMS)
