"""The llama.cpp bugs and gaps benchmarks/engine-releases.md found, each reproduced by hand on a build.

    python benchmarks/engine_build_bugs.py --builds b8672,b8929,b9294,b9538,b10068,b11549

Raw HTTP against the build's `llama-server` wrapper (benchmarks/engine_builds.py installs it), no gate
check in between, on gate's tiny seeded models (a Llama, and a gemma2 whose layer 0 has a 64-token
sliding window, as in examples/engine-llamacpp-sliding-window.yaml); one line per build and probe:

  ignore-eos        40 greedy requests of 64 tokens with `ignore_eos: true` (/v1/completions): how many
                    stop early at the end-of-sequence token anyway (gate: a reply shorter than asked, exit 14)
  eos-stop          what engine-concurrent-conversations' end-of-sequence requests meet (gate.checks._eos):
                    64 seeded prompts of 280 tokens sent to the no-cache server with `ignore_eos: false`
                    (64 tokens): those it ends at end-of-sequence, then sent together to the candidate the
                    same way (stopping at the same token?), and to the no-cache server with `ignore_eos:
                    true` (still stopping: the ignore-eos bug)
  one-token-prefix  a 1-token prefix cached by one request and shared by the next: tokens reused
  swa-short-prefix  on the sliding-window model, prefixes of 1, 17 and 40 tokens (inside the window): reused
  swa-reuse-batched on the sliding-window model, 8 prompts sharing a 256-token prefix sent in groups of 3
                    to 5 at once beside unrelated ones, 3 rounds: replies that differ from a no-cache server's
                    (greedy tokens, or a logprob by more than 0.005)
  swa-slot-restore  on the sliding-window model, one slot, every host-memory cache off (--cache-ram 0): a
                    120-token prompt P is sent, the slot saved to a file (POST /slots/0?action=save), a
                    50-token unrelated prompt served in the slot, the file restored, then P plus 5 tokens
                    asked, 3 rounds: replies that differ from the reference's, and the tokens the reply
                    says it reused (a build that restores the unrelated prompt's context checkpoint
                    reuses 45: its state, not P's)
  speculative-logprobs
                    n-gram speculative decoding on (--spec-type ngram-mod, no draft model; on these random
                    prompts nothing is drafted), 3 greedy requests of 8 tokens with top_logprobs 2 against
                    the reference: token lists that differ, positions reported with no top_logprobs, and
                    the largest |dlogprob|
  ngram-drafted-logprobs
                    the same n-gram flags, one slot: a random 60-token prompt P served, then 30 fresh tokens
                    followed by P (greedy, 24 tokens, top_logprobs 2), 3 rounds: ngram-mod drafts from the
                    n-grams the first request left, and b8929 reports the accepted drafted tokens with
                    logprob 0 and no top_logprobs (tokens right); why engine-llamacpp-speculative fails
                    engine-concurrent-conversations on b8929 (benchmarks/engine-bisect.md). b9093 and later
                    draft nothing here (ngram_mod's log: no drafting call), so they show nothing
  ngram-repeat-logprobs
                    n-gram speculative decoding on (--spec-type ngram-mod), the prefix example's candidate: 8
                    seeded 64-token prompts (engine-prefix-parity's end-of-sequence prompts), each sent twice
                    (greedy, 64 tokens, stop on): replies with tokens reported with logprob 0 or no
                    top_logprobs, first and asked again (the repeat is drafted from the earlier reply)
  speculative-draft-length
                    with that draft model, 20 greedy requests of 32 tokens with ignore_eos: replies shorter
                    than asked (b8672 and b8929 stop one token early on some: 31 tokens)
  speculative-draft-logprobs
                    the same with a draft model, the target itself (-md, up to 4 drafted tokens, every
                    draft accepted): a live bug, every drafted token reported with logprob 0 and no
                    top_logprobs (ggml-org/llama.cpp issue #27972, open)
  swa-draft-tokens  on the sliding-window model with a draft model (the target itself, -md, up to 4 drafted
                    tokens), one slot, 8 fresh 120-token prompts one at a time: greedy token lists of 24
                    tokens that differ from the reference's, a shorter one named as short (logprobs not
                    compared: drafted ones are 0); b8672 to b9093 return 21 to 23 tokens on 3 of 8
  swa-long-batched-unified / -split
                    on the sliding-window model with every prompt cache off (--no-cache-prompt --cache-ram 0),
                    4 slots over one unified KV / one KV per slot: 20 fresh prompts of 640 to 1749 tokens
                    (past the sliding-window cache's room per slot, 64 + 512), 4 at once: replies that
                    differ from the reference's
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_builds import BUILDS, install, pick

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from gate.adapters.openai.process import free_port  # noqa: E402
from gate.adapters.openai.xllamacpp_server import build_number  # noqa: E402
from gate.models.tiny_gguf import TinyLlamaSpec, write_tiny_gguf  # noqa: E402

SERVE = ["-c", "8192", "-t", "1", "-tb", "1", "--no-webui", "-fa", "off"]
CANDIDATE = ["-np", "5", "--kv-unified", "--cache-prompt"]
REFERENCE = ["-np", "1", "--no-cache-prompt", "--cache-ram", "0"]


class Server:
    def __init__(self, program: Path, model: Path, flags: list[str], log: Path) -> None:
        self.port = free_port()
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(program), "-m", str(model), "--port", str(self.port), *SERVE]
                + [str(model) if flag == "{model}" else flag for flag in flags],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2)
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise SystemExit(f"engine_build_bugs: {program} did not start; see {log}")

    def complete(self, prompt: list[int], n: int) -> tuple[list[int], list[float], int]:
        body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "n_probs": 2, "ignore_eos": True}
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        reply = json.load(urllib.request.urlopen(request, timeout=120))
        content = reply["choices"][0]["logprobs"]["content"]
        cached = (reply.get("usage", {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        return [t["id"] for t in content], [t["logprob"] for t in content], int(cached)

    def post(self, path: str, body: dict[str, object]) -> dict[str, object]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        return json.load(urllib.request.urlopen(request, timeout=120))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(3, 512) for _ in range(n)]


def ignore_eos(start: Callable[..., Server]) -> str:
    server, rng = start("llama", CANDIDATE), random.Random(0)
    try:
        short = sum(len(server.complete(tokens(rng, 50), 64)[0]) < 64 for _ in range(40))
    finally:
        server.stop()
    return f"{short} of 40 replies stopped before 64 tokens" + (" (BUG: ignore_eos ignored)" if short else "")


def _stop(server: Server, prompt: list[int], n: int, ignore: bool) -> tuple[list[int], str]:
    """A greedy reply's token ids and finish_reason, with `ignore_eos` as given."""
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "n_probs": 2, "ignore_eos": ignore}
    choice = server.post("/v1/completions", body)["choices"][0]  # type: ignore[index]
    return [t["id"] for t in choice["logprobs"]["content"]], str(choice["finish_reason"])


def eos_stop(start: Callable[..., Server]) -> str:
    reference, candidate, rng = start("llama", REFERENCE), start("llama", CANDIDATE), random.Random(2)
    try:
        prompts = [tokens(rng, 280) for _ in range(64)]
        ended = {}
        for i, prompt in enumerate(prompts):
            ids, finish = _stop(reference, prompt, 64, False)
            if finish == "stop" and len(ids) < 64:
                ended[i] = ids
        with ThreadPoolExecutor(max(1, len(ended))) as pool:
            got = dict(zip(ended, pool.map(lambda i: _stop(candidate, prompts[i], 64, False), ended), strict=True))
        same = sum(got[i] == (ids, "stop") for i, ids in ended.items())
        still = sum(len(_stop(reference, prompts[i], 64, True)[0]) < 64 for i in ended)
    finally:
        reference.stop()
        candidate.stop()
    lengths = ", ".join(str(len(ids)) for ids in ended.values())
    return (
        f"{len(ended)} of 64 prompts end at end-of-sequence on the no-cache server ({lengths} tokens); the candidate "
        f"stops at the same token on {same} of {len(ended)}; with ignore_eos true {still} of {len(ended)} still stop"
        + (" (BUG: ignore_eos ignored)" if still else "")
        + (" (BUG: the candidate stops elsewhere)" if same < len(ended) else "")
    )


def reuse(start: Callable[..., Server], model: str, lengths: tuple[int, ...]) -> str:
    server, rng, found = start(model, CANDIDATE), random.Random(1), []
    try:
        for length in lengths:
            prefix = tokens(rng, length)
            server.complete(prefix + tokens(rng, 4), 1)
            found.append((length, server.complete(prefix + tokens(rng, 4), 8)[2]))
    finally:
        server.stop()
    missed = [length for length, cached in found if not cached]
    words = ", ".join(f"{length}:{cached}" for length, cached in found)
    return f"length:reused {words}" + (f" (no reuse at {', '.join(map(str, missed))})" if missed else "")


@dataclass
class Tally:
    """Replies of a group sent at once to the candidate, each against the no-cache server's answer alone:
    wrong when the greedy tokens or a logprob (by more than 0.005) differ."""

    wrong: int = 0
    total: int = 0
    worst: float = 0.0

    def add(self, candidate: Server, reference: Server, group: list[list[int]], n: int) -> None:
        with ThreadPoolExecutor(len(group)) as pool:
            got = list(pool.map(lambda p: candidate.complete(p, n), group))
        for prompt, (ids, lps, _) in zip(group, got, strict=True):
            want_ids, want_lps, _ = reference.complete(prompt, n)
            gap = max(abs(a - b) for a, b in zip(lps, want_lps, strict=True))
            self.worst, self.total = max(self.worst, gap), self.total + 1
            self.wrong += ids != want_ids or gap > 0.005

    def words(self) -> str:
        found = f"{self.wrong} of {self.total} replies differ from the no-cache server's"
        return f"{found} (max abs dlogprob {self.worst:.3g})" + (" (BUG: wrong replies)" if self.wrong else "")


def swa_reuse_batched(start: Callable[..., Server]) -> str:
    candidate, reference = start("swa", CANDIDATE), start("swa", REFERENCE)
    rng, tally = random.Random(2), Tally()
    try:
        for _ in range(3):
            shared = tokens(rng, 256)
            mine = [shared + tokens(rng, 24) for _ in range(8)]
            others = [tokens(rng, 280) for _ in range(4)]
            for group in (mine[:3] + others[:2], mine[3:6] + others[2:], mine[6:]):
                tally.add(candidate, reference, group, 8)
    finally:
        candidate.stop()
        reference.stop()
    return tally.words()


NO_CACHE = ["--no-cache-prompt", "--cache-ram", "0"]


def swa_long_batched(start: Callable[..., Server], *kv: str) -> str:
    """Prompts past the sliding-window cache's room per slot (64 + 512 tokens), 4 at once, on 4 slots
    with every prompt cache off (`kv`: --kv-unified or --no-kv-unified, and --swa-full for a full-size
    sliding-window cache), against the reference."""
    candidate, reference = start("swa", ["-np", "4", *kv, *NO_CACHE]), start("swa", REFERENCE)
    rng, tally = random.Random(3), Tally()
    try:
        for length in (640, 1152, 1728, 1152, 1728):
            group = [tokens(rng, length + 7 * i) for i in range(4)]
            tally.add(candidate, reference, group, 16)
    finally:
        candidate.stop()
        reference.stop()
    return tally.words()


def swa_slot_restore(start: Callable[..., Server]) -> str:
    """A slot saved, overwritten by an unrelated prompt and restored, then its prompt continued."""
    files = tempfile.mkdtemp(prefix="gate-slot-files-")
    candidate = start("swa", ["-np", "1", "--cache-prompt", "--cache-ram", "0", "--slot-save-path", files])
    reference, rng, tally, reused = start("swa", REFERENCE), random.Random(4), Tally(), []
    try:
        for i in range(3):
            saved = tokens(rng, 120)
            candidate.complete(saved, 1)
            candidate.post("/slots/0?action=save", {"filename": f"p{i}.bin"})
            candidate.complete(tokens(rng, 50), 1)
            candidate.post("/slots/0?action=restore", {"filename": f"p{i}.bin"})
            full = saved + tokens(rng, 5)
            ids, lps, cached = candidate.complete(full, 8)
            want_ids, want_lps, _ = reference.complete(full, 8)
            gap = max(abs(a - b) for a, b in zip(lps, want_lps, strict=True))
            tally.worst, tally.total = max(tally.worst, gap), tally.total + 1
            tally.wrong += ids != want_ids or gap > 0.005
            reused.append(cached)
    finally:
        candidate.stop()
        reference.stop()
    return f"{tally.words()}; tokens reused after the restore: {', '.join(map(str, reused))}"


@dataclass
class LogprobTally:
    """Greedy completions with logprobs from a speculative candidate, each against the reference's for the
    same body: token lists that differ, tokens reported bare (`bare_when`), the worst logprob move."""

    bare_when: Callable[[dict[str, Any]], bool]
    differ: int = 0
    bare: int = 0
    total: int = 0
    worst: float = 0.0

    def add(self, candidate: Server, reference: Server, body: dict[str, object]) -> None:
        got = candidate.post("/v1/completions", body)["choices"][0]["logprobs"]["content"]  # type: ignore[index]
        want = reference.post("/v1/completions", body)["choices"][0]["logprobs"]["content"]  # type: ignore[index]
        self.differ += [t["id"] for t in got] != [t["id"] for t in want]
        self.bare, self.total = self.bare + sum(self.bare_when(t) for t in got), self.total + len(got)
        # zip: b8672 may stop early (ignore_eos ignored), a shorter list that `differ` counts
        self.worst = max(self.worst, *(abs(a["logprob"] - b["logprob"]) for a, b in zip(got, want, strict=False)))

    def words(self, counted: str, bare: str) -> str:
        """The tally in words: `counted` after the lists that differ, `bare` what a bare token is."""
        found = f"token lists differ in {self.differ} of 3{counted}; {self.bare} of {self.total} tokens {bare}"
        return f"{found}; max abs dlogprob {self.worst:.3g}"


def speculative_tally(
    start: Callable[..., Server],
    spec: tuple[str, ...],
    bare_when: Callable[[dict[str, Any]], bool],
    bodies: Callable[[Server], Iterator[dict[str, object]]],
) -> LogprobTally:
    """A candidate with the speculative flags `spec` and the reference, each body `bodies` yields (given the
    candidate, to prime it) sent to both and tallied."""
    candidate, reference = (
        start("llama", ["-np", "1", "--cache-prompt", *spec]),
        start("llama", REFERENCE),
    )
    tally = LogprobTally(bare_when)
    try:
        for body in bodies(candidate):
            tally.add(candidate, reference, body)
    finally:
        candidate.stop()
        reference.stop()
    return tally


def speculative_logprobs(start: Callable[..., Server], *spec: str) -> str:
    """`spec`: the candidate's speculative flags (n-gram drafts, or a draft model)."""
    rng = random.Random(3)

    def bodies(candidate: Server) -> Iterator[dict[str, object]]:
        for _ in range(3):
            yield {"prompt": tokens(rng, 60), "max_tokens": 8, "temperature": 0, "logprobs": 2, "ignore_eos": True}

    tally = speculative_tally(start, spec, lambda t: not t["top_logprobs"], bodies)
    words = tally.words(" (a shorter list counts)", "without top_logprobs")
    return words + (" (BUG: logprobs left out)" if tally.bare or tally.worst > 0.005 else "")


def ngram_drafted_logprobs(start: Callable[..., Server]) -> str:
    """A prompt P served, then fresh tokens followed by P: does ngram-mod draft from what the earlier request
    left, and are the drafted tokens' logprobs reported (against the reference, same tokens)?"""
    rng = random.Random(5)

    def bodies(candidate: Server) -> Iterator[dict[str, object]]:
        for _ in range(3):
            seen = tokens(rng, 60)
            body = {"prompt": seen, "max_tokens": 24, "temperature": 0, "logprobs": 2, "ignore_eos": True}
            candidate.post("/v1/completions", body)
            yield {**body, "prompt": tokens(rng, 30) + seen}

    tally = speculative_tally(
        start, ("--spec-type", "ngram-mod"), lambda t: t["logprob"] == 0 and not t["top_logprobs"], bodies
    )
    words = tally.words("", "with logprob 0 and no top_logprobs")
    return words + (" (BUG: drafted logprobs left out)" if tally.bare else "")


def ngram_repeat_logprobs(start: Callable[..., Server]) -> str:
    """The same prompt twice with ngram-mod on: is the repeat drafted from the first reply, and are the
    drafted tokens' logprobs reported?"""
    server, rng = start("llama", [*CANDIDATE, "--spec-type", "ngram-mod"]), random.Random(3)
    counts = [0, 0]
    try:
        for _ in range(8):
            body = {"prompt": tokens(rng, 64), "max_tokens": 64, "temperature": 0, "n_probs": 2, "ignore_eos": False}
            for i in range(2):
                content = server.post("/v1/completions", body)["choices"][0]["logprobs"]["content"]  # type: ignore[index]
                counts[i] += sum(t["logprob"] == 0.0 or not t.get("top_logprobs") for t in content) > 1
    finally:
        server.stop()
    found = f"replies with drafted tokens bare (logprob 0, no top_logprobs): first {counts[0]} of 8"
    found += f", asked again {counts[1]} of 8"
    return found + (" (BUG: drafted logprobs unreported)" if any(counts) else "")


def speculative_draft_length(start: Callable[..., Server]) -> str:
    """20 greedy requests of 32 tokens (ignore_eos) with a draft model, the target itself: how many replies
    come back shorter than asked."""
    candidate = start("llama", ["-np", "1", "--cache-prompt", "-md", "{model}", "--draft-max", "4"])
    rng, lengths = random.Random(0), []
    try:
        lengths = [len(candidate.complete(tokens(rng, 50), 32)[0]) for _ in range(20)]
    finally:
        candidate.stop()
    short = [n for n in lengths if n < 32]
    found = f"{len(short)} of 20 replies shorter than 32 tokens"
    return found + (f" ({', '.join(map(str, short))} tokens; BUG: max_tokens not honoured)" if short else "")


def swa_draft_tokens(start: Callable[..., Server]) -> str:
    """On the sliding-window model with a draft model (the target itself), one slot, 8 fresh 120-token
    prompts one at a time: greedy token lists (24 tokens) that differ from the reference's."""
    candidate = start("swa", ["-np", "1", "--cache-prompt", "-md", "{model}", "--draft-max", "4"])
    reference, rng, wrong, first = start("swa", REFERENCE), random.Random(5), 0, []
    try:
        for _ in range(8):
            prompt = tokens(rng, 120)
            got, want = candidate.complete(prompt, 24)[0], reference.complete(prompt, 24)[0]
            if got != want:
                wrong += 1
                at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
                first.append(f"token {at}" if at is not None else f"{len(got)} tokens, short")
    finally:
        candidate.stop()
        reference.stop()
    where = f" (first difference: {', '.join(first)}; BUG)" if wrong else ""
    return f"{wrong} of 8 greedy token lists differ from the reference's" + where


PROBES: dict[str, Callable[[Callable[..., Server]], str]] = {
    "ignore-eos": ignore_eos,
    "eos-stop": eos_stop,
    "one-token-prefix": lambda start: reuse(start, "llama", (1, 1, 1, 2)),
    "swa-short-prefix": lambda start: reuse(start, "swa", (1, 17, 40, 65)),
    "swa-reuse-batched": swa_reuse_batched,
    "swa-slot-restore": swa_slot_restore,
    "speculative-logprobs": lambda start: speculative_logprobs(start, "--spec-type", "ngram-mod"),
    "ngram-drafted-logprobs": ngram_drafted_logprobs,
    "ngram-repeat-logprobs": ngram_repeat_logprobs,
    "speculative-draft-length": speculative_draft_length,
    "speculative-draft-logprobs": lambda start: speculative_logprobs(start, "-md", "{model}", "--draft-max", "4"),
    "swa-draft-tokens": swa_draft_tokens,
    "swa-long-batched-unified": lambda start: swa_long_batched(start, "--kv-unified"),
    "swa-long-batched-split": lambda start: swa_long_batched(start, "--no-kv-unified"),
    "swa-long-batched-swa-full": lambda start: swa_long_batched(start, "--kv-unified", "--swa-full"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", help="comma-separated versions or llama.cpp builds (b8672); default all")
    parser.add_argument("--probes", help=f"comma-separated; default all: {', '.join(PROBES)}")
    args = parser.parse_args()
    builds = pick(args.builds, BUILDS, "build", {f"b{build_number(v)}": v for v in BUILDS})
    probes = pick(args.probes, list(PROBES), "probe")
    work = Path(tempfile.mkdtemp(prefix="gate-engine-build-bugs-"))
    models = {
        "llama": work / "llama.gguf",
        "swa": work / "swa.gguf",
    }
    write_tiny_gguf(models["llama"], TinyLlamaSpec(seed=0))
    write_tiny_gguf(models["swa"], TinyLlamaSpec(seed=0, sliding_window=64, sliding_layers=(0,)))
    print("| build | probe | result |\n| --- | --- | --- |", flush=True)
    for version in builds:
        program = install(version) / "bin" / "llama-server"
        count = iter(range(1000))

        def start(model: str, flags: list[str], program: Path = program, version: str = version, count=count) -> Server:
            return Server(program, models[model], flags, work / f"{version}-{next(count)}.log")

        for name in probes:
            print(f"| b{build_number(version)} | {name} | {PROBES[name](start)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
