"""Gate llama.cpp's engine examples against many llama.cpp builds, prebuilt (benchmarks/engine-releases.md).

    python benchmarks/engine_builds.py                                   # every build, every example
    python benchmarks/engine_builds.py --builds b8672,b11549 --examples engine-llamacpp-hosted

Each build is a CPU wheel of xllamacpp (PyPI, version YEAR.MONTH.BUILD: llama.cpp's server embedded,
about 34 MB), installed once into .cache/engine-builds/<version>/ by gate/adapters/openai/builds.py
(`pip install --no-deps --target`, shared with `gate bisect --llamacpp-builds`;
a second call finds it and does nothing) with a `bin/llama-server` wrapper that runs
gate/adapters/openai/xllamacpp_server.py on it. Each example then runs through `gate run` with that
folder first on PATH, one run at a time, and its exit code is checked against the example's documented
verdict (`# gate-expect:`). The table keeps the rows of builds and examples not run this time, so
subsets add up; it gives, per build and example: the documented verdict, the exit code, the verdict
line, the first failing check, the build info the servers reported, and the seconds. Notes under the
table (from its first `## ` heading on) are kept when the table is rewritten.
Where a build has a known bug (`KNOWN_BUGS`: a build range, an example, the exit code and the check
that shows it), the run must show that bug instead (the bug is caught: the exit code, the check failing
or erroring, with its class where one is listed); elsewhere it must give the documented verdict.
Exit 1 when a run gives neither; exit 2 on an unknown build or example.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_llamacpp import EXAMPLES, EXIT, documented_verdict
from engine_memory import run

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from gate.adapters.openai import builds  # noqa: E402
from gate.adapters.openai.builds import BUILDS  # noqa: E402
from gate.adapters.openai.xllamacpp_server import UsageError, build_number  # noqa: E402

CACHE = ROOT / builds.CACHE


@dataclass(frozen=True)
class KnownBug:
    """A bug of llama.cpp's builds `first`..`last` (llama.cpp build numbers, both buggy; `fixed`: the
    first build here without it) that `example` shows: gate exits `exit`, with `check` in state `status`
    and, for a failure, diagnosis class `bug_class` (docs/real-bugs.md, "llama.cpp builds")."""

    name: str
    first: int
    last: int
    fixed: int
    example: str
    exit: int
    check: str
    status: str
    bug_class: str | None
    upstream: str

    def checks(self) -> list[str]:
        """The checks that may show it (`check`: one, or several separated by " or ": a bug whose runs
        fail one check or the other, as the batch it lands in decides)."""
        return self.check.split(" or ")

    def covers(self, build: int, example: str) -> bool:
        return self.example == example and self.first <= build <= self.last


BUILD_EXAMPLES = [*EXAMPLES, "engine-llamacpp-speculative", "engine-llamacpp-speculative-draft"]
"""The examples run against the builds: the llama.cpp examples, and those whose flags only the builds'
launcher is known to map (--spec-type: the compiled reference build is not run on them)."""

KNOWN_BUGS = [
    *(
        KnownBug(
            "ignore-eos-ignored",
            8672,
            8672,
            8929,
            example,
            14,
            "engine-batch-invariance",
            "error",
            None,
            "ggml-org/llama.cpp PR #21203",
        )
        for example in (
            "engine-llamacpp-prefix",
            "engine-llamacpp-defaults",
            "engine-llamacpp-quantised-kv",
            "engine-llamacpp-speculative",
        )
    ),
    KnownBug(
        "swa-prefix-not-reused",
        8672,
        9294,
        9538,
        "engine-llamacpp-sliding-window",
        1,
        "engine-prefix-parity",
        "fail",
        "missed-reuse",
        "none found: the SWA cache keeps n_swa + n_ubatch cells (ggml-org/llama.cpp PR #13194, #13833)",
    ),
    *(
        KnownBug(
            "one-token-prefix-not-reused",
            9294,
            9294,
            9538,
            example,  # the speculative example's candidate is the prefix example's plus --spec-type
            1,
            "engine-prefix-parity",
            "fail",
            "missed-reuse",
            "not found upstream",
        )
        for example in ("engine-llamacpp-prefix", "engine-llamacpp-defaults", "engine-llamacpp-speculative")
    ),
    KnownBug(
        "swa-reuse-under-load-wrong",
        9538,
        9873,
        10068,
        "engine-llamacpp-sliding-window",
        1,
        "engine-concurrent-conversations or engine-batch-invariance",
        "fail",
        "continuous-batching",
        "not found upstream",
    ),
    KnownBug(
        "swa-slot-restore-foreign-checkpoint",
        9538,
        9873,
        10068,
        "engine-llamacpp-sliding-window",
        1,  # wrong output on the restore path: a failure (engine-serving 5 denies on engine-slot-restore)
        "engine-slot-restore",
        "fail",
        "restored-state",
        "not found upstream: b10068 clears a restored slot's checkpoints (issue #25913 reports the restore "
        "then reuses nothing, as b10068 to b11063 do here)",
    ),
    KnownBug(
        "ngram-drafted-logprobs-unreported",
        8929,
        8929,
        9093,  # not fixed there: from b9093 ngram-mod's defaults (n_match=24, was n=12) draft nothing here
        "engine-llamacpp-speculative",
        1,
        "engine-concurrent-conversations",
        "fail",
        None,  # gate names it continuous-batching; the cause is a drafted token's logprob reported as 0
        "the open issue #27972 (drafted tokens' logprobs reported as 0): ngram-mod drafts from the n-grams of "
        "requests the earlier checks sent (benchmarks/engine-bisect.md; engine_build_bugs.py --probes "
        "ngram-drafted-logprobs)",
    ),
    KnownBug(
        "speculative-logprobs-unreported",
        8672,
        8672,
        8929,
        "engine-llamacpp-speculative",
        1,  # by itself; with ignore-eos-ignored on the same build the run errors (exit 14)
        "engine-prefix-parity",
        "fail",
        "unreported-logprobs",
        "not found upstream (the open issue #27972 and PR #27196: logprobs of drafted tokens on later builds)",
    ),
]
"""Known bugs of the builds in BUILDS, found by this script's runs and reproduced without gate by
benchmarks/engine_build_bugs.py (benchmarks/engine-releases.md, docs/real-bugs.md)."""


def expected(build: int, example: str, documented: str) -> tuple[int | None, list[KnownBug]]:
    """The exit code a run of `example` on `build` must give, and the known bugs it must show."""
    bugs = [bug for bug in KNOWN_BUGS if bug.covers(build, example)]
    return (max(bug.exit for bug in bugs) if bugs else EXIT.get(documented)), bugs


def judge_run(build: int, example: str, documented: str, code: int, record: dict[str, object] | None) -> list[str]:
    """What departs from the expectation (empty: as expected): a known bug not shown, or the
    documented verdict not given."""
    want, bugs = expected(build, example, documented)
    where = f"b{build} {example}"
    wrong = (
        []
        if code == want
        else [f"{where}: exit {code}, expected {want} ({', '.join(b.name for b in bugs) or documented})"]
    )
    checks = {c["check"]: c for c in (record or {}).get("checks", [])}  # type: ignore[attr-defined]
    for bug in bugs:
        shown = [checks[name] for name in bug.checks() if checks.get(name, {}).get("status") == bug.status]
        classes = [(got.get("diagnosis") or {}).get("bug_class") for got in shown]
        if shown and bug.bug_class is not None and bug.bug_class not in classes:
            wrong.append(
                f"{where}: known bug {bug.name} shows in {', '.join(g['check'] for g in shown)} "
                f"with class {', '.join(map(str, classes))}, not {bug.bug_class}"
            )
        elif not shown:
            seen = ", ".join(f"{name} is {(checks.get(name) or {}).get('status')}" for name in bug.checks())
            wrong.append(f"{where}: known bug {bug.name} not shown: {seen}, expected {bug.status}")
    return wrong


TABLE_HEAD = [
    "| build | xllamacpp | example | documented | exit | verdict | first failing check | build info served | seconds |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
]


def install(version: str) -> Path:
    """xllamacpp==version in .cache/engine-builds/<version>/ of this repository (gate.adapters.openai.builds)."""
    return builds.install(version, CACHE)


def pick(names: str | None, known: list[str], what: str, alias: object = None) -> list[str]:
    """The named subset of `known` (comma-separated; `all` or none: every one; a build also as
    `b<BUILD>`), in `known`'s order."""
    try:
        return builds.pick(names, known, what)
    except UsageError as err:
        raise SystemExit(f"engine_builds: {err}") from None


def first_failing(record: dict[str, object] | None) -> str:
    if record is None:
        return "(no results.json)"
    for check in record["checks"]:  # type: ignore[attr-defined]
        if check["status"] in ("fail", "error"):
            message = str(check["message"]).replace("|", "/")
            return f"{check['check']} ({check['status']}): {message[:120] + '…' if len(message) > 120 else message}"
    return "-"


def served_builds(node: object) -> set[str]:
    """Every `engine_version` the run's evidence records (the servers' /props build_info)."""
    found: set[str] = set()
    if isinstance(node, dict):
        if isinstance(node.get("engine_version"), str):
            found.add(node["engine_version"])
        for value in node.values():
            found |= served_builds(value)
    elif isinstance(node, list):
        for value in node:
            found |= served_builds(value)
    return found


def old_rows(path: Path) -> dict[tuple[str, str], str]:
    """The table's rows already in `path`, by (xllamacpp version, example)."""
    if not path.exists():
        return {}
    rows = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| b") and len(cells) >= 3 and cells[1] in BUILDS:
            rows[(cells[1], cells[2])] = line
    return rows


def write_table(path: Path, rows: dict[tuple[str, str], str]) -> None:
    """The table, then whatever the file held from its first `## ` heading on (the notes on its rows)."""
    old = path.read_text() if path.exists() else ""
    notes = old[old.index("\n## ") :] if "\n## " in old else ""
    order = {(b, e): (BUILDS.index(b), BUILD_EXAMPLES.index(e) if e in BUILD_EXAMPLES else 99) for b, e in rows}
    lines = [
        "# gate's llama.cpp examples against llama.cpp builds (xllamacpp CPU wheels)",
        "",
        "Each row: one `gate run` of the example with the build's `llama-server` wrapper first on PATH",
        '(gate/adapters/openai/xllamacpp_server.py; docs/engines.md, "Engine builds via xllamacpp"). Build',
        "info served: what the servers' GET /props reported (`engine_version` in the evidence). Written by",
        "`benchmarks/engine_builds.py`; rows of runs not repeated are kept, so the table adds up over subsets.",
        "",
        *TABLE_HEAD,
        *(rows[key] for key in sorted(rows, key=order.__getitem__)),
    ]
    partial = path.with_name(path.name + ".partial")
    partial.write_text("\n".join(lines) + "\n" + notes)
    partial.replace(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", help="comma-separated versions or llama.cpp builds (b8672); default all")
    parser.add_argument("--examples", help=f"comma-separated examples; default all: {', '.join(BUILD_EXAMPLES)}")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "engine-releases.md")
    parser.add_argument("--install-only", action="store_true", help="install the builds and stop")
    args = parser.parse_args()
    versions = pick(args.builds, BUILDS, "build")
    examples = pick(args.examples, BUILD_EXAMPLES, "example")
    dirs = {version: install(version) for version in versions}
    for version, folder in dirs.items():
        print(f"xllamacpp {version}: {folder / 'bin' / 'llama-server'}", flush=True)
    if args.install_only:
        return 0
    rows, mismatched = old_rows(args.out), []
    work = Path(tempfile.mkdtemp(prefix="gate-engine-builds-"))
    for version in versions:
        env = {
            **os.environ,
            "PATH": f"{dirs[version] / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
            "GATE_THREADS": "1",
            "OMP_NUM_THREADS": "1",
        }
        for name in examples:
            manifest = ROOT / "examples" / f"{name}.yaml"
            documented = documented_verdict(manifest)
            started = time.perf_counter()
            code, _, record, verdict, _ = run(manifest, work / version / name, env)
            seconds = time.perf_counter() - started
            departures = judge_run(build_number(version), name, documented, code, record)
            mismatched += departures
            bugs = expected(build_number(version), name, documented)[1]
            if not departures:
                caught = f"known bug {', '.join(b.name for b in bugs)} caught" if bugs else f"documented {documented}"
                print(f"engine builds: b{build_number(version)} {name}: exit {code} as expected ({caught})", flush=True)
            served = ", ".join(sorted(served_builds(record))) or "?"
            rows[(version, name)] = (
                f"| b{build_number(version)} | {version} | {name} | {documented} | {code} | {verdict} | "
                f"{first_failing(record)} | {served} | {seconds:.1f} |"
            )
            print(rows[(version, name)], flush=True)
            write_table(args.out, rows)
    for line in mismatched:
        print(f"engine builds: {line}", file=sys.stderr)
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
