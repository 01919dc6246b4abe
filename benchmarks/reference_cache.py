"""Time saved by the reference cache (gate.adapters.recorded.store) on a second run of a manifest.

    GATE_THREADS=1 python benchmarks/reference_cache.py [MANIFEST] [--table benchmarks/reference_cache.md]

Runs `gate run MANIFEST --reference-cache DIR` twice in fresh processes against an empty cache:
the first computes and stores every reference answer, the second reads them. Prints (and writes
with --table) wall time, answers read and computed, and the saving.
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


def run(manifest: Path, out: Path, cache: Path) -> tuple[float, dict[str, object]]:
    gate = Path(sys.executable).with_name("gate")
    started = time.perf_counter()
    proc = subprocess.run(
        [str(gate), "run", str(manifest), "--out", str(out), "--reference-cache", str(cache)],
        capture_output=True,
        text=True,
        env={**os.environ, "GATE_THREADS": os.environ.get("GATE_THREADS", "1")},
        check=False,
    )
    seconds = time.perf_counter() - started
    record = json.loads((out / "results.json").read_text())
    assert proc.returncode == record["exit_code"], proc.stderr[-2000:]
    return seconds, {"verdict": record["verdict"], **(record.get("baseline") or {})}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("manifest", nargs="?", default=str(REPO / "examples" / "reference-static-layout.yaml"))
    parser.add_argument("--table", type=Path)
    args = parser.parse_args()
    manifest = Path(args.manifest)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        first = run(manifest, Path(tmp) / "first", cache)
        second = run(manifest, Path(tmp) / "second", cache)
    rows = [("first run (empty cache)", first), ("second run (cache warm)", second)]
    saved = first[0] - second[0]
    lines = [
        f"# Reference cache: {manifest.name}",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, GATE_THREADS="
        f"{os.environ.get('GATE_THREADS', '1')}; wall time of `gate run --reference-cache` in a fresh process.",
        "",
        "| run | wall s | verdict | reference answers read | computed |",
        "|---|---|---|---|---|",
    ]
    for label, (seconds, info) in rows:
        read, computed = info.get("answers_read"), info.get("answers_computed")
        lines.append(f"| {label} | {seconds:.1f} | {info['verdict']} | {read} | {computed} |")
    lines += ["", f"Saved {saved:.1f} s ({100 * saved / first[0]:.0f} % of the first run)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.table:
        args.table.write_text(text)


if __name__ == "__main__":
    main()
