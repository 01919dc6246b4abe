"""Calibrate the dtype-aware logit tolerance on correct reference paths.

For each seed and dtype: one full pass over the longest sequence, the progressive cached sweep on
the dynamic, static and chunked paths, and the largest |Δlogit| relative to the reference row's
scale (max |logit|). Prints the worst absolute and relative deltas, argmax flips and the smallest
margin at which a flip happened, so DEFAULT_TOLERANCE in gate/checks/compare.py can be checked.

    python benchmarks/calibrate_tolerance.py --seeds 20 --longest 2000
"""

from __future__ import annotations

import argparse
import time

import torch

from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks.compare import DEFAULT_TOLERANCE, Tolerance, compare_rows, random_tokens
from gate.checks.sweep import cached_sweep, sweep_lengths


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--longest", type=int, default=2000)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--paths", default="dynamic,static,chunked")
    args = parser.parse_args()
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
            full = ref.full_logits(tokens)[:, lengths].transpose(0, 1).cpu()
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
            f"[{time.perf_counter() - started:.0f}s]"
        )


if __name__ == "__main__":
    main()
