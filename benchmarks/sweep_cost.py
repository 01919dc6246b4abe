"""What `prefix-sweep` costs against one full pass, at lengths L, 2L, 4L, 8L, measured side by side.

Same model (reference `tiny`, max_len 8192), same tokens (batch 2, the check's default), candidate
`reference:static`. For each longest prefix N, in one process and one run, interleaved, min of
`--repeats`:

* floor: ONE full causal pass over N + 1 tokens (it alone yields every reference row);
* live: the whole check (`prefix_sweep`: plan, the reference's full pass, the candidate's growing
  session, judgement, evidence) with a live reference and an empty run cache;
* cached: the same check with the reference answered from the reference cache
  (gate.adapters.recorded.store.cached_reference, filled once before timing);
* candidate: the candidate's growing session alone (gate.checks._sweep.cached_sweep);
* naive: per length a fresh full pass over L + 1 tokens and a fresh prefill of L tokens plus one
  appended token, compared row by row;
* repeated: the live check again with the decoder's attention as it was before grouped KV heads
  were read in place (every step repeats the whole cache's K/V per query head), the "before" of
  this fix measured in the same process.

Two sweeps: `dense` visits every length 0..N (`every_length_up_to: N`), `default` the pull-request
plan (the standard lengths and 64 log-spaced ones up to N). The script checks that live, cached and
naive give the same verdicts and exits non-zero otherwise.

    python benchmarks/sweep_cost.py --label after --out benchmarks/speed.md
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from fault_matrix import context  # benchmarks/ is on sys.path

from gate.adapters.recorded.store import cached_reference
from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks._compare import DEFAULT_TOLERANCE, Tolerance, compare_rows, random_tokens
from gate.checks._sweep import cached_sweep, layout_edges, plan_sweep
from gate.checks.prefix_sweep import PrefixSweepParams, prefix_sweep
from gate.core.check import Outcome
from gate.engine.run_cache import RunCache
from gate.models.reference import AttentionCore

SWEEPS = {"dense": 128, "default": 500}
"""The shortest longest-prefix L of each sweep; it runs L, 2L, 4L, 8L."""


def params_for(sweep: str, longest: int) -> PrefixSweepParams:
    if sweep == "dense":
        return PrefixSweepParams(longest=longest, every_length_up_to=longest, max_lengths=None)
    return PrefixSweepParams(longest=longest)


def naive(reference: Any, candidate: Any, tokens: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Per length a fresh full pass and a fresh prefill + one append; [N, B] failed rows."""
    tol = Tolerance(*DEFAULT_TOLERANCE["float32"], source="float32 default")
    full_rows, cached_rows = [], []
    for length in lengths:
        full_rows.append(reference.full_logits(tokens[:, : length + 1])[:, -1].float().cpu())
        session = candidate.new_session(tokens.shape[0])
        if length:
            session.prefill(tokens[:, :length])
        cached_rows.append(session.append(tokens[:, length : length + 1])[:, -1].float().cpu())
    return compare_rows(torch.stack(full_rows), torch.stack(cached_rows), tol).failed


@contextmanager
def repeated_heads() -> Iterator[None]:
    """The reference decoder's attention as before: K/V repeated per query head on every call."""
    inner = AttentionCore.forward

    def forward(self: AttentionCore, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, padding: Any = None) -> Any:
        rep = q.shape[1] // k.shape[1]
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return inner(self, q, k, v, padding)

    AttentionCore.forward = forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        AttentionCore.forward = inner  # type: ignore[method-assign]


def best_of(
    repeats: int, fns: dict[str, Callable[[], Any]], once: frozenset[str] = frozenset()
) -> tuple[dict[str, float], dict[str, Any]]:
    """Each fn `repeats` times (those in `once` only the first time), interleaved (the load hits
    all alike); the fastest time of each."""
    times: dict[str, float] = {name: float("inf") for name in fns}
    outs: dict[str, Any] = {}
    for r in range(repeats):
        for name, fn in fns.items():
            if r and name in once:
                continue
            start = time.perf_counter()
            outs[name] = fn()
            times[name] = min(times[name], time.perf_counter() - start)
    return times, outs


def measure(sweep: str, longest: int, repeats: int, cache_root: Path, naive_repeats: int) -> dict[str, Any]:
    """One row: every timing at longest prefix N (naive_repeats 0: no naive loop)."""
    adapter = ReferenceAdapter()
    reference = adapter.build(Options(path="full"), device="cpu", dtype="float32", seed=0)
    candidate = adapter.build(Options(path="static"), device="cpu", dtype="float32", seed=0)
    stored = cached_reference(cache_root / f"{sweep}-{longest}", reference, "reference", {"path": "full"}, "bench")
    params = params_for(sweep, longest)
    tokens = random_tokens(reference.vocab_size, params.batch, longest + 1, 0)

    def check(ref: Any) -> Outcome:
        with torch.no_grad():
            return prefix_sweep(context(ref, candidate, 0, RunCache()), params)

    warm = check(stored)  # fills the reference cache, warms allocator and kernels
    stored.store.save()
    planned = planned_lengths(candidate, params)
    assert len(planned) == warm.metrics["lengths"], (len(planned), warm.metrics["lengths"])
    fns: dict[str, Callable[[], Any]] = {
        "floor": lambda: reference.full_logits(tokens),
        "live": lambda: check(reference),
        "cached": lambda: check(stored),
        "candidate": lambda: cached_sweep(candidate, tokens, planned),
        "naive": lambda: naive(reference, candidate, tokens, planned),
        "repeated": lambda: with_repeated_heads(lambda: check(reference)),
    }
    if not naive_repeats:
        del fns["naive"]
    with torch.no_grad():
        times, outs = best_of(repeats, fns, frozenset() if naive_repeats > 1 else frozenset({"naive"}))
    live, cached, repeated = outs["live"], outs["cached"], outs["repeated"]
    naive_failed = bool(outs["naive"].any()) if "naive" in outs else live.status == "fail"
    times.setdefault("naive", float("nan"))
    same = (
        (live.status, live.detected_at) == (cached.status, cached.detected_at)
        and live.evidence == repeated.evidence
        and naive_failed == (live.status == "fail")
    )
    return {
        "sweep": sweep,
        "longest": longest,
        "lengths": live.metrics["lengths"],
        "status": live.status,
        "detected_at": live.detected_at,
        "same_verdicts": same,
        **{f"{k}_s": v for k, v in times.items()},
    }


def with_repeated_heads(fn: Callable[[], Any]) -> Any:
    with repeated_heads():
        return fn()


def step_costs(at: list[int], repeats: int) -> str:
    """One single-token append to the candidate's cache of L tokens, after and before (heads repeated):
    the per-length term of a dense sweep, min over `repeats` interleaved batches of 20 steps."""
    candidate = ReferenceAdapter().build(Options(path="static"), device="cpu", dtype="float32", seed=0)
    tokens = random_tokens(candidate.vocab_size, 2, max(at) + 1, 0)
    lines = ["| L (cache) | decode step, after ms | before (heads repeated) ms | before / after |", "|---|---|---|---|"]
    for length in at:
        session: Any = candidate.new_session(2)
        session.prefill(tokens[:, :length])

        def steps(session: Any = session, length: int = length) -> None:
            for _ in range(20):
                session.cache.pos = length  # the same step again: token L onto the cache of L tokens
                session.append(tokens[:, length : length + 1])

        def repeated(steps: Callable[[], None] = steps) -> None:
            with_repeated_heads(steps)

        with torch.no_grad():
            times, _ = best_of(repeats, {"after": steps, "before": repeated})
        after, before = times["after"] / 20 * 1e3, times["before"] / 20 * 1e3
        lines.append(f"| {length} | {after:.3f} | {before:.3f} | {before / after:.2f}x |")
    return "\n".join(lines)


def planned_lengths(candidate: Any, params: PrefixSweepParams) -> list[int]:
    """The lengths the check plans (as gate.checks.prefix_sweep.body plans them, seed 0)."""
    assert params.longest is not None
    return plan_sweep(
        params.longest,
        edges=layout_edges(candidate),
        seed_lengths=params.lengths,
        log_count=params.log_spaced,
        first_edges=params.first_edges,
        sampled_edges=params.sampled_edges,
        cap=params.max_lengths,
        seed=0,
        every_up_to=params.every_length_up_to,
        reach=params.reach,
    ).lengths


def render(label: str, rows: list[dict[str, Any]], repeats: int, note: str) -> str:
    load = os.getloadavg()
    command = shlex.join(["python", "benchmarks/sweep_cost.py", *sys.argv[1:]])
    lines = [
        f"<!-- sweep-cost:{label}:start -->",
        f"### {label}",
        "",
        f"`{command}` on {platform.machine()}, {os.cpu_count()} CPUs "
        f"(shared; load average {load[0]:.1f} at the end), torch {torch.__version__}, 1 thread, float32; "
        f"min of {repeats} interleaved repeats (the naive loop: once). {note}".rstrip(),
        "",
        "| sweep | N | lengths | floor s | live s | cached s | candidate s | naive s | before: live s "
        "| live/floor | cached/floor | before: live/floor | naive/live "
        "| doubling floor | doubling live | doubling cached | before: doubling live | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    previous: dict[str, dict[str, Any]] = {}
    for r in rows:
        prev = previous.get(r["sweep"])

        def dbl(key: str, r: dict[str, Any] = r, prev: dict[str, Any] | None = prev) -> str:
            return f"{r[key] / prev[key]:.2f}x" if prev else "-"

        ran = r["naive_s"] == r["naive_s"]  # NaN: left out
        naive = f"{r['naive_s']:.2f}" if ran else "-"
        naive_ratio = f"{r['naive_s'] / r['live_s']:.1f}x" if ran else "-"
        lines.append(
            f"| {r['sweep']} | {r['longest']} | {r['lengths']} | {r['floor_s']:.3f} | {r['live_s']:.3f} "
            f"| {r['cached_s']:.3f} | {r['candidate_s']:.3f} | {naive} | {r['repeated_s']:.3f} "
            f"| {r['live_s'] / r['floor_s']:.2f}x | {r['cached_s'] / r['floor_s']:.2f}x "
            f"| {r['repeated_s'] / r['floor_s']:.2f}x | {naive_ratio} "
            f"| {dbl('floor_s')} | {dbl('live_s')} | {dbl('cached_s')} | {dbl('repeated_s')} "
            f"| {r['status']}{' at ' + str(r['detected_at']) if r['detected_at'] is not None else ''}"
            f"{'' if r['same_verdicts'] else ' (VERDICTS DIFFER)'} |"
        )
        previous[r["sweep"]] = r
    lines += ["", f"<!-- sweep-cost:{label}:end -->", ""]
    return "\n".join(lines)


def render_steps(label: str, table: str, note: str) -> str:
    command = shlex.join(["python", "benchmarks/sweep_cost.py", *sys.argv[1:]])
    return (
        f"<!-- sweep-cost:{label}:start -->\n### {label}\n\n`{command}`, candidate `reference:static`, batch 2, "
        f"1 thread, load average {os.getloadavg()[0]:.1f}; min of interleaved batches of 20 steps. {note}".rstrip()
        + f"\n\n{table}\n\n<!-- sweep-cost:{label}:end -->\n"
    )


def write_section(out: Path, label: str, section: str) -> None:
    text = out.read_text() if out.exists() else "# Speed\n"
    pattern = re.compile(rf"<!-- sweep-cost:{label}:start -->.*?<!-- sweep-cost:{label}:end -->\n?", re.DOTALL)
    text = pattern.sub(lambda _m: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    out.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", choices=[*SWEEPS, "both"], default="both")
    parser.add_argument("--first", type=int, help="the shortest N (default: 128 dense, 500 default)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--naive-all", action="store_true", help="repeat the naive loop too (default: once)")
    parser.add_argument("--no-naive", action="store_true", help="leave the naive loop out (long dense sweeps)")
    parser.add_argument("--steps", help="comma-separated cache lengths: time one decode step at each instead")
    parser.add_argument("--label", default="after", help="the section of --out this run replaces")
    parser.add_argument("--note", default="", help="a sentence for the section (what code was measured)")
    parser.add_argument("--out", type=Path, help="markdown file to update (its section for --label)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.steps:
        table = step_costs([int(x) for x in args.steps.split(",")], max(args.repeats, 15))
        section = render_steps(args.label, table, args.note)
        print(section)
        if args.out:
            write_section(args.out, args.label, section)
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for sweep in SWEEPS if args.sweep == "both" else [args.sweep]:
            for k in range(4):
                longest = (args.first or SWEEPS[sweep]) << k
                row = measure(
                    sweep,
                    longest,
                    args.repeats,
                    Path(tmp),
                    0 if args.no_naive else args.repeats if args.naive_all else 1,
                )
                print(row, flush=True)
                rows.append(row)
    section = render(args.label, rows, args.repeats, args.note)
    print(section)
    if args.out:
        write_section(args.out, args.label, section)
    if not all(r["same_verdicts"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
