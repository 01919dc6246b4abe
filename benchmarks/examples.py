"""Run examples through `gate run` and check each verdict against the one its header documents.

    python benchmarks/examples.py                                  # hf-*: CPU, float32
    python benchmarks/examples.py --set reference                  # every reference-* example
    python benchmarks/examples.py --device cuda --dtype bfloat16   # a GPU (benchmarks/hf_cuda.sh)
    python benchmarks/examples.py --only hf-dynamic hf-static
    python benchmarks/examples.py --out benchmarks/transformers-5.2   # .ci/hf-matrix.sh, low end

A header line `# gate-expect (transformers X.Y): VERDICT`, or `(transformers X.Y-X.Z)` for the minor
releases X.Y through X.Z, overrides the documented verdict where such a release is installed: a
release with a known bug is expected to FAIL there (benchmarks/releases.py runs them all).

Every example opens with `# gate-expect: pass|fail|awaiting-approval|rejected|error`: its verdict on
a CPU in the main environment (tests/engine/test_examples.py keeps the header on every file). Each
manifest is rewritten with the requested device and dtype (tolerances scale with the dtype), run in
its own process, and its exit code, verdict line and wall time go into DIR/<set>_examples_<device>.md
(default benchmarks/). On the CPU a verdict other than the documented one makes the script exit 1;
on another device the table is the record (some verdicts differ by design there, e.g. hf-offloaded
runs). Without CUDA, `--device cuda` exits 3 saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXPECT = re.compile(r"^# gate-expect: (pass|fail|unproven|awaiting-approval|rejected|error)\s*$")
VERDICT_WORDS = "pass|fail|unproven|awaiting-approval|rejected|error"
EXPECT_ON = re.compile(rf"^# gate-expect \(transformers (\d+\.\d+)(?:-(\d+\.\d+))?\): ({VERDICT_WORDS})\b")
EXIT_CODES = {"pass": 0, "fail": 1, "unproven": 6, "rejected": 2, "error": 3, "awaiting-approval": 4}


def _installed_transformers() -> str | None:
    try:
        from importlib.metadata import version

        return ".".join(version("transformers").split(".")[:2])
    except Exception:
        return None


def _minor(release: str) -> tuple[int, int]:
    major, minor = release.split(".")[:2]
    return int(major), int(minor)


def expected_verdict(manifest: Path, installed: str | None = None) -> str | None:
    """The documented verdict: the first `# gate-expect (transformers X.Y[-X.Z]): VERDICT` line whose
    releases hold the installed (or the given) transformers, else the first line `# gate-expect:
    VERDICT`, or None without one."""
    lines = manifest.read_text().split("\n")
    installed = installed or _installed_transformers()
    for line in lines:
        if not line.startswith("#"):
            break
        on = EXPECT_ON.match(line)
        if on and installed and _minor(on.group(1)) <= _minor(installed) <= _minor(on.group(2) or on.group(1)):
            return on.group(3)
    found = EXPECT.match(lines[0])
    return found.group(1) if found else None


def expected_exit(manifest: Path) -> int | None:
    """The documented CPU exit code (rejected: 2, the bad-input code)."""
    verdict = expected_verdict(manifest)
    return None if verdict is None else EXIT_CODES[verdict]


SAID = re.compile(r"^verdict: ([A-Z][-A-Z ]*?)(?::| \(|,|$)")


def said_as_documented(line: str, documented: str | None) -> bool:
    """Whether a run's `verdict: WORD ...` line says the documented verdict (the word as well as the exit
    code: a warning-only unproven and a pass both exit 0); a line of another shape (a rejection's or
    an error's message) is judged by the exit code alone."""
    said = SAID.match(line)
    if said is None or documented in (None, "rejected", "error"):
        return True
    return said.group(1).strip().lower().replace(" ", "-") == documented


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (tiny models: 1 is fastest)")
    parser.add_argument("--set", default="hf", help="example file prefix: hf, reference, ... (examples/<set>-*.yaml)")
    parser.add_argument("--only", nargs="*", default=None, help="example names (without .yaml)")
    parser.add_argument("--work", type=Path, default=None, help="where the rewritten manifests and runs go")
    parser.add_argument("--json", action="store_true", help="also write the rows as DIR/<set>_examples_<device>.json")
    args = parser.parse_args()

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("examples: no CUDA device visible to torch here; nothing run.", file=sys.stderr)
        return 3
    device_name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    import transformers

    work = args.work or Path(f"/tmp/gate-{args.set}-examples-{args.device.replace(':', '')}")
    work.mkdir(parents=True, exist_ok=True)
    rows = [
        f"# {args.set} examples on {args.device}, {args.dtype}\n\n"
        f"device: {device_name}; torch {torch.__version__}; transformers {transformers.__version__}\n",
        "| example | expected (CPU) | exit | verdict | seconds |",
        "| --- | --- | --- | --- | --- |",
    ]
    mismatched = []
    records: list[dict[str, object]] = []
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"{args.set}_examples_{args.device.split(':')[0]}"

    def write(rows: list[str], records: list[dict[str, object]]) -> None:
        stem.with_suffix(".md").write_text("\n".join(rows) + "\n")
        if args.json:  # the rows as data (benchmarks/releases.py reads them)
            payload = {"transformers": transformers.__version__, "torch": torch.__version__, "rows": records}
            stem.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    gate = Path(sys.executable).parent / "gate"  # the console script of this environment
    for manifest in sorted((ROOT / "examples").glob(f"{args.set}-*.yaml")):
        name = manifest.stem
        if args.only and name not in args.only:
            continue
        expected = expected_exit(manifest)
        command_name = "validate" if expected == EXIT_CODES["rejected"] else "run"
        data = yaml.safe_load(manifest.read_text())
        data["subject"]["device"] = args.device
        data["subject"]["dtype"] = args.dtype
        target = work / f"{name}.yaml"
        target.write_text(yaml.safe_dump(data, sort_keys=False))
        command = [str(gate), "validate", str(target)]
        if command_name == "run":
            command = [str(gate), "run", str(target), "--out", str(work / name), "--threads", str(args.threads)]
        started = time.perf_counter()
        run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)
        seconds = time.perf_counter() - started
        verdict = next(
            (line for line in run.stdout.splitlines() if line.startswith("verdict")),
            (run.stderr.strip().splitlines() or ["?"])[-1],
        ).replace("|", "/")
        verdict = verdict if len(verdict) <= 160 else verdict[:159] + "…"
        as_documented = run.returncode == expected and said_as_documented(verdict, expected_verdict(manifest))
        if args.device == "cpu" and not as_documented:
            mismatched.append(f"{name}: exit {run.returncode} ({verdict}), documented {expected_verdict(manifest)}")
        documented = f"{expected_verdict(manifest)} (exit {expected})"
        records.append(
            {
                "example": name,
                "documented": expected_verdict(manifest),
                "exit": run.returncode,
                "verdict": verdict,
                "seconds": round(seconds, 1),
                "as_documented": as_documented,
            }
        )
        rows.append(f"| {name} | {documented} | {run.returncode} | {verdict} | {seconds:.1f} |")
        print(rows[-1], flush=True)
        write(rows, records)  # after every row: a run stopped part-way keeps the rows it measured
    write(rows, records)
    for line in mismatched:
        print(f"examples: {line}", file=sys.stderr)
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
