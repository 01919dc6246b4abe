"""Every reference example's full default plan, timed, and side by side with an older gate.

Each example runs as `gate run --profile` in its own process with one torch thread, first on a
baseline source tree (a git revision exported with `git archive`) and then on this checkout, one
after the other, so both see the same machine load. CPU seconds (user + system of the child)
are the headline: on a shared machine they move far less than wall time. The table gives, per
example: verdict on both sides (they must agree), CPU and wall seconds on both sides and their
ratio, the branch's time outside model forward passes, and the worst ratio of a passing check's
controls to its own positive run.

With --profile the branch side also splits each example's check time into three buckets (model
forwards, the subject's other work inside its call regions, gate's own work; gate.engine.profile),
and a second table lists every passing check whose controls cost more than half of its positive
run, with the absolute numbers and whether a single control already costs more than that half.
The load average is sampled before each run and reported in the header.

    python benchmarks/pr_budget.py --baseline-rev 5f7f629 --out benchmarks/pr_budget.md
    python benchmarks/pr_budget.py --only-branch --profile --out benchmarks/pr_budget_profile.md
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def export(rev: str, into: Path) -> Path:
    """The tree of `rev` as plain files (no worktree registered)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run(tree: Path, example: Path, out: Path, profile: bool = False) -> dict[str, Any]:
    """One `gate run` of `example` with the gate package from `tree`: verdict, times, profile."""
    env = {**os.environ, "PYTHONPATH": str(tree), "GATE_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("GATE_LEDGER", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from gate.cli.main import cli; cli()",
            "run",
            str(example),
            "--out",
            str(out),
            *(["--profile"] if profile else []),
        ],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    row: dict[str, Any] = {
        "exit": proc.returncode,
        "wall": wall,
        "cpu": cpu,
        "outside": None,
        "buckets": None,
        "controls_ratio": None,
        "controls_ratio_heavy": None,
        "heavy_controls": [],
    }
    results = out / "results.json"
    if not results.exists():
        row["verdict"] = "rejected" if proc.returncode == 2 else f"no result (exit {proc.returncode})"
        return row
    data = json.loads(results.read_text())
    row["verdict"] = data["verdict"]
    checks = data["checks"]
    total = sum(c["duration_s"] for c in checks)
    forward = sum(c.get("forward_s") or 0.0 for c in checks)
    row["checks_s"] = total
    timed = bool(checks) and checks[0].get("forward_s") is not None
    row["outside"] = (total - forward) / total if timed and total else None
    if timed and total:
        subject = sum(c.get("subject_s") or 0.0 for c in checks)  # absent on a gate without the bucket
        row["buckets"] = (forward / total, subject / total, (total - forward - subject) / total)
    for c in checks:
        positive = c.get("positive_s") or 0.0  # absent from the records of a gate before control times
        spent = sum(k.get("duration_s") or 0.0 for k in c["controls"])
        if c["status"] == "pass" and c["controls"] and positive and spent > positive / 2:
            cheapest = min(k.get("duration_s") or 0.0 for k in c["controls"])
            row["heavy_controls"].append(
                {
                    "check": c["check"],
                    "positive_s": positive,
                    "controls_s": spent,
                    "controls": len(c["controls"]),
                    "cheapest_s": cheapest,
                    "slowest": max(c["controls"], key=lambda k: k.get("duration_s") or 0.0)["fault"],
                    "slowest_s": max(k.get("duration_s") or 0.0 for k in c["controls"]),
                }
            )
    ratios = [
        sum(k["duration_s"] for k in c["controls"]) / c["positive_s"]
        for c in checks
        if c["status"] == "pass" and c["controls"] and c.get("positive_s")
    ]
    row["controls_ratio"] = max(ratios) if ratios else None
    heavy = [
        sum(k["duration_s"] for k in c["controls"]) / c["positive_s"]
        for c in checks
        if c["status"] == "pass" and c["controls"] and (c.get("positive_s") or 0) >= 1.0
    ]
    row["controls_ratio_heavy"] = max(heavy) if heavy else None
    row["checks"] = {c["check"]: round(c["duration_s"], 2) for c in checks}
    row["passing_with_controls"] = sum(1 for c in checks if c["status"] == "pass" and c["controls"])
    return row


def buckets(split: tuple[float, float, float] | None) -> str:
    """`81.0 / 6.1 / 12.9%` (model forwards / the subject's other work / gate's own), or –."""
    return "–" if split is None else " / ".join(f"{100 * x:.1f}" for x in split) + "%"


def was_outside(base: dict[str, Any] | None) -> str:
    """The baseline's share outside model forwards (its subject's work and gate's own together:
    a gate before the subject bucket cannot tell them apart), when its forwards were timed."""
    return "" if not base or base.get("outside") is None else f" (baseline: {100 * base['outside']:.1f}% outside)"


def controls_table(rows: list[tuple[str, dict[str, Any] | None, dict[str, Any]]]) -> str:
    """Every passing check whose controls cost more than half of its positive run, with the numbers."""
    heavy = [(name, h) for name, _, mine in rows for h in mine.get("heavy_controls", [])]
    passing = sum(mine.get("passing_with_controls", 0) for _, _, mine in rows)
    if not heavy:
        return "\nEvery passing check's controls cost at most half of its positive run.\n"
    lines = [
        "",
        f"Passing checks whose controls cost more than half of their positive run: {len(heavy)} of the "
        f"{passing} passing checks with controls. *One control > half*: the cheapest control alone already costs more "
        "than half of the positive run, so no ordering or early stop can meet the target there.",
        "",
        "| example | check | positive run s | controls s (n) | controls / run | cheapest control s "
        "| slowest control | one control > half |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, h in heavy:
        lines.append(
            f"| {name} | {h['check']} | {h['positive_s']:.3f} | {h['controls_s']:.3f} ({h['controls']}) "
            f"| {h['controls_s'] / h['positive_s']:.2f} | {h['cheapest_s']:.3f} | {h['slowest']} {h['slowest_s']:.3f} "
            f"| {'yes' if h['cheapest_s'] > h['positive_s'] / 2 else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def expected(example: Path) -> str:
    """The verdict the example declares on its first line (`# gate-expect: fail`), or `?`."""
    first = example.read_text().splitlines()[0]
    return first.split(":", 1)[1].strip() if first.startswith("# gate-expect:") else "?"


def fmt(x: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "–" if x is None else f"{x:{spec}}{suffix}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-rev", help="git revision to compare with (exported with git archive)")
    parser.add_argument("--examples", nargs="+", default=["examples/reference-*.yaml"])
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run the branch side with --profile: forwards timed (module hooks slow small forwards)",
    )
    parser.add_argument(
        "--profile-baseline",
        action="store_true",
        help="also run the baseline side with --profile (both sides pay the hooks: a fair CPU ratio)",
    )
    parser.add_argument("--only-branch", action="store_true", help="skip the baseline runs")
    parser.add_argument("--tree", type=Path, default=REPO, help="source tree of the branch side (default: here)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    examples = sorted({e for pattern in args.examples for e in REPO.glob(pattern)})
    rows: list[tuple[str, dict[str, Any] | None, dict[str, Any]]] = []
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = export(args.baseline_rev, Path(tmp)) if args.baseline_rev and not args.only_branch else None
        for example in examples:
            loads.append(os.getloadavg()[0])
            base = (
                run(base_tree, example, Path(tmp) / "out-base" / example.stem, args.profile_baseline)
                if base_tree
                else None
            )
            mine = run(args.tree, example, Path(tmp) / "out" / example.stem, args.profile)
            mine["expected"] = expected(example)
            rows.append((example.name, base, mine))
            ratio = f"{base['cpu'] / mine['cpu']:.2f}x" if base else ""
            print(
                f"{example.name}: {mine['verdict']} cpu {mine['cpu']:.1f}s wall {mine['wall']:.1f}s"
                + (f" | baseline {base['verdict']} cpu {base['cpu']:.1f}s ({ratio})" if base else ""),
                flush=True,
            )
    loads.append(os.getloadavg()[0])
    lines = [
        "| example | expected | verdict | baseline verdict | CPU s | baseline CPU s | speed-up (CPU) | wall s "
        "| baseline wall s | forwards / subject / gate's own | controls / run (worst passing check; checks ≥ 1 s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    agree = as_expected = True
    for name, base, mine in rows:
        same = base is None or base["verdict"] == mine["verdict"]
        met = mine["verdict"] == mine["expected"]
        agree, as_expected = agree and same, as_expected and met
        lines.append(
            f"| {name} | {mine['expected']} | {mine['verdict']}{'' if met else ' **UNEXPECTED**'} "
            f"| {base['verdict'] if base else '–'}{'' if same else ' **DIFFERS**'} "
            f"| {mine['cpu']:.1f} | {fmt(base and base['cpu'])} "
            f"| {fmt(base and base['cpu'] / mine['cpu'], '.2f', '×')} "
            f"| {mine['wall']:.1f} | {fmt(base and base['wall'])} "
            f"| {buckets(mine['buckets'])}{was_outside(base)} "
            f"| {fmt(mine['controls_ratio'], '.2f')}; {fmt(mine['controls_ratio_heavy'], '.2f')} |"
        )
    slowest = max(rows, key=lambda r: r[2]["cpu"])
    summary = (
        f"\n{len(rows)} examples; slowest {slowest[0]} at {slowest[2]['cpu']:.1f} CPU s; "
        + ("every verdict agrees with the baseline; " if any(b for _, b, _ in rows) and agree else "")
        + ("" if agree else "VERDICTS DIFFER. ")
        + ("every verdict is the one the example declares." if as_expected else "SOME VERDICTS ARE UNEXPECTED.")
        + "\n"
    )
    own = [r[2]["buckets"][2] for r in rows if r[2]["buckets"]]
    if own:
        worst = max(rows, key=lambda r: r[2]["buckets"][2] if r[2]["buckets"] else -1.0)
        summary += (
            f"gate's own work: at most {100 * max(own):.1f}% of an example's check time ({worst[0]}), "
            f"{sum(o <= 0.10 for o in own)} of {len(own)} examples at or under 10%.\n"
        )
    summary += controls_table(rows)
    command = "python benchmarks/pr_budget.py " + " ".join(sys.argv[1:])
    mode = "forwards timed (--profile)" if args.profile else "forwards not timed"
    if args.profile_baseline:
        mode += "; baseline side: forwards timed too"
    load = f"load average (1 min) {min(loads):.1f}-{max(loads):.1f} over the runs, mean {sum(loads) / len(loads):.1f}"
    text = (
        f"Generated by `{command}` (one torch thread per run; branch side: {mode}; {load}; "
        f"{os.cpu_count()} CPUs).\n\n" + "\n".join(lines) + "\n" + summary
    )
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
