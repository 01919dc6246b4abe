"""The same correct configuration must get the same verdict every run: each llama.cpp example gated
several times in a row on one build, with its verdict, wall time, server starts, peak memory and the
candidate's measured noise floor per check (benchmarks/engines.md).

    python benchmarks/engine_builds.py --builds b11549 --install-only &&
      PATH=$PWD/.cache/engine-builds/2026.10.11549/bin:$PATH python benchmarks/engine_stability.py --runs 5

Exit 1 when any run's exit code differs from the example's documented verdict.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_llamacpp import EXAMPLES, EXIT, documented_verdict, server_starts
from engine_memory import run

ROOT = Path(__file__).resolve().parent.parent


def noise_words(record: dict[str, object] | None) -> str:
    """Each check's noise floor and the pairs that were not noise, in one cell."""
    cells = []
    for check in (record or {}).get("checks", []):  # type: ignore[attr-defined]
        evidence = check.get("evidence") or {}
        floor = evidence.get("noise_floor") or (evidence.get("correctness") or {}).get("noise_floor")
        if floor:
            defects = f", {len(floor['defects'])} not noise" if floor.get("defects") else ""
            cells.append(f"{check['check'].removeprefix('engine-')} {floor['floor']:.2g}{defects}")
    return "; ".join(cells) or "not measured"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--examples", help=f"comma-separated; default all: {', '.join(EXAMPLES)}")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "engines.md"))
    args = parser.parse_args()
    names = args.examples.split(",") if args.examples else EXAMPLES
    server = shutil.which("llama-server") or "not on PATH"
    env = {**os.environ, "GATE_THREADS": "1", "OMP_NUM_THREADS": "1"}
    lines = [
        "# The same configuration, the same verdict: llama.cpp examples run again and again",
        "",
        f"`python benchmarks/engine_stability.py --runs {args.runs}`, llama-server `{server}`, one thread per server,",
        f"on a {os.cpu_count()}-core machine. Each row is one `gate run`; the noise floor is what each check measured",
        "before judging replies under load (gate.checks._noise: 2 x the worst same-prompt move between batch",
        "compositions off the cache), with the pairs that were not noise (findings).",
        "",
        "| example | documented | run | exit | verdict | wall s | starts (checks + controls) | peak PSS GB "
        "| noise floor per check |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    wrong = []
    with tempfile.TemporaryDirectory(prefix="gate-stability-") as work:
        for name in names:
            manifest = ROOT / "examples" / f"{name}.yaml"
            documented = documented_verdict(manifest)
            for number in range(1, args.runs + 1):
                code, seconds, record, verdict, memory = run(manifest, Path(work) / f"{name}-{number}", env)
                if code != EXIT.get(documented):
                    wrong.append(f"{name} run {number}: exit {code}, documented {documented}")
                checks, controls = server_starts(record)
                lines.append(
                    f"| {name} | {documented} | {number} | {code} | {verdict.removeprefix('verdict: ')[:90]} | "
                    f"{seconds:.1f} | {checks} + {controls} | {memory.peak_pss_kib / 1048576:.2f} | "
                    f"{noise_words(record)} |"
                )
                print(lines[-1], flush=True)
    lines += ["", "Runs whose exit differs from the documented verdict: " + ("; ".join(wrong) or "none") + "."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
