"""What the invariant checks (quant-invariants, evict-invariants) add to a lossy example's run.

    python benchmarks/lossy_cost.py                          # every lossy example, 3 rounds
    python benchmarks/lossy_cost.py --only reference-quant-int8 reference-evict-sink --reps 3
    python benchmarks/lossy_cost.py --kvpress-python /work/main/.venv-kvpress/bin/python

A lossy example is one of examples/*.yaml whose intervention is quantisation or eviction and whose
adapters are `reference` or `hf`. The kvpress ones (candidate `path: kvpress`) run with
--kvpress-python (the environment `bash .ci/kvpress.sh --prepare` makes); without it they are left
out. Each round runs every example once (`gate run`, its own process, one thread), so the examples
are interleaved and a busy spell of the shared machine falls on all of them alike. For each run:
the wall time of the whole `gate run` (process start to exit), the invariant check's own
`duration_s` in results.json (its positive run plus every control), and the ratio the budget is
about, what the check adds to the run without it: invariants / (wall - invariants). The target
(issue 47): at most 0.20. The table goes to --out (default benchmarks/lossy-cost.md) with the
median and the spread (min-max) of each example's ratios, the verdicts of every round (they must
not change between rounds) and the machine's state before and after. Exit 1 where a median ratio
is over the target or an example's verdict differed between rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
INVARIANT_CHECKS = ("quant-invariants", "evict-invariants")
LOSSY = ("quantisation", "eviction")
TARGET = 0.20
NO_RESULTS = {2: "rejected", 3: "error"}
"""A run that writes no results.json: its verdict by its exit code (gate/errors.py)."""


def lossy_examples() -> list[tuple[str, bool]]:
    """(name, needs kvpress) of every lossy example whose subjects run in-process (reference, hf)."""
    found = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        manifest = yaml.safe_load(path.read_text())
        subject = manifest.get("subject", {})
        sides = [subject.get("reference", {}), subject.get("candidate", {})]
        if manifest.get("intervention") not in LOSSY:
            continue
        if any(side.get("adapter") not in ("reference", "hf") for side in sides):
            continue
        kvpress = any((side.get("options") or {}).get("path") == "kvpress" for side in sides)
        found.append((path.stem, kvpress))
    return found


def machine_state() -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"load average {load} (1, 5, 15 min), {os.cpu_count()} CPUs seen"


def run_once(name: str, python: str, work: Path, rep: int) -> dict[str, object]:
    out = work / f"{name}-r{rep}"
    command = [python, "-m", "gate", "run", f"examples/{name}.yaml", "--out", str(out), "--threads", "1", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GATE_THREADS": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("GATE_LEDGER", None)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    checks = {c["check"]: c for c in results.get("checks", [])}
    invariant = next((checks[c] for c in INVARIANT_CHECKS if c in checks), None)
    inv_s = float(invariant["duration_s"]) if invariant else 0.0
    return {
        "example": name,
        "round": rep,
        "exit": done.returncode,
        "verdict": results.get("verdict"),
        "check": invariant["check"] if invariant else None,
        "check_status": invariant["status"] if invariant else None,
        "controls": [(c["fault"], c["outcome"]) for c in invariant["controls"]] if invariant else [],
        "wall_s": wall,
        "checks_s": sum(float(c["duration_s"] or 0.0) for c in checks.values()),
        "invariants_s": inv_s,
        "ratio": inv_s / (wall - inv_s) if invariant else None,
        "stderr_tail": done.stderr[-400:] if not results else "",
    }


def documented(name: str) -> str:
    """The verdict the example's header documents for the main environment (benchmarks/examples.py)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from examples import expected_verdict

    return str(expected_verdict(ROOT / "examples" / f"{name}.yaml"))


def _num(row: dict[str, object], key: str) -> float:
    return float(row[key])  # type: ignore[arg-type]


def table(rows: list[dict[str, object]], names: list[str]) -> list[str]:
    head = "| example | check (its status) | verdict, every round | documented (main env.) | runs |"
    head += " wall, median (s) | invariants, median (s) | ratio added, median | spread (min-max) | within 20 % |"
    lines = [head, "|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    for name in names:
        mine = [r for r in rows if r["example"] == name]
        verdicts = " / ".join(
            sorted({f"{r['verdict'] or NO_RESULTS.get(int(str(r['exit'])), 'none')} (exit {r['exit']})" for r in mine})
        )
        ratios = [_num(r, "ratio") for r in mine if r["ratio"] is not None]
        status = ", ".join(sorted({f"{r['check']} ({r['check_status']})" for r in mine if r["check"]})) or "none run"
        wall = statistics.median(_num(r, "wall_s") for r in mine)
        cells = f"| {name} | {status} | {verdicts} | {documented(name)} | {len(mine)} | {wall:.1f} "
        if not ratios:
            lines.append(cells + "| - | - | - | - |")
            continue
        median = statistics.median(ratios)
        inv = statistics.median(_num(r, "invariants_s") for r in mine)
        within = "yes" if median <= TARGET else "**no**"
        lines.append(cells + f"| {inv:.2f} | {median:.4f} | {min(ratios):.4f}-{max(ratios):.4f} | {within} |")
    return lines


def write(
    out: Path,
    args: argparse.Namespace,
    rows: list[dict[str, object]],
    names: list[str],
    left_out: list[str],
    before: str,
    rounds: int,
) -> None:
    import torch
    import transformers

    command = ["python benchmarks/lossy_cost.py", f"--reps {args.reps}"]
    command += ["--only", *args.only] if args.only else []
    command += ["--kvpress-python", args.kvpress_python] if args.kvpress_python else []
    lines = [
        "# What the invariant checks add to a lossy example's run",
        "",
        "Target (issue 47): `quant-invariants` / `evict-invariants` add at most 20 % to a lossy example's",
        "run. Ratio added = the check's own `duration_s` in results.json (its run and every control) /",
        "(wall time of the whole `gate run` - that), per run; the two come from the same run, so the",
        "shared machine's load falls on both. Rounds interleaved: each round runs every example once.",
        "",
        "    " + " ".join(command),
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}, "
        f"transformers {transformers.__version__} (kvpress examples: their own environment), one torch thread "
        f"per run; {rounds} of {args.reps} rounds done; before: {before}; after: {machine_state()}.",
        "",
        *table(rows, names),
        "",
    ]
    if left_out:
        lines += [f"Left out (kvpress, no --kvpress-python): {', '.join(left_out)}.", ""]
    lines += [
        "Every run:",
        "",
        "| round | example | exit | wall (s) | all checks (s) | invariants (s) | ratio | controls |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        controls = ", ".join(f"{f}: {o}" for f, o in r["controls"])  # type: ignore[attr-defined]
        ratio = "-" if r["ratio"] is None else f"{_num(r, 'ratio'):.4f}"
        times = f"{_num(r, 'wall_s'):.1f} | {_num(r, 'checks_s'):.1f} | {_num(r, 'invariants_s'):.2f}"
        lines.append(f"| {r['round']} | {r['example']} | {r['exit']} | {times} | {ratio} | {controls} |")
    out.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="example names (without .yaml); default every lossy example")
    parser.add_argument("--reps", type=int, default=3, help="rounds; each runs every example once")
    parser.add_argument("--kvpress-python", help="the python of .venv-kvpress, for the kvpress examples")
    parser.add_argument("--work", default="/tmp/gate-lossy-cost", help="where the runs go")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "lossy-cost.md"))
    parser.add_argument(
        "--from-rows", nargs="*", help="write the table from saved WORK/rows.json files, running nothing"
    )
    args = parser.parse_args()
    if args.from_rows:
        saved: list[dict[str, object]] = [row for f in args.from_rows for row in json.loads(Path(f).read_text())]
        order = list(dict.fromkeys(str(r["example"]) for r in saved))
        rounds = max(int(str(r["round"])) for r in saved)
        write(Path(args.out), args, saved, order, [], "(per run: see the notes)", rounds=rounds)
        print(f"wrote {args.out}")
        return 0
    examples = [(n, k) for n, k in lossy_examples() if not args.only or n in args.only]
    if args.only and len(examples) != len(args.only):
        known = {n for n, _ in lossy_examples()}
        print(f"--only: not lossy examples: {sorted(set(args.only) - known)}", file=sys.stderr)
        return 2
    left_out = [n for n, k in examples if k and not args.kvpress_python]
    examples = [(n, k) for n, k in examples if n not in left_out]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    before = machine_state()
    rows: list[dict[str, object]] = []
    names = [n for n, _ in examples]
    for rep in range(1, args.reps + 1):
        for name, kvpress in examples:
            python = args.kvpress_python if kvpress else sys.executable
            row = run_once(name, str(python), work, rep)
            rows.append(row)
            print(json.dumps(row), flush=True)
            (work / "rows.json").write_text(json.dumps(rows, indent=1))
        # the table after every round: a round cut short still leaves the finished ones written
        write(Path(args.out), args, rows, names, left_out, before, rounds=rep)
    print(f"wrote {args.out}")
    over = [
        n
        for n in names
        if (rs := [_num(r, "ratio") for r in rows if r["example"] == n and r["ratio"] is not None])
        and statistics.median(rs) > TARGET
    ]
    changed = [n for n in names if len({r["verdict"] for r in rows if r["example"] == n}) > 1]
    for n in over:
        print(f"{n}: the invariant check adds more than {TARGET:.0%}", file=sys.stderr)
    for n in changed:
        print(f"{n}: the verdict changed between rounds", file=sys.stderr)
    return 1 if over or changed else 0


if __name__ == "__main__":
    sys.exit(main())
