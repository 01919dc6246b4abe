"""llama.cpp's server from a prebuilt xllamacpp wheel (gate/adapters/openai/xllamacpp_server.py): the
command line it maps (always), and one build launched through its `llama-server` wrapper as gate
launches an engine (marked `engine`; skipped, with the reason, when no build is installed in
.cache/engine-builds/ or named by GATE_XLLAMACPP_BUILD)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gate._util.stopping import stop_all
from gate.adapters.openai import Options
from gate.adapters.openai.path import EnginePath
from gate.adapters.openai.xllamacpp_params import UsageError, configure, parse
from gate.adapters.openai.xllamacpp_server import build_number, installed_version, write_wrapper
from tests.support.repo import REPO


def test_the_last_of_a_repeated_flag_wins_and_values_convert() -> None:
    # a control's args come after the launch's, and llama-server takes the last: so does the launcher
    settings = parse(["-m", "m.gguf", "-np", "5", "--cache-prompt", "-c", "1", "--ctx_size", "4096", "-np", "1"])
    assert settings == {"model.path": "m.gguf", "n_parallel": 1, "cache_prompt": True, "n_ctx": 4096}
    assert parse(["-m", "m.gguf", "--cache-prompt", "--no-cache-prompt", "-fa", "off"])["cache_prompt"] is False
    # the context checkpoints' count and spacing (the aimed workload's checkpoint-interval, gate/checks/_mechanisms.py)
    spaced = parse(["-m", "m.gguf", "--ctx-checkpoints", "8", "--checkpoint-min-step", "256"])
    assert (spaced["n_ctx_checkpoints"], spaced["checkpoint_min_step"]) == (8, 256)


def test_speculative_flags_are_mapped_per_build() -> None:
    # speculative decoding without a draft model (examples/engine-llamacpp-speculative.yaml): b8672 to
    # b9093 hold one `speculative.type`, later builds a list `speculative.types`
    assert parse(["-m", "m.gguf", "--spec-type", "ngram-mod"])["speculative.type"] == "ngram-mod"
    if BUILD is None:
        pytest.skip("no xllamacpp build installed: python benchmarks/engine_builds.py --builds b11549 --install-only")
    import importlib
    import sys

    version = installed_version(BUILD)
    sys.path.insert(0, str(BUILD))
    try:
        xllamacpp = importlib.import_module("xllamacpp")
        params = configure(xllamacpp, parse(["-m", "m.gguf", "--spec-type", "ngram-mod"]), version)
        spec = params.speculative
        chosen = list(spec.types) if hasattr(spec, "types") else [spec.type]
        assert [t.name for t in chosen] == ["COMMON_SPECULATIVE_TYPE_NGRAM_MOD"]
        with pytest.raises(UsageError, match=r"--spec-type: 'ngram-nope' is not one of .*ngram-mod") as caught:
            configure(xllamacpp, parse(["-m", "m.gguf", "--spec-type", "ngram-nope"]), version)
        assert "count" not in str(caught.value)
        # a draft model alone: llama-server drafts with it (draft, or draft-simple on newer builds)
        argv = ["-m", "m.gguf", "-md", "d.gguf", "--draft-max", "4", "--draft-min", "0"]
        spec = configure(xllamacpp, parse(argv), version).speculative
        draft = spec.draft if hasattr(spec, "draft") else spec
        model = draft.mparams if hasattr(draft, "mparams") else draft.mparams_dft
        assert (model.path, draft.n_max, draft.n_min) == ("d.gguf", 4, 0)
        chosen = list(spec.types) if hasattr(spec, "types") else [spec.type]
        assert [t.name for t in chosen] in (["COMMON_SPECULATIVE_TYPE_DRAFT"], ["COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE"])
    finally:
        sys.path.remove(str(BUILD))


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["-m", "m.gguf", "--mlock"], "unsupported llama-server flag '--mlock'"),
        (["-m", "m.gguf", "extra"], "unsupported argument 'extra'"),
        (["-m", "m.gguf", "--port=8080"], "unsupported llama-server flag '--port=8080'"),  # as llama-server
        (["-m", "m.gguf", "--port"], "--port needs a value"),
        (["-m", "m.gguf", "--port", "eighty"], "llama-server flag --port: invalid literal"),
        (["-m", "m.gguf", "-fa", "maybe"], "-fa: 'maybe' is not on, off or auto"),
        (["-m", "m.gguf", "--slot-save-path", "/nowhere/at/all"], "'/nowhere/at/all' is not a directory"),
        (["--port", "8080"], "no model"),
    ],
)
def test_what_it_cannot_map_is_refused_never_dropped(argv: list[str], says: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse(argv)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_the_build_number_is_the_versions_third_part() -> None:
    assert build_number("2026.4.8672.1") == 8672 and build_number("2026.10.11549") == 11549
    with pytest.raises(UsageError, match=r"not YEAR\.MONTH\.BUILD"):
        build_number("0.2.14")


def installed_build() -> Path | None:
    """GATE_XLLAMACPP_BUILD, else the newest build in .cache/engine-builds/ (benchmarks/engine_builds.py)."""
    named = os.environ.get("GATE_XLLAMACPP_BUILD")
    candidates = [Path(named)] if named else sorted((REPO / ".cache" / "engine-builds").glob("20*"))
    found = []
    for folder in candidates:
        try:
            found.append((build_number(installed_version(folder)), folder))
        except UsageError:
            continue
    return max(found)[1] if found else None


BUILD = installed_build()
needs_build = pytest.mark.skipif(
    BUILD is None,
    reason="no xllamacpp build installed: python benchmarks/engine_builds.py --builds b11549 --install-only",
)


@pytest.fixture
def wrapper(tmp_path: Path) -> Path:
    assert BUILD is not None
    return write_wrapper(BUILD, tmp_path / "bin")


@pytest.mark.engine
@pytest.mark.xllamacpp
@needs_build
def test_a_build_serves_as_llama_server_and_says_which_build_it_is(wrapper: Path) -> None:
    assert BUILD is not None
    build = build_number(installed_version(BUILD))
    options = Options.model_validate(
        {
            "flavor": "auto",
            "launch": {
                "command": [
                    str(wrapper),
                    "-m",
                    "{model}",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "{port}",
                    "-c",
                    "2048",
                    "-np",
                    "1",
                    "-t",
                    "1",
                    "-tb",
                    "1",
                    "--cache-prompt",
                    "--no-webui",
                    "-fa",
                    "off",
                ],
                "tiny_model": {"seed": 0, "context_length": 2048},
                "ready_timeout_s": 60,
            },
        }
    )
    path = EnginePath.probe(options, dtype="float32", seed=0)
    # the identity gate records (GET /props build_info): the wheel's own build number, not b0-unknown
    assert str(path.discovered["engine_version"]).startswith(f"b{build}")
    assert (path.flavor, path.vocab_size, path.max_len) == ("llama.cpp", 512, 2048)
    with path.serve() as served:
        prompt = list(range(10, 74))
        first = served.complete(prompt, 8, 5)
        again = served.complete(prompt, 8, 5)
        server = served.server
    assert len(first.tokens) == 8 and all(lp <= 0 for lp in first.logprobs)
    assert first.cached_tokens == 0 and again.cached_tokens == len(prompt) - 1 and again.tokens == first.tokens
    assert server is not None and server.proc is not None
    # named as the compiled server is, so `pgrep -x llama-server` (.ci/engine.sh) finds it
    assert Path(f"/proc/{server.proc.pid}/comm").read_text().strip() == "llama-server"
    stop_all()
    assert server.exit_status() == 0  # SIGTERM ends it cleanly


@pytest.mark.engine
@pytest.mark.xllamacpp
@needs_build
def test_the_wrapper_refuses_an_unmapped_flag_with_exit_2(wrapper: Path) -> None:
    done = subprocess.run([str(wrapper), "-m", "m.gguf", "--mlock"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "unsupported llama-server flag '--mlock'" in done.stderr
    assert BUILD is not None
    version = installed_version(BUILD)
    said = subprocess.run([str(wrapper), "--version"], capture_output=True, text=True, timeout=60)
    assert (said.returncode, said.stdout) == (0, f"version: {build_number(version)} (xllamacpp {version})\n")
