"""Prefix sweep vs the naive loop (background: parity), measured side by side in one run.

Same model (reference `tiny`, max_len 8192), same tokens (batch 2), same lengths (the eight standard
lengths plus 64 log-spaced up to the longest). Three timings:

* floor: ONE full causal pass over the longest sequence (it alone yields every reference row);
* sweep: what `prefix-sweep` does: that one full pass plus the candidate's progressive cached
  schedule (prefill the first length, then chunk + single-token append per length);
* naive: the naive loop, per length a fresh full pass over L + 1 tokens and a fresh prefill of
  L tokens plus one appended token.

Targets (issue 9): naive / sweep >= 3 and sweep / floor <= 3. Both methods must give the same
verdict row by row; the script checks that and exits non-zero otherwise.

    python benchmarks/prefix_sweep.py --results benchmarks/RESULTS.md
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch

from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks._compare import DEFAULT_TOLERANCE, Tolerance, compare_rows, random_tokens
from gate.checks._sweep import cached_sweep, sweep_lengths


def timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def naive(
    reference: Any, candidate: Any, tokens: torch.Tensor, lengths: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """the naive check(): per length, a fresh full pass and a fresh prefill + one append."""
    full_rows, cached_rows = [], []
    for length in lengths:
        full_rows.append(reference.full_logits(tokens[:, : length + 1])[:, -1].cpu())
        session = candidate.new_session(tokens.shape[0])
        if length:
            session.prefill(tokens[:, :length])
        cached_rows.append(session.append(tokens[:, length : length + 1])[:, -1].cpu())
    return torch.stack(full_rows), torch.stack(cached_rows)


def run(longest: int, log_count: int, path: str, threads: int) -> dict[str, Any]:
    torch.set_num_threads(threads)
    adapter = ReferenceAdapter()
    reference = adapter.build(Options(path="full"), device="cpu", dtype="float32", seed=0)
    candidate = adapter.build(Options(path=path), device="cpu", dtype="float32", seed=0)
    lengths = sweep_lengths(longest, log_count=log_count)
    tokens = random_tokens(reference.vocab_size, 2, longest + 1, seed=0)
    tol = Tolerance(*DEFAULT_TOLERANCE["float32"], source="float32 default")

    with torch.no_grad():
        reference.full_logits(tokens[:, :64])  # warm-up: allocator, kernels
        _, floor_s = timed(lambda: reference.full_logits(tokens))
        full, full_s = timed(lambda: reference.full_logits(tokens)[:, torch.tensor(lengths)].transpose(0, 1).cpu())
        (cached, exercise), cached_s = timed(lambda: cached_sweep(candidate, tokens, lengths))
        (naive_full, naive_cached), naive_s = timed(lambda: naive(reference, candidate, tokens, lengths))

    sweep_cmp = compare_rows(full, cached, tol)
    naive_cmp = compare_rows(naive_full, naive_cached, tol)
    sweep_s = full_s + cached_s
    return {
        "lengths": len(lengths),
        "longest": longest,
        "log_spaced": log_count,
        "path": candidate.name,
        "threads": threads,
        "floor_s": floor_s,
        "sweep_full_s": full_s,
        "sweep_cached_s": cached_s,
        "sweep_s": sweep_s,
        "naive_s": naive_s,
        "speedup": naive_s / sweep_s,
        "over_floor": sweep_s / floor_s,
        "sweep_agree": bool(sweep_cmp.agree.all()),
        "naive_agree": bool(naive_cmp.agree.all()),
        "same_verdicts": bool(torch.equal(sweep_cmp.failed, naive_cmp.failed)),
        "sweep_max_delta": float(sweep_cmp.max_abs_delta.max()),
        "naive_max_delta": float(naive_cmp.max_abs_delta.max()),
        "cached_steps": exercise.get("cached_steps"),
    }


def render(r: dict[str, Any]) -> str:
    ok = "yes" if r["speedup"] >= 3 else "NO"
    floor_ok = "yes" if r["over_floor"] <= 3 else "NO"
    return f"""<!-- prefix-sweep:start -->
## prefix-sweep (one full pass + progressive cached schedule vs the naive loop (background: parity))

`python benchmarks/prefix_sweep.py` on cpu, float32, torch {torch.__version__}, {r["threads"]} thread(s). \
Reference decoder `tiny` (2 layers, d_model 64, 4 heads / 2 KV heads, max_len 8192), batch 2, \
{r["lengths"]} prefix lengths (the eight standard lengths + {r["log_spaced"]} log-spaced) up to {r["longest"]}, \
candidate `{r["path"]}`. All timings from the same run on a shared machine.

| measure | value |
|---|---|
| floor: one full pass over {r["longest"] + 1} tokens | {r["floor_s"]:.2f} s |
| sweep: reference rows (one full pass) | {r["sweep_full_s"]:.2f} s |
| sweep: candidate progressive cached schedule | {r["sweep_cached_s"]:.2f} s |
| sweep total | {r["sweep_s"]:.2f} s |
| naive loop (fresh full pass + fresh prefill per length) | {r["naive_s"]:.2f} s |
| naive / sweep (target >= 3) | {r["speedup"]:.1f}x ({ok}) |
| sweep / floor (target <= 3) | {r["over_floor"]:.2f}x ({floor_ok}) |
| argmax agreement, sweep / naive | {r["sweep_agree"]} / {r["naive_agree"]} |
| max abs delta logit, sweep / naive | {r["sweep_max_delta"]:.2e} / {r["naive_max_delta"]:.2e} |
| same per-row verdicts | {r["same_verdicts"]} |

The sweep costs one causal pass for the reference plus about one more for the candidate: its chunks \
attend only backwards (half the score matrix, as the blocked full pass does), and each length adds a chunk \
step and a single-token step whose fixed cost is not amortised on a model this small. The naive loop pays \
sum(L^2) twice. What the \
progressive schedule gives up: each length's cache is grown by chunk appends rather than prefilled from \
scratch, so a bug confined to a one-shot prefill of exactly L tokens would be visited only at the first length \
(faults here live in the cache read, positions and mask, which every schedule exercises). `prefix-sweep` \
memoises the reference rows across a check's negative controls, so each control costs only the candidate side.
<!-- prefix-sweep:end -->
"""


def write_section(results: Path, section: str) -> None:
    text = results.read_text() if results.exists() else "# Benchmark results\n"
    pattern = re.compile(r"<!-- prefix-sweep:start -->.*?<!-- prefix-sweep:end -->\n?", re.DOTALL)
    text = pattern.sub(section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    results.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--longest", type=int, default=8000)
    parser.add_argument("--log-spaced", type=int, default=64)
    parser.add_argument("--path", default="static")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--results", type=Path, help="update this markdown file's prefix-sweep section")
    args = parser.parse_args()
    r = run(args.longest, args.log_spaced, args.path, args.threads)
    section = render(r)
    print(section)
    if args.results:
        write_section(args.results, section)
    if not (r["same_verdicts"] and r["sweep_agree"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
