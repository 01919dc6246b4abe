"""Cache geometry: read from vLLM's metrics page and from launch flags, sweeps planned on it, and
`gate plan` showing the geometry and the lengths below the first block."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from gate.adapters.openai.geometry import launch_geometry, served_dtype, vllm_cache_config
from gate.checks._engine import expected_hit, geometry_lengths, not_reusable
from gate.cli.main import cli
from tests.support.repo import REPO

METRICS = """# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="fp8",enable_prefix_caching="True",\
gpu_memory_utilization="0.9",num_cpu_blocks="None"} 1.0
vllm:num_requests_running{model_name="m"} 0.0
"""


def test_vllm_states_its_block_size_dtype_and_prefix_caching_on_its_metrics_page() -> None:
    labels = vllm_cache_config(METRICS)
    assert labels is not None
    assert labels["block_size"] == "16" and labels["cache_dtype"] == "fp8"
    assert labels["enable_prefix_caching"] == "True"
    assert vllm_cache_config("vllm:num_requests_running 0.0\n") is None


def test_launch_flags_state_the_geometry_before_a_run() -> None:
    vllm = launch_geometry(
        ["python", "-m", "vllm.entrypoints.openai.api_server", "--block-size", "32", "--kv-cache-dtype", "fp8"], "auto"
    )
    assert vllm is not None and vllm.block_size == 32 and vllm.cache_dtype == "fp8" and vllm.prefix_caching is None
    off = launch_geometry(["vllm", "serve", "m", "--no-enable-prefix-caching"], "vllm")
    assert off is not None and off.block_size is None and off.prefix_caching is False
    assert "GET /metrics" in off.source
    llama = launch_geometry(["llama-server", "-m", "x", "--no-cache-prompt"], "auto")
    assert llama is not None and llama.block_size == 1 and llama.prefix_caching is False
    assert launch_geometry(["text-generation-launcher"], "auto") is None


def test_sweeps_are_planned_on_the_block_edges() -> None:
    assert geometry_lengths(16, 1011, [1, 17, 200, 2048, 8192]) == [
        15,
        16,
        17,
        31,
        32,
        33,
        64,
        128,
        200,
        256,
        512,
        1011,
    ]
    assert geometry_lengths(1, 1000, [1, 17, 200, 2048]) == [1, 17, 200, 1000]
    assert geometry_lengths(None, 100, [1, 17, 200]) == [1, 17, 100]
    assert not_reusable(16, [15, 16, 17]) == [15] and not_reusable(1, [1, 2]) == []
    assert expected_hit(16, 33) == 32 and expected_hit(128, 127) == 0 and expected_hit(None, 5) is None


def test_gate_plan_shows_the_geometry_and_the_lengths_it_produced() -> None:
    result = CliRunner().invoke(cli, ["plan", str(REPO / "examples/engine-vllm-prefix.yaml")])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if "lengths:" in x and "planned on" in x)
    assert "wanted 31, 32, 33, 63, 64, 65, 128, 200" in line
    assert "planned on block 32" in line and "not reusable by design (below the first block): 31" in line


def test_gate_plan_on_llama_cpp_keeps_the_given_lengths(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["plan", str(REPO / "examples/engine-llamacpp-prefix.yaml")])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if "lengths:" in x)
    assert "wanted 1, 17, 200, 2048, 8192" in line and "not reusable" not in line


class _Blocks:
    """An engine that reuses whole blocks of `block` tokens of the last prompt's prefix."""

    def __init__(self, block: int) -> None:
        self.block = block
        self.last: list[int] = []

    def complete(self, prompt: list[int], max_tokens: int, top_k: int, extra: object = None) -> object:
        common = next((i for i, (a, b) in enumerate(zip(prompt, self.last, strict=False)) if a != b), 0)
        self.last = prompt
        return type("C", (), {"cached_tokens": common // self.block * self.block})()


def test_the_probe_measures_the_block_from_the_reported_hits() -> None:
    from gate.checks._engine import probe_block

    for block in (1, 16, 32, 128):
        measured, words = probe_block(_Blocks(block), 512, 1000)  # type: ignore[arg-type]
        assert measured == block, words
    assert probe_block(_Blocks(1024), 512, 1000)[0] is None


def test_the_dtype_a_vllm_server_computes_in_is_read_from_its_engine_config_line() -> None:
    # vLLM 0.32.0 on a CPU, --dtype left at auto for a float32 model: the args line says auto, the engine
    # config line says what it resolved to, and that rounding is what the checks must allow
    log = (
        "(APIServer pid=8100) INFO [utils.py:233] non-default args: {'model': '/tmp/m', 'dtype': 'auto'}\n"
        "(EngineCore pid=8245) INFO 12-07 03:32:51 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
        "model='/tmp/m', speculative_config=None, tokenizer='/tmp/m', dtype=torch.bfloat16, max_seq_len=8192\n"
    )
    assert served_dtype("vllm", log) == "bfloat16"
    assert served_dtype("vllm", log.replace("bfloat16", "float32")) == "float32"
    assert served_dtype("vllm", log.splitlines()[0]) is None  # only the requested dtype: not stated
    assert served_dtype("llama.cpp", log) is None  # another engine's log says nothing of its own
