"""The speculative checks' negative controls against their own positive run, side by side with an older gate.

Each speculative example whose spec-greedy or spec-distribution check passes (so its controls run)
goes through the runner (`run_manifest`, the path `gate run` takes) several times in one process
per side, one torch thread; per check, the best positive run and the best of each control over the
repeats (the least disturbed by other load on the machine). The baseline is a git revision
exported with `git archive` and measured by this same script with that tree first on the path;
both sides alternate example by example, so they see the same load.

The table gives the positive run, the controls' total and their ratio, and each control's time and
outcome (which must agree between the sides).

    python benchmarks/spec_controls.py --baseline-rev main --out benchmarks/spec_controls.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = ("reference-spec-correct", "reference-spec-drop-bonus", "reference-spec-fault-residual-from-target")


def measure(example: str, repeats: int) -> dict[str, Any]:
    """Best positive run and best of each control per check over `repeats` runs, in this process."""
    import torch

    from gate.engine.runner import run_manifest

    torch.set_num_threads(1)
    best: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            result = run_manifest(REPO / "examples" / f"{example}.yaml", Path(tmp))
            for check in result.checks:
                if not check.controls:
                    continue
                row = best.setdefault(check.check, {"positive_s": float("inf"), "controls": {}})
                row["positive_s"] = min(row["positive_s"], check.positive_s or float("inf"))
                for control in check.controls:
                    old = row["controls"].get(control.fault, (float("inf"), ""))
                    row["controls"][control.fault] = (min(old[0], control.duration_s or 0.0), control.outcome.value)
    return best


def side(tree: Path, example: str, repeats: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "GATE_THREADS": "1", "OMP_NUM_THREADS": "1"}
    args = [sys.executable, __file__, "--measure", example, "--repeats", str(repeats)]
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
    measured: dict[str, Any] = json.loads(out.splitlines()[-1])
    return measured


def table(rows: list[tuple[str, str, str, dict[str, Any]]]) -> str:
    lines = [
        "| example | check | side | positive run s | controls s | controls / run | each control s (outcome) |",
        "|---|---|---|---|---|---|---|",
    ]
    for example, check, name, row in rows:
        total = sum(t for t, _ in row["controls"].values())
        each = ", ".join(f"{f} {t:.3f} ({o})" for f, (t, o) in row["controls"].items())
        lines.append(
            f"| {example} | {check} | {name} | {row['positive_s']:.3f} | {total:.3f} "
            f"| {total / row['positive_s']:.2f} | {each} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-rev", help="git revision to compare with (exported with git archive)")
    parser.add_argument("--examples", nargs="+", default=list(EXAMPLES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # one side, in this process: JSON on stdout
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.repeats)))
        return
    rows: list[tuple[str, str, str, dict[str, Any]]] = []
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this": REPO}
        if args.baseline_rev:
            git = ["git", "-C", str(REPO), "archive", args.baseline_rev]
            archive = subprocess.run(git, check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
            trees = {args.baseline_rev: Path(tmp), **trees}
        for example in args.examples:
            for name, tree in trees.items():
                for check, row in side(tree, example, args.repeats).items():
                    rows.append((example, check, name, row))
                    print(example, check, name, f"{row['positive_s']:.3f}", flush=True)
    load.append(os.getloadavg()[0])
    text = (
        f"`python benchmarks/spec_controls.py --baseline-rev {args.baseline_rev} --repeats {args.repeats}`: "
        f"one torch thread, best of {args.repeats} runs per side, load average {load[0]:.1f} before and "
        f"{load[1]:.1f} after.\n\n" + table(sorted(rows, key=lambda r: (r[0], r[1], r[2] == "this")))
    )
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
