"""hf adapter options: what a manifest may say, and the errors it gets otherwise."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gate.adapters.hf import HFAdapter, Options


def test_defaults_are_a_full_pass_on_a_preset() -> None:
    options = Options(model="llama")
    assert options.path == "full" and options.is_preset
    assert HFAdapter.Options is Options and HFAdapter.name == "hf"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"model": "llama", "colour": "red"}, "Extra inputs are not permitted"),
        ({"model": "llama", "path": "static", "window": 8}, "option 'window' applies only to path sliding-window"),
        ({"model": "llama", "path": "dynamic", "backend": "fp8"}, "option 'backend' applies only to path quantized"),
        ({"model": "llama", "path": "assisted"}, "needs a draft model"),
        ({"model": "llama", "path": "kvpress"}, "needs `press`"),
        ({"model": "llama", "path": "kvpress", "press": "squeeze"}, "unknown press 'squeeze'"),
        ({"model": "llama", "path": "dynamic", "press_scope": "request"}, "'press_scope' applies only to path kvpress"),
        ({"model": "llama", "path": "kvpress", "press": "knorm", "press_scope": "decode"}, "'prefill' or 'request'"),
        ({"model": "llama", "path": "quantized", "backend": "fp8", "nbits": 2}, "fp8 backend quantizes per tensor"),
        ({"model": "meta-llama/Llama-3-8B"}, "never downloads from a hub"),
        ({"model": "/nowhere", "init_std": 0.1}, "applies only to a preset"),
        ({"model": "llama", "path": "teleport"}, "Input should be"),
        ({"model": "llama", "path": "quantized", "nbits": 3}, "Input should be 2, 4 or 8"),
        ({"model": "llama", "path": "dynamic", "config_via": "keywords"}, "'config_via' applies only to path generate"),
    ],
)
def test_invalid_options_are_rejected_with_a_reason(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Options.model_validate(data)


def test_a_local_directory_is_accepted_as_a_model(tmp_path: object) -> None:
    assert not Options(model=str(tmp_path)).is_preset
    assert not Options(model="./models/tiny").is_preset


def test_importing_the_adapter_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, gate.adapters.hf; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
