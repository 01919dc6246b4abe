"""Benchmark spec-distribution: samples per second, and the check against the target alone.

Measured in one run, on one machine, in one process:

  * the whole spec-distribution check (exact enumeration, power and sample size, n speculative
    samples, G-test) on the reference decoder's speculative path (layer-skip draft, k = 2);
  * drawing the same n continuations of the same prompt from the target alone (plain batched
    ancestral sampling, no draft), the cheapest way to get n samples of the target's distribution;
  * the correct sampler over 20 seeds (false alarms at alpha = 0.01) and every fault at the
    default sample size (detections).

    python benchmarks/spec_distribution.py                    # print the markdown section
    python benchmarks/spec_distribution.py --results benchmarks/RESULTS.md   # and write it there
"""

from __future__ import annotations

import argparse
import platform
import re
import time
from pathlib import Path
from typing import Any

import torch

from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks.spec_distribution import SpecDistributionParams, spec_distribution
from gate.core.check import CheckContext
from gate.core.manifest import Manifest
from gate.speculative.sampler import FAULTS, target_only_sample

START, END = "<!-- spec-distribution:start -->", "<!-- spec-distribution:end -->"
SPEC = {"k": 2, "draft": "layer-skip", "draft_layers": 1}


def build(device: str, dtype: str) -> tuple[Any, Any, Manifest]:
    adapter = ReferenceAdapter()
    ref = adapter.build(Options(path="full"), device=device, dtype=dtype, seed=0)
    cand = adapter.build(Options(path="speculative", speculative=SPEC), device=device, dtype=dtype, seed=0)
    manifest = Manifest.model_validate(
        {
            "apiVersion": "gate/v1",
            "name": "bench",
            "intervention": "proposal-and-verify",
            "claim": {"level": "distribution", "alpha": 0.01, "power": 0.9},
            "identity": ["token-ids", "positions", "model-revision"],
            "subject": {
                "reference": {"adapter": "reference", "options": {}},
                "candidate": {"adapter": "reference", "options": {"path": "speculative", "speculative": SPEC}},
            },
        }
    )
    return ref, cand, manifest


def timed(fn: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - started


def measure(device: str, dtype: str, samples: int | None) -> dict[str, Any]:
    ref, cand, manifest = build(device, dtype)

    def ctx(path: Any, seed: int) -> CheckContext:
        return CheckContext(manifest=manifest, reference=ref, candidate=path, seed=seed, device=device, dtype=dtype)

    params = SpecDistributionParams() if samples is None else SpecDistributionParams(min_samples=samples)
    spec_distribution(ctx(cand, 99), params)  # warm-up
    out, check_s = timed(lambda: spec_distribution(ctx(cand, 0), params))
    n, horizon = out.evidence["n_samples"], out.evidence["horizon"]
    prompt = torch.tensor(out.evidence["prompt"], device=device)
    gen = torch.Generator(device=torch.device(device)).manual_seed(0)
    _, target_s = timed(
        lambda: [
            target_only_sample(ref.full_logits, prompt.expand(b, -1), horizon, temperature=1.0, top_k=4, generator=gen)
            for b in [params.batch_size] * (n // params.batch_size) + [n % params.batch_size]
            if b
        ]
    )
    spec_s = n / out.metrics["samples_per_second"]
    alarms = [s for s in range(20) if spec_distribution(ctx(cand, s), params).metrics["p_value"] < 0.01]
    faults = {}
    for fault in FAULTS:
        o = spec_distribution(ctx(cand.with_fault(fault), 0), params)
        faults[fault] = (
            o.status,
            o.metrics["p_value"],
            o.evidence["power"][fault],
            o.metrics["tokens_per_target_pass"],
        )
    return {
        "device": device,
        "dtype": dtype,
        "n": n,
        "k": out.evidence["k"],
        "horizon": horizon,
        "cells": out.exercise["cells"],
        "status": out.status,
        "p_value": out.metrics["p_value"],
        "check_s": check_s,
        "spec_s": spec_s,
        "target_s": target_s,
        "alarms": alarms,
        "faults": faults,
        "acceptance": out.metrics["acceptance_rate"],
        "tpp": out.metrics["tokens_per_target_pass"],
    }


def section(r: dict[str, Any]) -> str:
    machine = torch.cuda.get_device_name() if r["device"].startswith("cuda") else platform.processor() or "cpu"
    lines = [
        START,
        "## spec-distribution (speculative sampling against the target's exact distribution)",
        "",
        f"`python benchmarks/spec_distribution.py` on {r['device']} ({machine}), {r['dtype']}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s). Reference decoder `tiny` as target, "
        f"draft = its first layer (layer-skip), k = {r['k']}, horizon {r['horizon']} tokens "
        f"({r['cells']} cells at top-k 4), temperature 1, n = {r['n']} samples, alpha = 0.01.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| speculative samples per second | {r['n'] / r['spec_s']:,.0f} |",
        f"| target-alone samples per second (same n, prompt, horizon) | {r['n'] / r['target_s']:,.0f} |",
        f"| speculative sampling time / target-alone time | {r['spec_s'] / r['target_s']:.2f} |",
        f"| whole check time / target-alone sampling time | {r['check_s'] / r['target_s']:.2f} |",
        f"| whole check (enumeration, power, sampling, test) | {r['check_s']:.2f} s |",
        f"| acceptance rate / tokens per target pass | {r['acceptance']:.3f} / {r['tpp']:.2f} |",
        f"| correct sampler, 20 seeds: false alarms at alpha 0.01 | {len(r['alarms'])} {r['alarms'] or ''} |",
        "",
        "| sampler | verdict | p-value | power at n | tokens per target pass |",
        "|---|---|---|---|---|",
        f"| correct | {r['status']} | {r['p_value']:.3g} | | {r['tpp']:.2f} |",
    ]
    for fault, (status, p, pw, tpp) in r["faults"].items():
        lines.append(f"| {fault} | {status} | {p:.3g} | {pw:.3f} | {tpp:.2f} |")
    slower = r["spec_s"] > r["target_s"]
    lines += [
        "",
        (
            "Speculative sampling costs more than sampling the target alone here: each sample is only "
            f"{r['horizon']} tokens, so draft passes are not amortised, and a one-layer draft is half of a "
            "two-layer target. That ratio is the price of testing the sampler itself."
            if slower
            else "Speculative sampling is cheaper than sampling the target alone here."
        ),
        END,
    ]
    return "\n".join(lines) + "\n"


def write(results: Path, text: str) -> None:
    old = results.read_text() if results.exists() else "# Benchmark results\n"
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END) + "\n?", re.S)
    new = pattern.sub(lambda _m: text, old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + text
    results.write_text(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--samples", type=int, default=None, help="min_samples (default: the check's default)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--results", type=Path, default=None, help="write the section into this markdown file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    text = section(measure(args.device, args.dtype, args.samples))
    print(text)
    if args.results:
        write(args.results, text)


if __name__ == "__main__":
    main()
