"""Run the hf example set on CUDA in bfloat16 and write a verdict table.

    python benchmarks/hf_cuda.py [--out DIR] [--only NAME ...]

Each examples/hf-*.yaml is rewritten with `subject.device: cuda` and `subject.dtype: bfloat16`
(tolerances scale with the dtype), run through `gate run`, and its verdict, exit code and wall
time go into DIR/hf_cuda_results.md (default benchmarks/). Without a CUDA device it does nothing
and exits 3 (gate's "could not run here"), saying so.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    parser.add_argument("--only", nargs="*", default=None, help="example names (without .yaml)")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print(
            "hf_cuda: no CUDA device visible to torch here; nothing run. Run it on a GPU machine "
            "(the CPU verdicts are in docs/hf-adapter.md).",
            file=sys.stderr,
        )
        return 3

    work = Path("/tmp/gate-hf-cuda")
    work.mkdir(parents=True, exist_ok=True)
    rows = [
        f"# hf examples on CUDA, bfloat16\n\ndevice: {torch.cuda.get_device_name(0)}; torch {torch.__version__}\n",
        "| example | exit | verdict | seconds |",
        "| --- | --- | --- | --- |",
    ]
    for manifest in sorted((ROOT / "examples").glob("hf-*.yaml")):
        name = manifest.stem
        if args.only and name not in args.only:
            continue
        data = yaml.safe_load(manifest.read_text())
        data["subject"]["device"] = "cuda"
        data["subject"]["dtype"] = "bfloat16"
        target = work / f"{name}.yaml"
        target.write_text(yaml.safe_dump(data, sort_keys=False))
        started = time.perf_counter()
        gate = Path(sys.executable).parent / "gate"  # the console script of this environment
        run = subprocess.run(
            [str(gate), "run", str(target), "--out", str(work / name)], capture_output=True, text=True, cwd=ROOT
        )
        seconds = time.perf_counter() - started
        verdict = next(
            (line for line in run.stdout.splitlines() if line.startswith("verdict")),
            (run.stderr.strip().splitlines() or ["?"])[-1],
        )
        rows.append(f"| {name} | {run.returncode} | {verdict} | {seconds:.1f} |")
        print(rows[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "hf_cuda_results.md").write_text("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
