"""A 12-run matrix sequentially (-j 1), on the local pool with -j 2, and on a local Ray cluster.

    GATE_THREADS=1 python benchmarks/batch_pool.py [--matrix benchmarks/batch_matrix.yaml] [--no-ray]
        [--table benchmarks/batch_pool.md]

Each configuration is one real `gate run --matrix FILE --out DIR` in a fresh process (one torch
thread per run), timed wall to wall. The script then checks that every configuration gave the same
verdicts and byte-identical results.json files (wall-clock values blanked), and prints (and writes
with --table) the wall times, the ratio to the sequential run, the sum of the runs' own times, and
the load average of the machine before and after each configuration: on a shared machine the
ratio says as much about the neighbours as about the pool.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(matrix: Path, out: Path, extra: list[str]) -> dict[str, object]:
    gate = Path(sys.executable).with_name("gate")
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.run(
        [str(gate), "run", "--matrix", str(matrix), "--out", str(out), "-q", *extra],
        capture_output=True,
        text=True,
        env={**os.environ, "GATE_THREADS": os.environ.get("GATE_THREADS", "1"), "OMP_NUM_THREADS": "1"},
        check=False,
    )
    seconds = time.perf_counter() - started
    summary = json.loads((out / "summary.json").read_text())
    assert proc.returncode == summary["exit_code"], proc.stderr[-2000:]
    return {
        "seconds": seconds,
        "load": (load_before, os.getloadavg()[0]),
        "summary": summary,
        "run_seconds": sum(r["duration_s"] for r in summary["runs"]),
    }


def results(out: Path, summary: dict[str, object]) -> dict[str, object]:
    """Each run's results.json without its wall-clock values (gate.core.result.without_wall_clock)."""
    from gate.core.result import without_wall_clock

    runs = summary["runs"]
    assert isinstance(runs, list)
    return {r["name"]: without_wall_clock(json.loads((out / r["name"] / "results.json").read_text())) for r in runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=REPO / "benchmarks" / "batch_matrix.yaml")
    parser.add_argument("--no-ray", action="store_true", help="Leave the Ray cluster out.")
    parser.add_argument("--table", type=Path, help="Write the Markdown table here.")
    args = parser.parse_args()
    configs: list[tuple[str, list[str]]] = [("sequential (-j 1)", ["-j", "1"]), ("local pool -j 2", ["-j", "2"])]
    try:
        import ray  # noqa: F401

        if not args.no_ray:
            configs.append(("Ray, local cluster (2 CPUs)", ["--executor", "ray"]))
    except ImportError:
        print("ray is not installed: the Ray row is left out", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gate-batch-bench-") as tmp:
        reference: dict[str, object] | None = None
        verdicts: list[str] | None = None
        for label, extra in configs:
            out = Path(tmp) / "batch"  # one path for all: derived manifests are named by it in results.json
            measured = run(args.matrix, out, extra)
            summary = measured["summary"]
            assert isinstance(summary, dict)
            these = results(out, summary)
            names = [f"{r['name']}={r['verdict']}" for r in summary["runs"]]
            if reference is None:
                reference, verdicts = these, names
            identical = these == reference and names == verdicts
            print(
                f"{label}: {measured['seconds']:.1f} s, results identical to sequential: {identical}", file=sys.stderr
            )
            rows.append((label, measured, identical, summary))
    base = float(rows[0][1]["seconds"])  # type: ignore[arg-type]
    summary0 = rows[0][3]
    lines = [
        f"`python benchmarks/batch_pool.py` on {platform.machine()}, {os.cpu_count()} CPU cores (shared with other "
        f"jobs; load average shown), Python {platform.python_version()}, one torch thread per run. Matrix: "
        f"`{args.matrix.relative_to(REPO) if args.matrix.is_relative_to(REPO) else args.matrix}`, "
        f"{len(summary0['runs'])} runs ({summary0['summary']}).",
        "",
        "| configuration | wall s | vs sequential | sum of run times s | load avg before / after "
        "| same verdicts and results.json |",
        "|---|---:|---:|---:|---|---|",
    ]
    for label, measured, identical, _summary in rows:
        seconds = float(measured["seconds"])  # type: ignore[arg-type]
        load = measured["load"]
        assert isinstance(load, tuple)
        lines.append(
            f"| {label} | {seconds:.1f} | {base / seconds:.2f}x | {float(measured['run_seconds']):.1f} | "  # type: ignore[arg-type]
            f"{load[0]:.1f} / {load[1]:.1f} | {'yes' if identical else 'NO'} |"
        )
    per_run = sorted(rows[0][3]["runs"], key=lambda r: -r["duration_s"])
    lines += [
        "",
        "Cost per run, sequential (the pool can finish no sooner than its longest run plus one worker start):",
        "",
        "| run | verdict | s |",
        "|---|---|---:|",
        *(f"| {r['name']} | {r['verdict']} | {r['duration_s']:.1f} |" for r in per_run),
    ]
    table = "\n".join(lines) + "\n"
    print(table)
    if args.table:
        args.table.write_text(table)


if __name__ == "__main__":
    main()
