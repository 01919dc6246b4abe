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


def test_every_other_built_in_check_loads_its_params_without_torch() -> None:
    """A built-in check outside the table (the engine checks) is imported for its params: that import
    must stay torch-free, or `gate plan` would load torch."""
    import subprocess
    import sys

    built_in = {
        n for n in check_names() if (ep := entry_point_of("gate.checks", n)) and ep.value.startswith("gate.checks.")
    }
    assert set(BUILTIN_PARAMS) <= built_in
    others = sorted(built_in - set(BUILTIN_PARAMS))
    probe = (
        "import sys\nfrom gate.engine.runner import load_params_model\n"
        f"for name in {others!r}: load_params_model(name)\nprint('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
