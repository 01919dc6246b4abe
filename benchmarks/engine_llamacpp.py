"""Gate llama.cpp's own server end to end and write the results table (benchmarks/engine_llamacpp.md).

    make engine && PATH=$PWD/.cache/engine:$PATH python benchmarks/engine_llamacpp.py
    python benchmarks/engine_builds.py --builds b11549 --install-only &&
      PATH=$PWD/.cache/engine-builds/2026.10.11549/bin:$PATH python benchmarks/engine_llamacpp.py   # prebuilt (CI)

Runs the llama.cpp examples through `gate run` (each in its own process, one thread), checks each
exit code against the example's documented verdict, and records: the llama-server on PATH (`make
engine`'s build: its version and compile time; an xllamacpp wrapper: its version), each run's wall
time, verdict, server starts, most servers alive at once and peak memory (benchmarks/engine_memory.py),
each check's status, time and controls, and the prefix sweep per length (reused tokens, max
|Δlogprob|, request times of the cached and the uncached server). `--flash-attention` also runs the
prefix example with flash attention on in both servers, to record how far the CPU kernel moves
logprobs between the cached and the uncached computation.
Exit 1 when a verdict differs from the documented one.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_memory import peak_alive, run

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = [
    "engine-llamacpp-prefix",
    "engine-llamacpp-defaults",
    "engine-llamacpp-quantised-kv",
    "engine-llamacpp-hosted",
    "engine-llamacpp-sliding-window",
    "engine-llamacpp-sliding-window-defaults",
]
EXIT = {"pass": 0, "fail": 1, "error": 14}


def documented_verdict(manifest: Path) -> str:
    """An example's documented verdict: its first line, `# gate-expect: VERDICT`."""
    return re.match(r"# gate-expect: (\w+)", manifest.read_text()).group(1)  # type: ignore[union-attr]


def check_rows(record: dict[str, object]) -> list[str]:
    rows = ["| check | status | seconds | controls | message |", "| --- | --- | --- | --- | --- |"]
    for c in record["checks"]:  # type: ignore[attr-defined]
        controls = ", ".join(f"{k['fault']}: {k['outcome']}" for k in c["controls"]) or "none named"
        message = c["message"].replace("|", "/")
        message = message if len(message) <= 220 else message[:219] + "…"
        rows.append(f"| {c['check']} | {c['status']} | {c['duration_s']:.1f} | {controls} | {message} |")
    return rows


def server_starts(node: object) -> tuple[int, int]:
    """The servers the run started, (for checks, for controls): the run's own record (`servers`, written
    once every check and control is done), else the most any server's evidence says it had started."""
    if isinstance(node, dict) and isinstance(node.get("servers"), dict):
        return int(node["servers"]["checks"]), int(node["servers"]["controls"])
    found = [(0, 0)]
    if isinstance(node, dict):
        count = node.get("engine_starts_in_run")
        if isinstance(count, dict):
            found.append((int(count["checks"]), int(count["controls"])))
        found += [server_starts(value) for value in node.values()]
    elif isinstance(node, list):
        found += [server_starts(value) for value in node]
    return max(found)


def length_rows(record: dict[str, object]) -> list[str]:
    parity = next((c for c in record["checks"] if c["check"] == "engine-prefix-parity"), None)  # type: ignore[attr-defined]
    if parity is None:  # the hosted example runs engine-repeat-consistency only
        return []
    rows = [
        "| prefix length | cached tokens (candidate) | cached tokens (reference) | greedy tokens match | "
        "max abs dlogprob | candidate s | reference s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in parity["evidence"].get("lengths", []):
        rows.append(
            f"| {r['prefix_length']} | {r['cached_tokens']} | {r['reference_cached_tokens']} | {r['tokens_match']} | "
            f"{r['max_abs_dlogprob']:.3g} | {r['candidate_s']:.3f} | {r['reference_s']:.3f} |"
        )
    return rows


def flash_attention_variant(manifest: Path, work: Path) -> Path:
    data = yaml.safe_load(manifest.read_text())
    for role in ("reference", "candidate"):
        command = data["subject"][role]["options"]["launch"]["command"]
        i = command.index("-fa")
        command[i + 1] = "on"
    data["name"] += "-flash-attention"
    target = work / "engine-llamacpp-prefix-flash-attention.yaml"
    target.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


def describe_server(found: str | None) -> str:
    """Which llama-server the table is of: `make engine`'s build (its sdist and compile time) or a
    prebuilt xllamacpp wrapper (benchmarks/engine_builds.py; its version)."""
    engine = ROOT / ".cache" / "engine"
    if found is None:
        return "llama-server: none on PATH."
    server = Path(found)
    if server.resolve() == (engine / "llama-server").resolve():
        version_file, seconds_file = engine / "llama-server.version", engine / "llama-server.build-seconds"
        version = version_file.read_text().split()[0] if version_file.exists() else "?"
        build = seconds_file.read_text().split() if seconds_file.exists() else ["?", "?"]
        return f"llama-server built from {version} (`make engine`): {build[0]} s with {build[1]} compile jobs here."
    stamp = re.search(r"xllamacpp==(\S+) \(llama.cpp (b\d+)\)", server.read_text(errors="replace")[:400])
    if stamp:
        return (
            f"llama-server: llama.cpp {stamp.group(2)} prebuilt (xllamacpp {stamp.group(1)} CPU wheel, "
            "benchmarks/engine_builds.py; no compile)."
        )
    return f"llama-server: {server}."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "engine_llamacpp.md")
    parser.add_argument("--flash-attention", action="store_true", help="also run the prefix example with -fa on")
    args = parser.parse_args()
    env = {**os.environ, "GATE_THREADS": "1", "OMP_NUM_THREADS": "1"}
    work = Path("/tmp/gate-engine-benchmark")
    work.mkdir(parents=True, exist_ok=True)
    server_line = describe_server(shutil.which("llama-server"))
    lines = [
        "# gate against llama.cpp's server (CPU)",
        "",
        server_line,
        "Model: gate's tiny seeded Llama (2 layers, 2 heads of 32 over 1 KV head, vocabulary 512, context 8192, "
        "float32 GGUF). One thread per server; both servers on 127.0.0.1. "
        f"Measured {time.strftime('%Y-%m-%d')} by `benchmarks/engine_llamacpp.py`.",
        "",
        "Server starts: the most any server's evidence reports (`engine_starts_in_run`), for the checks and for",
        "their controls; a server is started once per path, launch and run (docs/engines.md). Peak alive:",
        "`engine_servers_alive_peak`; peak PSS: the largest sum of the proportional set size of gate and its",
        "servers, sampled every half second.",
        "",
        "| example | documented | exit | verdict | seconds | server starts (checks + controls) | peak alive "
        "| peak PSS GB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    details: list[str] = []
    mismatched = []
    for name in EXAMPLES:
        manifest = ROOT / "examples" / f"{name}.yaml"
        documented = documented_verdict(manifest)
        code, seconds, record, verdict, memory = run(manifest, work / name, env)
        if code != EXIT.get(documented):
            mismatched.append(f"{name}: exit {code}, documented {documented}")
        checks, controls = server_starts(record)
        lines.append(
            f"| {name} | {documented} | {code} | {verdict} | {seconds:.1f} | {checks} + {controls} | "
            f"{peak_alive(record)} | {memory.peak_pss_kib / 1048576:.2f} |"
        )
        print(lines[-1], flush=True)
        if record is not None:
            details += ["", f"## {name}", "", *check_rows(record), "", *length_rows(record)]
    if args.flash_attention:
        variant = flash_attention_variant(ROOT / "examples" / "engine-llamacpp-prefix.yaml", work)
        code, seconds, record, verdict, memory = run(variant, work / variant.stem, env)
        checks, controls = server_starts(record)
        lines.append(
            f"| {variant.stem} (flash attention on, both servers) | - | {code} | {verdict} | {seconds:.1f} "
            f"| {checks} + {controls} | {peak_alive(record)} | {memory.peak_pss_kib / 1048576:.2f} |"
        )
        print(lines[-1], flush=True)
        if record is not None:
            details += [
                "",
                "## engine-llamacpp-prefix with flash attention on (both servers)",
                "",
                "With flash attention llama.cpp casts a float32 K and V cache to half precision before the attention "
                "op (src/llama-graph.cpp), so the cached and the uncached computation of the same float32 model "
                "differ by more than float32 rounding; greedy tokens still agree, but the logprob drift goes beyond "
                "twice the float32 tolerance, which breaks a tolerance claim. The examples turn flash attention off.",
                "",
                *length_rows(record),
            ]
    args.out.write_text("\n".join(lines + details) + "\n")
    for line in mismatched:
        print(f"engine benchmark: {line}", file=sys.stderr)
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
