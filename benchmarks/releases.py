"""Run the hf examples over the transformers releases in the supported range, each in its own venv.

    python benchmarks/releases.py                                  # every minor release the index has
    python benchmarks/releases.py --releases 5.4 5.15 --only hf-static hf-dynamic
    python benchmarks/releases.py --releases 5.2 5.9 5.17 5.23 --only hf-static hf-generate-paged
    python benchmarks/releases.py --merge                          # the table from the runs in --work

For each minor release (the newest patch of each `5.N` that `pip index versions transformers` lists
inside gate's declared range, `gate.adapters.hf.compat.SUPPORTED`) the script makes `.venv-tf-5.N`:
a hard-linked copy of one base venv (`.venv-tf-base`: torch==2.13.0 installed once, then gate with its
hf and hqq extras), with that release of transformers installed into it. torch is never reinstalled,
and pip's cache makes each release's wheels a local copy (a release whose requirements the index
cannot resolve goes in without them, then each requirement on its own, and the table names what it
lacked). In each venv `benchmarks/examples.py --json`
runs the examples against the verdict each documents for that release (its `# gate-expect
(transformers X.Y-X.Z): VERDICT` lines, else its first line), one release at a time. The table
release x example -> verdict and seconds goes to benchmarks/releases.md (`--out`); a cell that is
not the documented verdict is marked, and the script exits 1 when any is. A release's table in
`--work` keeps the rows of earlier runs with other examples; `--merge` builds the whole table from
those tables without running anything (releases measured in several sittings).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / ".venv-tf-base"
TORCH = "torch==2.13.0"
"""The CPU build on this machine's local disk; any other spec would pull a multi-GB CUDA build."""
LOW, HIGH = (5, 2), (6, 0)
"""gate's declared range, transformers>=5.2,<6 (gate/adapters/hf/compat.py SUPPORTED)."""


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def index_releases() -> list[str]:
    """The newest patch of every minor release in range that the package index lists."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "transformers"], capture_output=True, text=True, check=True
    ).stdout
    listed = re.search(r"Available versions: (.*)", out)
    if not listed:
        raise SystemExit(f"releases: no version list in pip's answer: {out[:200]!r}")
    newest: dict[tuple[int, int], str] = {}
    for version in listed.group(1).split(", "):
        if not re.fullmatch(r"\d+\.\d+\.\d+", version.strip()):
            continue  # pre-releases are not what users have
        minor = _minor(version)
        if LOW <= minor < HIGH:
            newest.setdefault(minor, version.strip())  # the index lists newest first
    return [newest[m] for m in sorted(newest)]


def _pip(venv: Path, *args: str) -> None:
    env = {**os.environ, "DISABLE_CUDA": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args], check=True, env=env)


def base_venv() -> Path:
    """The venv every release's venv is copied from: torch, then gate[hf,hqq] and the test tools."""
    if not (BASE / ".gate-base").exists():
        if not (BASE / "bin" / "python").exists():
            subprocess.run(["python3", "-m", "venv", str(BASE)], check=True)
        _pip(BASE, TORCH)
        _pip(BASE, "-e", f"{ROOT}[hf,hqq]", "pytest", "hypothesis")
        (BASE / ".gate-base").write_text("")
    return BASE


def release_venv(release: str) -> Path:
    """`.venv-tf-5.N` with transformers `release`: the base hard-linked (torch shared, never
    reinstalled), its console scripts pointed at the copy, then that transformers installed."""
    venv = ROOT / f".venv-tf-{'.'.join(release.split('.')[:2])}"
    stamp = venv / f".transformers-{release}"
    if stamp.exists():
        drop_unrequired(venv, "kernels")
        return venv
    base = base_venv()
    if venv.exists():
        shutil.rmtree(venv)
    partial = venv.with_name(venv.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    subprocess.run(["cp", "-al", str(base), str(partial)], check=True)
    for script in (partial / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            text = script.read_bytes()
            if text.startswith(b"#!") and str(base).encode() in text:
                script.unlink()  # a hard link: write a new file, never the base's
                script.write_bytes(text.replace(str(base).encode(), str(venv).encode()))
                script.chmod(0o755)
    (partial / ".gate-base").unlink(missing_ok=True)
    partial.rename(venv)
    try:
        _pip(venv, f"transformers=={release}")
    except subprocess.CalledProcessError:
        install_what_resolves(venv, release)
    drop_unrequired(venv, "kernels")
    stamp.write_text("")
    return venv


def drop_unrequired(venv: Path, package: str) -> None:
    """Uninstall `package` from a release's venv when its transformers does not require it. The base
    venv carries what the newest release requires (5.25 requires kernels>=0.19.1); an older release
    imports kernels only when it is installed, and kernels 0.19's API breaks their import
    (5.9-5.23: `LayerRepository` "Either a revision or a version must be specified"), so each release
    runs as its own requirements install it. Uninstalling a hard-linked copy leaves the base intact."""
    probe = (
        "import importlib.metadata as m, sys\n"
        "from packaging.requirements import Requirement\n"
        "names = {Requirement(r).name.lower() for r in m.requires('transformers') or [] if ';' not in r}\n"
        "try:\n    m.version(sys.argv[1])\nexcept m.PackageNotFoundError:\n    print('absent')\n"
        "else:\n    print('required' if sys.argv[1] in names else 'drop')\n"
    )
    said = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe, package], capture_output=True, text=True, check=True
    ).stdout.strip()
    if said == "drop":
        env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        uninstall = [str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-y", "-q", package]
        subprocess.run(uninstall, check=True, env=env)
        print(f"releases: {venv.name}: {package} uninstalled (its transformers does not require it)", flush=True)


LACKING = ".requirements-not-installed"
"""Lists, in a release's venv, the requirements of its transformers that the index could not satisfy."""


def install_what_resolves(venv: Path, release: str) -> None:
    """When the index cannot resolve a release's requirements (5.25.0 requires kernels>=0.19.1, and the
    index's newest kernels is 0.17.2): that transformers without its dependencies, then each of its
    unconditional requirements on its own; the ones pip could not install are listed in the venv's
    LACKING file, and the table names them against the release, so the cells say what they were
    measured without."""
    _pip(venv, "--no-deps", f"transformers=={release}")
    listing = [
        str(venv / "bin" / "python"),
        "-c",
        "import importlib.metadata as m; print(*(r for r in m.requires('transformers') or [] if ';' not in r))",
    ]
    missing = []
    for req in subprocess.run(listing, capture_output=True, text=True, check=True).stdout.split():
        try:
            _pip(venv, req)
        except subprocess.CalledProcessError:
            missing.append(req)
    (venv / LACKING).write_text("".join(f"{req}\n" for req in missing))
    print(f"releases: transformers {release} installed without {', '.join(missing) or 'nothing'}", flush=True)


def lacking(where: Path) -> list[str]:
    """The requirements a release's venv (or the run in a per-release work folder) was installed without."""
    path = where / LACKING
    return path.read_text().split() if path.exists() else []


def run_release(release: str, only: list[str] | None, out: Path) -> dict[str, dict[str, object]]:
    """The examples on one release: example -> its row from benchmarks/examples.py."""
    venv = release_venv(release)
    target = out / release
    earlier = work_rows(target)  # rows of an earlier run with other examples are kept
    target.mkdir(parents=True, exist_ok=True)
    (target / LACKING).unlink(missing_ok=True)
    if (venv / LACKING).exists():  # the table is built from the work folder, perhaps in another checkout
        shutil.copyfile(venv / LACKING, target / LACKING)
    examples = str(ROOT / "benchmarks" / "examples.py")
    command = [str(venv / "bin" / "python"), examples, "--json", "--out", str(target), "--work", str(target / "runs")]
    if only:
        command += ["--only", *only]
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=False)
    print(f"releases: transformers {release}: {time.perf_counter() - started:.0f} s", flush=True)
    rows = {**earlier, **work_rows(target)}
    data = json.loads((target / "hf_examples_cpu.json").read_text())
    data["rows"] = [rows[name] for name in sorted(rows)]
    (target / "hf_examples_cpu.json").write_text(json.dumps(data, indent=2) + "\n")
    return rows


def work_rows(target: Path) -> dict[str, dict[str, object]]:
    """example -> row of the per-release table benchmarks/examples.py left in `target`, if any."""
    table = target / "hf_examples_cpu.json"
    if not table.exists():
        return {}
    return {str(row["example"]): row for row in json.loads(table.read_text())["rows"]}


def rejudge(release: str, name: str, row: dict[str, object]) -> dict[str, object]:
    """A stored row judged again against the example's header as it is now (its annotations may have
    changed since the run): the documented verdict for that release, and whether the run said it."""
    from examples import EXIT_CODES, expected_verdict, said_as_documented

    documented = expected_verdict(ROOT / "examples" / f"{name}.yaml", installed=release)
    said = documented is not None and row["exit"] == EXIT_CODES[documented]
    said = said and said_as_documented(str(row["verdict"]), documented)
    return {**row, "documented": documented, "as_documented": said}


def _cell(row: dict[str, object] | None) -> str:
    if row is None:
        return "–"
    said = str(row["verdict"])
    if said.startswith("verdict: "):
        verdict = re.split(r":| \(", said.removeprefix("verdict: "))[0].lower()
    else:  # an error's or a rejection's message: the exit code names it
        verdict = {2: "rejected", 3: "error"}.get(int(str(row["exit"])), f"exit {row['exit']}")
    text = f"{verdict} {row['seconds']} s"
    return text if row["as_documented"] else f"**{text} ≠ {row['documented']}**"


def table(
    results: dict[str, dict[str, dict[str, object]]], listed: list[str], without: dict[str, list[str]] | None = None
) -> str:
    """Release x example: one row per release (oldest first), one column per example, `–` where the
    example did not run on that release; `without` names what a release's venv lacked."""
    releases = sorted(results, key=lambda v: tuple(int(x) for x in v.split(".")))
    examples = sorted({name for rows in results.values() for name in rows})
    wrong = sum(1 for rows in results.values() for row in rows.values() if not row["as_documented"])
    cells = sum(len(rows) for rows in results.values())
    lines = [
        "# hf examples over transformers releases (benchmarks/releases.py)",
        "",
        f"Minor releases the index lists in range (>=5.2,<6): {', '.join(listed)}.",
        f"Run here: {', '.join(releases)}; CPU, float32, one torch thread. Each cell: the verdict and the",
        "wall seconds of `gate run`; a bold cell is not the verdict the example documents for that release",
        f"(its `# gate-expect (transformers X.Y-X.Z)` lines). Cells: {cells}; not as documented: {wrong}.",
        *(
            f"{release} was installed without {', '.join(reqs)}: the index could not satisfy "
            + ("it." if len(reqs) == 1 else "them.")
            for release in releases
            if (reqs := (without or {}).get(release))
        ),
        "",
        "| release | " + " | ".join(examples) + " |",
        "| --- |" + " --- |" * len(examples),
    ]
    for release in releases:
        lines.append(f"| {release} | " + " | ".join(_cell(results[release].get(name)) for name in examples) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", nargs="*", help="minor releases (5.N) or exact versions; default: the index's")
    parser.add_argument("--only", nargs="*", default=None, help="example names (without .yaml); default: every hf-*")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "releases.md")
    parser.add_argument("--prepare", action="store_true", help="only set the venvs up (CI does it in the background)")
    parser.add_argument("--work", type=Path, default=ROOT / "out" / "releases", help="per-release example tables")
    parser.add_argument(
        "--merge", action="store_true", help="run nothing: the table from the per-release tables already in --work"
    )
    args = parser.parse_args()
    listed = index_releases()
    wanted = args.releases or [".".join(v.split(".")[:2]) for v in listed]
    chosen = []
    for release in wanted:
        exact = [v for v in listed if v == release or v.startswith(release + ".")]
        if not exact:
            known = ", ".join(listed)
            print(f"releases: {release} is not a release in range the index lists ({known})", file=sys.stderr)
            return 2
        chosen.append(exact[0] if release.count(".") == 1 else release)
    if args.prepare:
        for release in chosen:
            print(f"releases: {release_venv(release)} ready", flush=True)
        return 0
    if args.merge:
        found = {release: work_rows(args.work / release) for release in chosen}
        results = {
            release: {n: rejudge(release, n, row) for n, row in rows.items() if not args.only or n in args.only}
            for release, rows in found.items()
            if rows
        }
    else:
        results = {release: run_release(release, args.only, args.work) for release in chosen}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table(results, listed, {release: lacking(args.work / release) for release in results}))
    print(args.out.read_text())
    wrong = [(r, n) for r, rows in results.items() for n, row in rows.items() if not row["as_documented"]]
    for release, name in wrong:
        print(f"releases: {name} on transformers {release}: not its documented verdict", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
