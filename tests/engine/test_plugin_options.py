"""`gate validate` judges a plugin adapter's options by the plugin's own Options model: a typo in an
option's value (an unknown variant) or in its key is a located error, exit 2, never exit 0, even
when the plugin's model forgot `extra="forbid"`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from gate.cli.main import cli
from gate.core import registry

TINYLM = Path(__file__).parent / "tinylm" / "kv-cache.yaml"

LENIENT = """
from typing import Literal
from pydantic import BaseModel

class Options(BaseModel):  # no extra="forbid": pydantic would drop an unknown key silently
    variant: Literal["paged", "contiguous"] = "paged"

class LenientAdapter:
    name = "lenient"
    Options = Options

    def build(self, options, *, device, dtype, seed):
        raise NotImplementedError
"""


def validate(path: Path) -> Result:
    return CliRunner().invoke(cli, ["validate", str(path)])


def manifest(tmp: Path, options: str, adapter: str = "tinylm") -> Path:
    path = tmp / "m.yaml"
    text = TINYLM.read_text().replace(
        "adapter: tinylm\n    options: {engine: kv-cache}", f"adapter: {adapter}\n    options: {options}"
    )
    assert options in text
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ("{engine: kv-cach}", "subject.candidate.options.engine: Input should be 'kv-cache' or 'recompute'"),
        ("{engine: kv-cache, bug: positions-restrat}", "subject.candidate.options.bug: Input should be 'none'"),
        ("{engin: kv-cache}", "subject.candidate.options.engin: unknown key 'engin' (did you mean 'engine'?)"),
    ],
)
def test_a_typo_in_a_plugin_option_is_a_located_error_exit_2(tmp_path: Path, options: str, said: str) -> None:
    path = manifest(tmp_path, options)
    result = validate(path)
    assert result.exit_code == 2, result.output
    assert f"{path}:14:" in result.output and said in result.output


def test_the_correct_plugin_options_validate() -> None:
    result = validate(TINYLM)
    assert result.exit_code == 0 and f"{TINYLM}: ok" in result.output, result.output


@pytest.fixture
def lenient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A real distribution on sys.path registering an adapter whose Options forgot extra="forbid"."""
    root = tmp_path / "site"
    (root / "lenient_pkg").mkdir(parents=True)
    (root / "lenient_pkg" / "__init__.py").write_text(textwrap.dedent(LENIENT))
    info = root / "gate_plugin_lenient-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gate-plugin-lenient\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[gate.adapters]\nlenient = lenient_pkg:LenientAdapter\n")
    monkeypatch.syspath_prepend(str(root))
    registry._group.cache_clear()
    yield
    monkeypatch.undo()
    registry._group.cache_clear()


def test_a_plugin_model_without_forbid_still_rejects_an_unknown_key(tmp_path: Path, lenient: None) -> None:
    ok = validate(manifest(tmp_path, "{variant: contiguous}", adapter="lenient"))
    assert ok.exit_code == 0, ok.output
    typo = validate(manifest(tmp_path, "{varaint: contiguous}", adapter="lenient"))
    assert typo.exit_code == 2, typo.output
    assert "subject.candidate.options.varaint: unknown key 'varaint' (did you mean 'variant'?)" in typo.output
    wrong = validate(manifest(tmp_path, "{variant: paged-v2}", adapter="lenient"))
    assert wrong.exit_code == 2 and "Input should be 'paged' or 'contiguous'" in wrong.output, wrong.output
