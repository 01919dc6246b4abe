"""Real library bugs as a regression suite: each shipped example on a buggy release and on its fix.

    python benchmarks/real_bugs.py                      # every bug in BUGS
    python benchmarks/real_bugs.py --only dynamic-reset prompt-lookup-no-eos

For each bug (docs/real-bugs.md) the example runs with `gate run --check CHECK` in the venv of the
buggy release and of the fixed one (benchmarks/releases.py makes them: hard-linked, torch installed
once). On the buggy release the check must FAIL with the bug's class (the diagnosis' `bug_class` in
results.json); on the fixed release it must PASS. A run of one check is a partial run (exit 5, never
a pass): what is asserted is that check's own status and class. Exits 1 on any bug not caught so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from releases import ROOT, index_releases, release_venv


@dataclass(frozen=True)
class Bug:
    """One shipped bug: where it is, where it is fixed, and what gate must say about it."""

    name: str
    example: str
    check: str
    bug_class: str
    buggy: str
    """A minor release (5.N) that ships the bug."""
    fixed: str
    """A minor release with the fix."""


BUGS = (
    Bug("dynamic-reset", "hf-dynamic", "reset-isolation", "reset-leak", buggy="5.17", fixed="5.18"),
    Bug("quantized-reset", "hf-quantized-hqq", "reset-isolation", "reset-leak", buggy="5.17", fixed="5.18"),
    Bug("prompt-lookup-no-eos", "hf-prompt-lookup", "spec-greedy", "crash", buggy="5.12", fixed="5.13"),
    Bug("assisted-sliding-window", "hf-assisted-sliding-window", "spec-greedy", "crash", buggy="5.12", fixed="5.14"),
    Bug("draft-over-crop", "hf-assisted", "spec-greedy", "crash", buggy="5.15", fixed="5.17"),
    Bug("quantized-beam", "hf-beam-quantized", "reset-isolation", "crash", buggy="5.18", fixed="5.23"),
    Bug(
        "quantized-cache-config",
        "hf-generate-cache-quantized-hqq",
        "reset-isolation",
        "crash",
        buggy="5.18",
        fixed="5.23",
    ),
    Bug("paged-attention-left", "hf-reuse-after-paged", "prefix-sweep", "mask-window", buggy="5.8", fixed="5.9"),
    Bug("static-cache-shared", "hf-generate-static", "schedule-fuzz", "foreign-state", buggy="5.13", fixed="5.15"),
    # QuantizedLayer flushed its full-precision residual counting one token per append (4.46-5.19):
    # a multi-token append leaves 25 tokens unquantised where 15 are declared; fixed in 5.20
    Bug(
        "quantized-residual",
        "hf-quantized-hqq",
        "quant-invariants",
        "quant-residual-overflow",
        buggy="5.18",
        fixed="5.23",
    ),
)
"""The bugs this script replays (docs/real-bugs.md lists them with their upstream history)."""


def run_check(release: str, bug: Bug, work: Path) -> tuple[str, str | None]:
    """(status, bug class) of the bug's check on the example, in that release's venv."""
    venv = release_venv(release)
    out = work / f"{bug.name}-{release}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GATE_THREADS": "1"}
    manifest = ROOT / "examples" / f"{bug.example}.yaml"
    command = [str(venv / "bin" / "gate"), "run", str(manifest), "--out", str(out), "--check", bug.check]
    subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    results = out / "results.json"
    if not results.exists():
        return "no result", None
    for check in json.loads(results.read_text())["checks"]:
        if check["check"] == bug.check:
            return str(check["status"]), (check.get("diagnosis") or {}).get("bug_class")
    return "not run", None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="bug names")
    args = parser.parse_args()
    listed = index_releases()

    def exact(minor: str) -> str:
        return next(v for v in listed if v.startswith(minor + "."))

    failures = []
    with tempfile.TemporaryDirectory(prefix="gate-real-bugs-") as tmp:
        for bug in BUGS:
            if args.only and bug.name not in args.only:
                continue
            status, found = run_check(exact(bug.buggy), bug, Path(tmp))
            caught = status == "fail" and found == bug.bug_class
            print(f"{bug.name}: {bug.example} on {bug.buggy}: {bug.check} {status} ({found})", flush=True)
            status_fixed, _ = run_check(exact(bug.fixed), bug, Path(tmp))
            print(f"{bug.name}: {bug.example} on {bug.fixed}: {bug.check} {status_fixed}", flush=True)
            if not caught:
                failures.append(
                    f"{bug.name}: on {bug.buggy} {bug.check} is {status} ({found}), not fail ({bug.bug_class})"
                )
            if status_fixed != "pass":
                failures.append(f"{bug.name}: on {bug.fixed} {bug.check} is {status_fixed}, not pass")
    for line in failures:
        print(f"real-bugs: {line}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
