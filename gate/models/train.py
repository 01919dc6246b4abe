"""Train the copy model: a tiny reference decoder that can copy, retrieve and close brackets.

    python -m gate.models.train --out gate/models/weights/copy-model.safetensors

Trains on the token-space tasks of evals/ (a training seed disjoint from every evaluation seed) plus
a dense induction task, deterministically (fixed seeds and threads, float32 on CPU); loss is taken
only on answer tokens and on the repeated half of the induction task.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from gate.models.reference import ModelConfig, Transformer, init_weights
from gate.quality import vocab as V
from gate.quality.builders import BUILDERS, Row, distinct_words

TRAIN_SEED_BASE = 1_000_003
"""Training rows come from generators seeded (TRAIN_SEED_BASE + seed, step): evaluation slices are
seeded with small run seeds and the slice's crc32, so the two never share a generator."""

CONFIG = ModelConfig(n_layers=2, d_model=64, n_heads=2, n_kv_heads=2, vocab_size=128, max_len=512)
"""The copy model's shape: two layers of width 64 like the `tiny` preset, but two heads of width 32
(induction heads form in a third of the steps they need with four heads of 16, and attend sharply
enough over 500 tokens), a 128-token vocabulary and 512 positions (RoPE does
not carry a model trained on short contexts to unseen lengths, so it is trained on every length it
serves, and the slices clip their 256..8k contexts to it)."""

TASKS: dict[str, tuple[float, dict[str, Any]]] = {
    "induction": (0.15, {}),
    "retrieval": (0.2, {"value_len": 4}),
    "copy": (0.15, {"span_len": 16, "cue": 2}),
    "local": (0.1, {"span_len": 8, "cue": 2}),
    "numbers": (0.25, {"digits": 6, "recall_share": 0.5, "shown_terms": 12}),
    "closure": (0.15, {"levels": 4, "line_words": 6}),
}
"""Task mix (share of each batch) and builder parameters, matching evals/*.yaml."""


@dataclass(frozen=True)
class Schedule:
    """Two phases: induction heads first (short repeated spans, where they form fastest), then the
    task mix at slice-like lengths with the induction task kept in the mix."""

    induction_steps: int = 320
    induction_len: int = 48
    induction_batch: int = 64
    steps: int = 1500
    """Total steps, both phases."""
    tokens_per_step: int = 2560
    """Task phase: batch = tokens_per_step // length (at least 4), so every length costs alike."""
    lr: float = 3e-3
    warmup: int = 30
    weight_decay: float = 0.01
    lengths: tuple[int, ...] = (192, 320, 448, 512, 512)


def induction_row(rng: np.random.Generator, space: V.TokenSpace, length: int) -> tuple[list[int], int]:
    """BOS filler r1..rn r1..rn ... (the span repeated to the end): (tokens, index where the loss
    starts). Every repeat is predictable by induction, so the signal is dense."""
    n = int(rng.integers(4, max(5, min(24, length // 3))))
    span = distinct_words(rng, space, n)
    pre = int(rng.integers(0, max(1, length // 4)))
    seq = [V.BOS, *(V.FIRST_WORD + int(w) for w in rng.integers(0, space.n_words, size=pre))]
    start = len(seq) + n
    while len(seq) < length:
        seq += span
    return seq[:length], start


def make_batch(step: int, seed: int, sched: Schedule, space: V.TokenSpace) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [B, T], loss mask [B, T-1]) for one step, a pure function of (seed, step)."""
    rng = np.random.default_rng([TRAIN_SEED_BASE + seed, step])
    if step < sched.induction_steps:
        rows = [induction_row(rng, space, sched.induction_len) for _ in range(sched.induction_batch)]
        tokens = torch.tensor([r[0] for r in rows])
        mask = torch.zeros(len(rows), sched.induction_len - 1, dtype=torch.bool)
        for i, (_, start) in enumerate(rows):
            mask[i, start - 1 :] = True
        return tokens, mask
    length = int(rng.choice(sched.lengths))
    batch = max(4, sched.tokens_per_step // length)
    names = list(TASKS)
    shares = np.array([TASKS[n][0] for n in names])
    seqs: list[list[int]] = []
    starts: list[tuple[int, int]] = []
    for _ in range(batch):
        task = names[int(rng.choice(len(names), p=shares / shares.sum()))]
        if task == "induction":
            seq, start = induction_row(rng, space, length)
            seqs.append(seq)
            starts.append((start, len(seq)))
            continue
        row: Row = BUILDERS[task](rng, space, length, float(rng.random()), TASKS[task][1])
        seqs.append([*row.prompt, *row.answer])
        starts.append((len(row.prompt), len(row.prompt) + len(row.answer)))
    width = max(len(s) for s in seqs)
    tokens = torch.full((batch, width), V.PAD, dtype=torch.long)
    mask = torch.zeros(batch, width - 1, dtype=torch.bool)
    for i, (seq, (lo, hi)) in enumerate(zip(seqs, starts, strict=True)):
        tokens[i, : len(seq)] = torch.tensor(seq)
        mask[i, lo - 1 : hi - 1] = True  # position t predicts token t + 1
    return tokens, mask


def _causal_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # training-only kernel for a full causal pass (q_len == k_len): the same attention as the
    # reference core's masked SDPA, through PyTorch's causal fast path
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def train(seed: int, sched: Schedule, threads: int) -> tuple[Transformer, dict[str, Any]]:
    """Train the copy model; returns the model (eval mode, reference kernels) and a training log."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    space = V.TokenSpace(CONFIG.vocab_size, CONFIG.max_len)
    model = Transformer(CONFIG)
    init_weights(model, seed)
    # the reference init scales q/k by 2 for peaked random logits; a trainee starts gentler
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(0.5)
    cores: list[Any] = [layer.attention.core for layer in model.layers]  # type: ignore[union-attr]
    originals = [core.forward for core in cores]
    for core in cores:
        core.forward = _causal_core
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim == 2]
    other = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": sched.weight_decay}, {"params": other, "weight_decay": 0.0}],
        lr=sched.lr,
        betas=(0.9, 0.98),
    )
    history: list[dict[str, float]] = []
    started = time.perf_counter()
    window: list[float] = []
    for step in range(sched.steps):
        # warmup, constant through the induction phase, cosine decay over the task phase
        task_frac = max(0.0, (step - sched.induction_steps) / max(1, sched.steps - sched.induction_steps))
        lr = sched.lr * min(1.0, (step + 1) / sched.warmup) * 0.5 * (1 + math.cos(math.pi * task_frac))
        for group in opt.param_groups:
            group["lr"] = lr
        tokens, mask = make_batch(step, seed, sched, space)
        logits = model(tokens)[:, :-1]
        loss = F.cross_entropy(logits[mask], tokens[:, 1:][mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        window.append(float(loss.detach()))
        if (step + 1) % 50 == 0 or step + 1 == sched.steps:
            entry = {
                "step": step + 1,
                "loss": round(sum(window) / len(window), 4),
                "lr": round(lr, 6),
                "elapsed_s": round(time.perf_counter() - started, 1),
            }
            history.append(entry)
            window = []
            print(json.dumps(entry), flush=True)
    for core, forward in zip(cores, originals, strict=True):
        core.forward = forward
    model.eval().requires_grad_(False)
    log = {
        "seed": seed,
        "steps": sched.steps,
        "induction_steps": sched.induction_steps,
        "induction_len": sched.induction_len,
        "induction_batch": sched.induction_batch,
        "tokens_per_step": sched.tokens_per_step,
        "lr": sched.lr,
        "threads": threads,
        "lengths": list(sched.lengths),
        "tasks": {k: v[0] for k, v in TASKS.items()},
        "history": history,
        "train_seconds": round(time.perf_counter() - started, 1),
    }
    return model, log


@torch.no_grad()
def slice_accuracy(model: Transformer, n: int) -> dict[str, dict[str, Any]]:
    """Greedy accuracy of `model` on each evals/ slice (n rows, run seed 0): the share of samples whose
    k greedy tokens start with the answer, overall and per kind and context length."""
    from gate.models.reference import KVCache, prefill
    from gate.quality.builders import build_rows
    from gate.quality.spec import load_slice, slice_names

    space = V.TokenSpace(model.config.vocab_size, model.config.max_len)
    out: dict[str, dict[str, Any]] = {}
    for name in slice_names():
        spec = load_slice(name)
        rows = build_rows(spec, space, 0, n)
        hits: dict[str, list[bool]] = {}
        by_len: dict[int, list[Row]] = {}
        for row in rows:
            by_len.setdefault(len(row.prompt), []).append(row)
        for length, group in sorted(by_len.items()):
            for i in range(0, len(group), 8):
                chunk = group[i : i + 8]
                cache = KVCache.for_model(model.config, len(chunk), layout="dynamic")
                logits = prefill(model, torch.tensor([r.prompt for r in chunk]), cache)[:, -1]
                tokens = [logits.argmax(-1)]
                for _ in range(spec.continuation - 1):
                    tokens.append(model.step(tokens[-1][:, None], cache, cache.pos)[:, -1].argmax(-1))
                got = torch.stack(tokens, 1).tolist()
                for row, g in zip(chunk, got, strict=True):
                    ok = g[: len(row.answer)] == row.answer
                    for key in ("all", row.kind, f"L{length}"):
                        hits.setdefault(key, []).append(ok)
        out[name] = {k: round(sum(v) / len(v), 3) for k, v in hits.items()}
        out[name]["n"] = len(rows)
    return out


def main(argv: list[str] | None = None) -> None:
    from gate.models.trained import save_trained

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "weights" / "copy-model.safetensors")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=Schedule.steps)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--evaluate",
        type=int,
        default=48,
        metavar="N",
        help="after training, greedy accuracy on N rows of every slice (0: skip)",
    )
    args = parser.parse_args(argv)
    model, log = train(args.seed, Schedule(steps=args.steps), args.threads)
    if args.evaluate:
        log["slice_accuracy"] = slice_accuracy(model, n=args.evaluate)
        print(json.dumps(log["slice_accuracy"], indent=1))
    meta = {
        "trainer": "gate.models.train",
        "seed": args.seed,
        "steps": args.steps,
        "final_loss": log["history"][-1]["loss"],
        "tasks": log["tasks"],
    }
    save_trained(model, args.out, meta)
    args.out.with_suffix(".log.json").write_text(json.dumps(log, indent=1) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes) in {log['train_seconds']} s")


if __name__ == "__main__":
    main()
