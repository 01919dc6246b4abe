"""Calibrate the dtype-aware logit tolerance on correct reference paths.

For each seed and dtype: one full pass over the longest sequence, the progressive cached sweep on
the dynamic, static and chunked paths, and the largest |Δlogit| relative to the reference row's
scale (max |logit|). Prints the worst absolute and relative deltas, argmax flips and how many of
them were ties, so DEFAULT_TOLERANCE in gate/checks/_compare.py can be checked. Then the other
parity checks (greedy-parity, mask-oracle, reset-isolation) run on every correct cached path for
every seed and dtype, counting statuses: a correct path must never fail.

`--subjects` adds the third-party test plugins (tinylm: learned positions, a growing KV cache; gqa:
grouped-query attention, rotate-on-read, a static NaN-poisoned cache), each with its recompute engine
as the reference and its cached engine as the candidate, so the defaults are calibrated on engines
gate did not write too; a check a subject cannot run (mask-oracle without a probe) is counted as skip.

    python benchmarks/calibrate_tolerance.py --seeds 20 --longest 8000 --results benchmarks/RESULTS.md
    python benchmarks/calibrate_tolerance.py --seeds 20 --longest 512 --dtypes float32,bfloat16,float16 \
        --subjects reference,tinylm,gqa --results benchmarks/calibrate_tolerance.md
    python benchmarks/calibrate_tolerance.py --seeds 20 --longest 1024 --dtypes float16 \
        --subjects reference,tinylm,gqa --sweep-only --results benchmarks/calibrate_tolerance.md
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

import torch

from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks._compare import DEFAULT_TOLERANCE, Tolerance, compare_rows, random_tokens
from gate.checks._sweep import cached_sweep, sweep_lengths
from gate.checks.batch_invariance import BatchInvarianceParams, batch_invariance
from gate.checks.greedy_parity import GreedyParityParams, greedy_parity
from gate.checks.mask_oracle import MaskOracleParams, mask_oracle
from gate.checks.reset_isolation import ResetIsolationParams, reset_isolation
from gate.core.check import CheckContext, CheckSpec
from gate.core.manifest import Manifest
from gate.core.registry import load_adapter

OTHER_CHECKS: tuple[tuple[CheckSpec[Any], Any], ...] = (
    (greedy_parity, GreedyParityParams()),
    (mask_oracle, MaskOracleParams()),
    (reset_isolation, ResetIsolationParams()),
    (batch_invariance, BatchInvarianceParams()),
)

PLUGIN_SUBJECTS = {
    "tinylm": ({"engine": "recompute"}, {"engine": "kv-cache"}),
    "gqa": ({"engine": "recompute"}, {"engine": "static-cache"}),
}
"""Third-party subject -> (reference options, candidate options): its recompute and its cached engine."""


def subject_paths(subject: str, name: str, dtype: str, seed: int) -> tuple[Any, Any]:
    """(reference, candidate) of one subject: the reference decoder's full pass and its `name` path,
    or a plugin's recompute and cached engines."""
    if subject == "reference":
        adapter = ReferenceAdapter()
        ref = adapter.build(Options(path="full"), device="cpu", dtype=dtype, seed=seed)
        return ref, adapter.build(Options(path=name), device="cpu", dtype=dtype, seed=seed)
    plugin = load_adapter(subject)()
    ref_opts, cand_opts = PLUGIN_SUBJECTS[subject]
    build = [
        plugin.build(plugin.Options.model_validate(o), device="cpu", dtype=dtype, seed=seed)
        for o in (ref_opts, cand_opts)
    ]
    return build[0], build[1]


def subject_runs(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(subject, path) pairs: the reference decoder's paths, one cached engine per plugin."""
    runs = []
    for subject in args.subjects.split(","):
        names = args.paths.split(",") if subject == "reference" else [PLUGIN_SUBJECTS[subject][1]["engine"]]
        runs += [(subject, name) for name in names]
    return runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--longest", type=int, default=2000)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--paths", default="dynamic,static,chunked")
    parser.add_argument("--subjects", default="reference", help="reference and/or the test plugins tinylm, gqa")
    parser.add_argument("--results", type=Path, help="update this markdown file's tolerance section")
    parser.add_argument(
        "--sweep-only",
        action="store_true",
        help="skip the other parity checks (their default lengths do not depend on --longest) and write the "
        "sweep table into its own section, tolerance-calibration-LONGEST",
    )
    args = parser.parse_args()
    lines: list[str] = []
    torch.set_num_threads(1)
    for dtype in args.dtypes.split(","):
        atol, rtol = DEFAULT_TOLERANCE[dtype]
        tol = Tolerance(atol, rtol, "default")
        for subject in args.subjects.split(","):
            worst_abs = worst_ratio = 0.0
            flips = ties = rows = 0
            started = time.perf_counter()
            for seed in range(args.seeds):
                for _, name in [r for r in subject_runs(args) if r[0] == subject]:
                    ref, cand = subject_paths(subject, name, dtype, seed)
                    longest = min(args.longest, ref.max_len - 1, cand.max_len - 1)
                    tokens = random_tokens(ref.vocab_size, 2, longest + 1, seed)
                    lengths = sweep_lengths(longest)
                    with torch.no_grad():
                        full = ref.full_logits(tokens)[:, torch.tensor(lengths)].transpose(0, 1).float().cpu()
                    got, _ = cached_sweep(cand, tokens, lengths)
                    cmp = compare_rows(full, got.float().cpu(), tol)
                    worst_abs = max(worst_abs, float(cmp.max_abs_delta.max()))
                    worst_ratio = max(worst_ratio, float((cmp.max_abs_delta / cmp.tolerance).max()))
                    flips += int((~cmp.agree).sum())
                    ties += int(cmp.tie.sum())
                    rows += cmp.agree.numel()
                print(
                    f"  {dtype} {subject} seed {seed}: rows={rows} worst |Δ|={worst_abs:.3e} "
                    f"worst |Δ|/tol={worst_ratio:.3f} flips={flips} ties={ties}",
                    flush=True,
                )
            print(
                f"{dtype} {subject}: rows={rows} worst |Δ|={worst_abs:.3e} worst |Δ|/tol={worst_ratio:.3f} "
                f"argmax flips={flips} (ties {ties}) tol=(atol {atol}, rtol {rtol}) "
                f"[{time.perf_counter() - started:.0f}s]",
                flush=True,
            )
            lines.append(
                f"| {dtype} | {subject} | {atol} / {rtol} | {rows} | {worst_abs:.2e} | {worst_ratio:.3f} | {flips} | "
                f"{ties} | {flips - ties} |"
            )
    if args.sweep_only:
        if args.results:
            write_section(args.results, render_sweep(args, lines), f"tolerance-calibration-{args.longest}")
        return
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
    counts: dict[str, dict[str, int]] = {}
    for dtype in args.dtypes.split(","):
        for seed in range(args.seeds):
            for subject, name in subject_runs(args):
                ref, cand = subject_paths(subject, name, dtype, seed)
                ctx = CheckContext(
                    manifest=manifest, reference=ref, candidate=cand, seed=seed, device="cpu", dtype=dtype
                )
                for spec, params in OTHER_CHECKS:
                    status = spec(ctx, params).status
                    if status == "fail":
                        print(f"FALSE ALARM {spec.name} {subject}:{name} {dtype} seed {seed}", flush=True)
                    bucket = counts.setdefault(f"{spec.name} | {dtype}", {})
                    bucket[status] = bucket.get(status, 0) + 1
            print(f"{dtype} seed {seed}: {counts}", flush=True)
    return counts


def render(args: argparse.Namespace, lines: list[str], statuses: dict[str, dict[str, int]]) -> str:
    other = "\n".join(
        f"| {name} | {sum(c.values())} | {c.get('pass', 0)} | {c.get('warn', 0)} | {c.get('fail', 0)} | "
        f"{sum(n for k, n in c.items() if k not in ('pass', 'warn', 'fail'))} |"
        for name, c in statuses.items()
    )
    return f"""<!-- tolerance-calibration:start -->
## Tolerance calibration (correct paths must never fail)

`nice python benchmarks/calibrate_tolerance.py --seeds {args.seeds} --longest {args.longest} --dtypes {args.dtypes}
--subjects {args.subjects}` on CPU (torch {torch.__version__}, 1 thread): per subject, one full pass vs the progressive
cached sweep (the reference decoder `tiny`: its {args.paths.replace(",", ", ")} paths against its full pass; the
test plugins: their cached engine against their recompute engine), batch 2, the standard lengths plus 64
log-spaced up to {args.longest} (or the subject's max_len), {args.seeds} seeds (weights and tokens). Row tolerance is
atol + rtol * max |reference logit| (gate/checks/_compare.py); a flip to a token the reference scores within that
tolerance of its top is a tie (a warning), any other flip a failure.

| dtype | subject | atol / rtol | rows | worst abs delta | worst delta / tolerance | argmax flips | ties | failures |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(lines)}

A flip needs a reference margin below twice the delta, so a worst delta under half the tolerance means every
flip of a correct path lands in the tie band.

The other parity checks on the same correct paths, seeds and dtypes (default parameters; warn = a greedy
divergence at a tie or a row over 1x tolerance; other = skip or unproven: mask-oracle on a subject without an
attention probe, which cannot run there):

| check | dtype | runs | pass | warn | fail | other |
|---|---|---|---|---|---|---|
{other}
<!-- tolerance-calibration:end -->
"""


def render_sweep(args: argparse.Namespace, lines: list[str]) -> str:
    """The sweep table alone (--sweep-only), in its own section named by the longest length."""
    name = f"tolerance-calibration-{args.longest}"
    return f"""<!-- {name}:start -->
## Tolerance calibration to length {args.longest} (sweep only)

`nice python benchmarks/calibrate_tolerance.py --seeds {args.seeds} --longest {args.longest} --dtypes {args.dtypes}
--subjects {args.subjects} --sweep-only` on CPU (torch {torch.__version__}, 1 thread): as above, the lengths
now the standard lengths clipped to {args.longest} plus 64 log-spaced up to {args.longest}; the other parity
checks are not rerun (their default lengths do not depend on --longest).

| dtype | subject | atol / rtol | rows | worst abs delta | worst delta / tolerance | argmax flips | ties | failures |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(lines)}
<!-- {name}:end -->
"""


def write_section(results: Path, section: str, name: str = "tolerance-calibration") -> None:
    text = results.read_text() if results.exists() else "# Benchmark results\n"
    pattern = re.compile(rf"<!-- {re.escape(name)}:start -->.*?<!-- {re.escape(name)}:end -->\n?", re.DOTALL)
    text = pattern.sub(section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    results.write_text(text)


if __name__ == "__main__":
    main()
