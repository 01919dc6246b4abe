"""Fault x check table for docs/faults.md, generated from a run.

Each check runs on the clean candidate and on the candidate with each planted fault (gate.models.faults),
exactly as the runner's negative-control engine does, and each cell is classified the same way:
detected (the check failed), unobservable (the fault did not change what the check observed:
max |Δ| = 0), or missed (it changed the observation and the check still passed). Cells give
the smallest prefix length (or index) at which the check failed and the diagnosed bug class.

Faulty runs cover the whole schedule, as a run on a faulty candidate would, so the diagnosis sees
the whole failure profile; a negative control stops at the first failing length in the same
increasing order, so its detected-at is the one shown. One run cache per seed shares the
reference's work. With --previous, each cell also gives the detected-at of the table it replaces.

    nice python benchmarks/fault_matrix.py --seeds 3 --previous docs/faults.md --out docs/faults.md

--out replaces only the generated sections of docs/faults.md (the catalogue, the fault x check tables
and the confusion table, each between its markers); the prose around them is kept.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks.batch_invariance import BatchInvarianceParams, batch_invariance
from gate.checks.greedy_parity import GreedyParityParams, greedy_parity
from gate.checks.mask_oracle import MaskOracleParams, mask_oracle
from gate.checks.prefix_sweep import PrefixSweepParams, prefix_sweep
from gate.checks.reset_isolation import ResetIsolationParams, reset_isolation
from gate.checks.schedule_fuzz import ScheduleFuzzParams, schedule_fuzz
from gate.core.check import CheckContext, CheckSpec
from gate.core.manifest import Manifest
from gate.engine.controls import observation_difference
from gate.engine.run_cache import RunCache
from gate.errors import SubjectCrash
from gate.models.faults import CATALOGUE, FAULT_NAMES

CHECKS: list[tuple[CheckSpec[Any], Any]] = [
    (mask_oracle, MaskOracleParams()),
    (prefix_sweep, PrefixSweepParams()),
    (greedy_parity, GreedyParityParams()),
    (reset_isolation, ResetIsolationParams()),
    (batch_invariance, BatchInvarianceParams()),
    (schedule_fuzz, ScheduleFuzzParams()),
]
"""Every check of the layout policies that catches a planted model or cache fault (phase-performance
judges time and bytes, not outputs)."""


def context(reference: Any, candidate: Any, seed: int, cache: RunCache | None = None) -> CheckContext:
    manifest = Manifest.model_validate(
        {
            "apiVersion": "gate/v1",
            "name": "fault-matrix",
            "intervention": "layout",
            "claim": {"level": "tolerance"},
            "subject": {
                "reference": {"adapter": "reference", "options": {"path": "full"}},
                "candidate": {"adapter": "reference", "options": {"path": "static"}},
            },
        }
    )
    return CheckContext(
        manifest=manifest,
        reference=reference,
        candidate=candidate,
        seed=seed,
        device="cpu",
        dtype="float32",
        cache=cache or RunCache(),
    )


def cell(clean: Any, faulty: Any) -> dict[str, Any]:
    diff = observation_difference(clean, faulty)
    if faulty.status == "fail":
        return {"outcome": "detected", "at": faulty.detected_at, "class": (faulty.diagnosis or {}).get("bug_class")}
    return {"outcome": "unobservable" if diff == 0.0 else "missed", "diff": diff}


def crashed(crash: SubjectCrash) -> dict[str, Any]:
    """A cell where the faulted subject raised inside its own code: detected (class crash), no length."""
    return {"outcome": "detected", "at": None, "class": "crash", "call": crash.call}


def run(
    preset: str, path: str, seeds: int, first: int = 0
) -> tuple[dict[tuple[str, str], list[dict[str, Any]]], dict[str, float]]:
    adapter = ReferenceAdapter()
    table: dict[tuple[str, str], list[dict[str, Any]]] = {}
    seconds: dict[str, float] = Counter()
    for seed in range(first, first + seeds):
        reference = adapter.build(Options(preset=preset, path="full"), device="cpu", dtype="float32", seed=seed)
        candidate = adapter.build(Options(preset=preset, path=path), device="cpu", dtype="float32", seed=seed)
        cache = RunCache()
        for spec, params in CHECKS:
            start = time.process_time()
            clean = spec(context(reference, candidate, seed, cache), params)
            assert clean.status in ("pass", "warn"), f"{spec.name} fails a correct path: {clean.message}"
            for fault in FAULT_NAMES:
                try:
                    faulty = spec(context(reference, candidate.with_fault(fault), seed, cache), params)
                except SubjectCrash as crash:  # as the runner counts it: the check failed the faulted subject
                    table.setdefault((fault, spec.name), []).append(crashed(crash))
                    continue
                table.setdefault((fault, spec.name), []).append(cell(clean, faulty))
            seconds[spec.name] += time.process_time() - start
            print(f"seed {seed} {spec.name}: {time.process_time() - start:.1f} CPU s", flush=True)
    return table, dict(seconds)


def summarise(cells: list[dict[str, Any]], was: str | None = None) -> str:
    n = len(cells)
    detected = [c for c in cells if c["outcome"] == "detected"]
    if len(detected) == n:
        at = sorted(c["at"] for c in detected if c["at"] is not None)
        classes = Counter(c["class"] for c in detected)
        label = ", ".join(k for k, _ in classes.most_common(2))
        where = f" at {at[0]}" if at and at[0] == at[-1] else (f" at {at[0]}–{at[-1]}" if at else "")
        before = f" (was {was})" if was is not None else ""
        return f"**detected**{where}{before} ({label})"
    if not detected and all(c["outcome"] == "unobservable" for c in cells):
        return "unobservable (Δ = 0)"
    parts = [f"detected {len(detected)}/{n}"] if detected else []
    missed = [c for c in cells if c["outcome"] == "missed"]
    if missed:
        parts.append(f"MISSED {len(missed)}/{n} (max Δ {max(c['diff'] for c in missed):.3g})")
    unobs = n - len(detected) - len(missed)
    if unobs:
        parts.append(f"unobservable {unobs}/{n}")
    return ", ".join(parts)


def previous_detections(doc: Path) -> dict[tuple[str, str, str], str]:
    """(preset, fault, check) -> the detected-at text ("2107–3051") of an earlier faults.md."""
    found: dict[tuple[str, str, str], str] = {}
    preset, names = "", []
    for line in doc.read_text().splitlines():
        if line.startswith("### Preset `"):
            preset = line.split("`")[1]
        elif line.startswith("| fault | ") and preset:
            names = [c.strip() for c in line.strip("|").split("|")][1:]
        elif line.startswith("| ") and names and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            for name, cell in zip(names, cells[1:], strict=False):
                match = re.match(r"\*\*detected\*\* at (\S+)", cell)
                if match:
                    found[(preset, cells[0], name)] = match.group(1)
    return found


def render(
    table: dict[tuple[str, str], list[dict[str, Any]]],
    seconds: dict[str, float],
    preset: str,
    path: str,
    seeds: int,
    previous: dict[tuple[str, str, str], str] | None = None,
) -> str:
    names = [spec.name for spec, _ in CHECKS]
    lines = [f"| fault | {' | '.join(names)} |", "|---|" + "---|" * len(names)]
    for fault in FAULT_NAMES:
        was = previous or {}
        cells = [summarise(table[(fault, n)], was.get((preset, fault, n)) if previous else None) for n in names]
        lines.append(f"| {fault} | " + " | ".join(cells) + " |")
    caught = [f for f in FAULT_NAMES if any(all(c["outcome"] == "detected" for c in table[(f, n)]) for n in names)]
    timing = ", ".join(f"{n} {seconds[n]:.1f} s" for n in names)
    return (
        f"Generated by `python benchmarks/fault_matrix.py --seeds {seeds} --preset {preset} --path {path}` "
        f"(torch {torch.__version__}, float32, cpu; reference `full`, candidate `{path}`, preset `{preset}`, "
        f"max_len 8192, default check parameters; {seeds} weight/input seeds per cell). CPU time per check "
        f"including every fault (one thread): {timing}.\n\n" + "\n".join(lines) + "\n\n"
        f"Faults detected by at least one check in every seed: {len(caught)} of {len(FAULT_NAMES)}.\n"
    )


def confusion(tables: list[dict[tuple[str, str], list[dict[str, Any]]]]) -> str:
    """Planted fault (its documented class) x the classes the diagnosis named, over every detected
    cell of every check, seed and preset: right, uncertain (the diagnosis said it does not know) or
    another class (named). reset-isolation's and the mask oracle's own classes count like the rest."""
    expected = {f.name: f.bug_class for f in CATALOGUE}
    lines = [
        "| fault | documented class | detections | right | uncertain | other class (count) |",
        "|---|---|---|---|---|---|",
    ]
    total = right_total = uncertain_total = 0
    for fault in FAULT_NAMES:
        named: Counter[str] = Counter()
        for table in tables:
            for (f, _check), cells in table.items():
                if f == fault:
                    named.update(str(c["class"]) for c in cells if c["outcome"] == "detected")
        right, uncertain = named[expected[fault]], named["uncertain"]
        other = {k: v for k, v in named.items() if k not in (expected[fault], "uncertain")}
        total += sum(named.values())
        right_total += right
        uncertain_total += uncertain
        others = ", ".join(f"{k} ({v})" for k, v in sorted(other.items(), key=lambda kv: -kv[1])) or "-"
        lines.append(f"| {fault} | {expected[fault]} | {sum(named.values())} | {right} | {uncertain} | {others} |")
    wrong = total - right_total - uncertain_total
    lines.append(f"| **all** | | {total} | {right_total} | {uncertain_total} | {wrong} |")
    return "\n".join(lines) + "\n"


def catalogue() -> str:
    rows = ["| fault | patches | diagnosis | what is planted |", "|---|---|---|---|"]
    rows += [f"| {f.name} | {f.target} | {f.bug_class} | {f.summary} |" for f in CATALOGUE]
    return "\n".join(rows) + "\n"


SECTIONS = ("fault-catalogue", "fault-matrix", "fault-confusion")
"""The generated parts of docs/faults.md, each between `<!-- NAME:start -->` and `<!-- NAME:end -->`;
the prose around them is written by hand and kept."""


def replace_marked(text: str, name: str, body: str) -> str:
    """`text` with the part between `<!-- name:start -->` and `<!-- name:end -->` replaced by `body`."""
    pattern = re.compile(rf"(<!-- {re.escape(name)}:start -->\n).*?(<!-- {re.escape(name)}:end -->)", re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"no <!-- {name}:start --> ... <!-- {name}:end --> section to replace")
    return pattern.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), text, count=1)


def marked(text: str, name: str) -> str:
    """The part of `text` between `<!-- name:start -->` and `<!-- name:end -->`."""
    return text.split(f"<!-- {name}:start -->\n", 1)[1].split(f"<!-- {name}:end -->", 1)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="run seeds first .. first + seeds - 1")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--path", default="static")
    parser.add_argument("--extra", default="tiny-abs", help="second preset for a second table ('' for none)")
    parser.add_argument("--previous", type=Path, help="an earlier faults.md: show its detected-at beside the new")
    parser.add_argument("--out", type=Path, help="a faults.md whose generated sections are replaced (else stdout)")
    parser.add_argument("--save", type=Path, help="also write each preset's cells and CPU times to this JSON file")
    parser.add_argument(
        "--load",
        type=Path,
        action="append",
        help="render from --save files (one per preset) instead of running",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    previous = previous_detections(args.previous) if args.previous else None
    sections = []
    tables = []
    runs = {}
    for saved in args.load or []:  # presets (or seeds) run apart, side by side, rendered together
        for preset, part in json.loads(saved.read_text()).items():
            merged = runs.setdefault(preset, {"cells": {}, "seconds": {}, "seeds": 0})
            for key, cells in part["cells"].items():
                merged["cells"].setdefault(key, []).extend(cells)
            for name, spent in part["seconds"].items():
                merged["seconds"][name] = merged["seconds"].get(name, 0.0) + spent
            merged["seeds"] += part["seeds"]
    if not runs:
        for preset in [args.preset, *([args.extra] if args.extra else [])]:
            table, seconds = run(preset, args.path, args.seeds, args.first_seed)
            cells = {f"{f}|{c}": v for (f, c), v in table.items()}
            runs[preset] = {"cells": cells, "seconds": seconds, "seeds": args.seeds}
    if args.save:
        args.save.write_text(json.dumps(runs))
    for preset, saved_run in runs.items():
        table = {tuple(k.split("|")): v for k, v in saved_run["cells"].items()}
        seconds = saved_run["seconds"]
        tables.append(table)
        text = render(table, seconds, preset, args.path, saved_run["seeds"], previous)
        sections.append(f"### Preset `{preset}`\n\n" + text)
    bodies = dict(zip(SECTIONS, (catalogue(), "\n".join(sections), confusion(tables)), strict=True))
    if args.out is None:
        print("\n".join(bodies.values()))
        return
    doc = args.out.read_text()
    for name, body in bodies.items():
        doc = replace_marked(doc, name, body)
    args.out.write_text(doc)


if __name__ == "__main__":
    main()
