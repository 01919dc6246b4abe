"""Calibrate the dtype-aware logit tolerance on correct reference paths.

For each seed and dtype: one full pass over the longest sequence, the progressive cached sweep on
the dynamic, static and chunked paths, and the largest |Δlogit| relative to the reference row's
scale (max |logit|). Prints the worst absolute and relative deltas, argmax flips and how many of
them were ties, so DEFAULT_TOLERANCE in gate/checks/_compare.py can be checked. Then the other
parity checks (greedy-parity, mask-oracle, reset-isolation) run on every correct cached path for
every seed and dtype, counting statuses: a correct path must never fail.

    python benchmarks/calibrate_tolerance.py --seeds 20 --longest 8000 --results benchmarks/RESULTS.md
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import torch

from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks._compare import DEFAULT_TOLERANCE, Tolerance, compare_rows, random_tokens
from gate.checks._sweep import cached_sweep, sweep_lengths
from gate.checks.greedy_parity import GreedyParityParams, greedy_parity
from gate.checks.mask_oracle import MaskOracleParams, mask_oracle
from gate.checks.reset_isolation import ResetIsolationParams, reset_isolation
from gate.core.check import CheckContext
from gate.core.manifest import Manifest

OTHER_CHECKS = (
    (greedy_parity, GreedyParityParams()),
    (mask_oracle, MaskOracleParams()),
    (reset_isolation, ResetIsolationParams()),
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--longest", type=int, default=2000)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--paths", default="dynamic,static,chunked")
    parser.add_argument("--results", type=Path, help="update this markdown file's tolerance section")
    args = parser.parse_args()
    lines: list[str] = []
    torch.set_num_threads(1)
    adapter = ReferenceAdapter()
    for dtype in args.dtypes.split(","):
        atol, rtol = DEFAULT_TOLERANCE[dtype]
        tol = Tolerance(atol, rtol, "default")
        worst_abs = worst_ratio = 0.0
        flips = ties = rows = 0
        started = time.perf_counter()
        for seed in range(args.seeds):
            ref = adapter.build(Options(path="full"), device="cpu", dtype=dtype, seed=seed)
            tokens = random_tokens(ref.vocab_size, 2, args.longest + 1, seed)
            lengths = sweep_lengths(args.longest)
            full = ref.full_logits(tokens)[:, torch.tensor(lengths)].transpose(0, 1).cpu()
            for name in args.paths.split(","):
                cand = adapter.build(Options(path=name), device="cpu", dtype=dtype, seed=seed)
                got, _ = cached_sweep(cand, tokens, lengths)
                cmp = compare_rows(full, got, tol)
                worst_abs = max(worst_abs, float(cmp.max_abs_delta.max()))
                worst_ratio = max(worst_ratio, float((cmp.max_abs_delta / cmp.tolerance).max()))
                flips += int((~cmp.agree).sum())
                ties += int(cmp.tie.sum())
                rows += cmp.agree.numel()
        print(
            f"{dtype}: rows={rows} worst |Δ|={worst_abs:.3e} worst |Δ|/tol={worst_ratio:.3f} "
            f"argmax flips={flips} (ties {ties}) tol=(atol {atol}, rtol {rtol}) "
            f"[{time.perf_counter() - started:.0f}s]",
            flush=True,
        )
        lines.append(
            f"| {dtype} | {atol} / {rtol} | {rows} | {worst_abs:.2e} | {worst_ratio:.3f} | {flips} | {ties} | "
            f"{flips - ties} |"
        )
    statuses = other_checks(args)
    print(statuses, flush=True)
    if args.results:
        write_section(args.results, render(args, lines, statuses))


def other_checks(args: argparse.Namespace) -> dict[str, dict[str, int]]:
    """Status counts of the other parity checks on correct paths, per check."""
    manifest = Manifest.model_validate(
        {
            "apiVersion": "gate/v1",
            "name": "calibration",
            "intervention": "layout",
            "claim": {"level": "tolerance"},
            "subject": {
                "reference": {"adapter": "reference", "options": {"path": "full"}},
                "candidate": {"adapter": "reference", "options": {"path": "static"}},
            },
        }
    )
    adapter = ReferenceAdapter()
    counts: dict[str, dict[str, int]] = {}
    for dtype in args.dtypes.split(","):
        for seed in range(args.seeds):
            ref = adapter.build(Options(path="full"), device="cpu", dtype=dtype, seed=seed)
            for name in args.paths.split(","):
                cand = adapter.build(Options(path=name), device="cpu", dtype=dtype, seed=seed)
                ctx = CheckContext(
                    manifest=manifest, reference=ref, candidate=cand, seed=seed, device="cpu", dtype=dtype
                )
                for spec, params in OTHER_CHECKS:
                    status = spec(ctx, params).status
                    bucket = counts.setdefault(spec.name, {})
                    bucket[status] = bucket.get(status, 0) + 1
    return counts


def render(args: argparse.Namespace, lines: list[str], statuses: dict[str, dict[str, int]]) -> str:
    other = "\n".join(
        f"| {name} | {sum(c.values())} | {c.get('pass', 0)} | {c.get('warn', 0)} | {c.get('fail', 0)} |"
        for name, c in statuses.items()
    )
    return f"""<!-- tolerance-calibration:start -->
## Tolerance calibration (correct paths must never fail)

`python benchmarks/calibrate_tolerance.py --seeds {args.seeds} --longest {args.longest}`: reference decoder `tiny`,
one full pass vs the progressive cached sweep on the {args.paths.replace(",", ", ")} paths, batch 2, the standard
lengths plus 64 log-spaced up to {args.longest}, {args.seeds} seeds (weights and tokens). Row tolerance is
atol + rtol * max |reference logit| (gate/checks/_compare.py); a flip to a token the reference scores within that
tolerance of its top is a tie (a warning), any other flip a failure.

| dtype | atol / rtol | rows | worst abs delta | worst delta / tolerance | argmax flips | ties | failures |
|---|---|---|---|---|---|---|---|
{chr(10).join(lines)}

A flip needs a reference margin below twice the delta, so a worst delta under half the tolerance means every
flip of a correct path lands in the tie band.

The other parity checks on the same correct paths, seeds and dtypes (default parameters; warn = a greedy
divergence at a tie):

| check | runs | pass | warn | fail |
|---|---|---|---|---|
{other}
<!-- tolerance-calibration:end -->
"""


def write_section(results: Path, section: str) -> None:
    text = results.read_text() if results.exists() else "# Benchmark results\n"
    pattern = re.compile(r"<!-- tolerance-calibration:start -->.*?<!-- tolerance-calibration:end -->\n?", re.DOTALL)
    text = pattern.sub(section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    results.write_text(text)


if __name__ == "__main__":
    main()
