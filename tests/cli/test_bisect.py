"""`gate bisect` (gate/cli/bisect.py): the search on a counting probe, the command's refusals, and one
real bisection over xllamacpp builds (`engine`: skipped when the builds are not installed)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate.adapters.openai.builds import BUILDS, CACHE, installed, label
from gate.adapters.openai.xllamacpp_server import write_wrapper
from gate.cli.bisect import command, find_change

ROOT = Path(__file__).resolve().parents[2]


def counting(outcomes: list[str]) -> tuple[list[int], object]:
    calls: list[int] = []

    def probe(index: int) -> str:
        calls.append(index)
        return outcomes[index]

    return calls, probe


@pytest.mark.parametrize("count", [2, 3, 5, 8, 9, 13, 17])
def test_every_change_point_is_found_in_the_fewest_runs(count: int) -> None:
    """One change at index c (1..count-1), or none: found exactly, each index run at most once, the
    first first, and at most 1 + ceil(log2(count)) runs (5 for 13 builds), the fewest that tell the
    count possible answers apart."""
    bound = 1 + math.ceil(math.log2(count))
    for change_at in range(1, count + 1):  # count: no change
        outcomes = ["old"] * change_at + ["new"] * (count - change_at)
        calls, probe = counting(outcomes)
        found = find_change(count, probe)  # type: ignore[arg-type]
        wanted = (change_at - 1, change_at) if change_at < count else (None, None)
        assert (found.before, found.after) == wanted
        assert calls == found.probed and len(set(calls)) == len(calls)
        assert calls[0] == 0
        assert len(calls) <= bound, (change_at, calls)


def test_thirteen_builds_take_at_most_five_runs() -> None:
    """13 builds: 13 possible answers (no change, or a change at one of 12 builds), 4 halvings after the first."""
    runs = []
    for change_at in range(1, 14):
        calls, probe = counting(["old"] * change_at + ["new"] * (13 - change_at))
        find_change(13, probe)  # type: ignore[arg-type]
        runs.append(len(calls))
    assert max(runs) == 5


def test_the_sliding_window_builds_take_four_runs() -> None:
    """The outcomes benchmarks/engine-releases.md records for engine-llamacpp-sliding-window on the 13
    builds: two change points (prefix-parity failing, then wrong replies, then pass). The search lands
    on the first of them here, b9294 -> b9538, in 4 runs."""
    outcomes = [("fail", "engine-prefix-parity")] * 4 + [("fail", "engine-batch-invariance")] * 2
    outcomes += [("fail", "engine-concurrent-conversations")] + [("pass", None)] * 6
    calls, probe = counting(outcomes)  # type: ignore[arg-type]
    found = find_change(13, probe)  # type: ignore[arg-type]
    assert (label(BUILDS[found.before or 0]), label(BUILDS[found.after or 0])) == ("b9294", "b9538")
    assert calls == [0, 6, 3, 4]


def test_no_change_probes_down_to_the_last_build() -> None:
    calls, probe = counting(["same", "other", "same", "same"])  # not one change point: the search says so
    found = find_change(4, probe)  # type: ignore[arg-type]
    assert (found.before, found.after, calls) == (None, None, [0, 2, 3])


def test_fewer_than_two_builds_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        find_change(1, lambda i: i)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "exactly one of"),
        (["--llamacpp-builds", "b8672,b8929", "--binaries", "."], "exactly one of"),
        (["--llamacpp-builds", "b1,b8929"], "unknown build 'b1'"),
        (["--llamacpp-builds", "b8672"], "at least 2 builds"),
        (["--llamacpp-builds", "b8672,b8929", "--build-cmd", "make"], "--build-cmd goes with --commits"),
        (["--binaries", "no-such-folder,other"], "no-such-folder: neither a folder"),
        (["--commits", "v1", "--build-cmd", "make"], "is not A..B"),
        (["--commits", "v1..v2"], "--commits needs --build-cmd"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    manifest = ROOT / "examples" / "engine-llamacpp-prefix.yaml"
    if "--commits" in args:
        args = [*args, "--repo", str(tmp_path)]
    result = CliRunner().invoke(command, [str(manifest), "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "out").exists()


def test_a_folder_without_llama_server_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    manifest = ROOT / "examples" / "engine-llamacpp-prefix.yaml"
    result = CliRunner().invoke(
        command, [str(manifest), "--out", str(tmp_path / "out"), "--binaries", f"{tmp_path / 'empty'},{tmp_path}"]
    )
    assert result.exit_code == 2 and "no executable llama-server in that folder" in result.output


@pytest.mark.parametrize("given", ["folders", "executables"])
def test_a_manifest_gate_run_refuses_stops_the_bisection_with_exit_2(tmp_path: Path, given: str) -> None:
    """The first probe is a real `gate run`; its exit 2 (bad manifest) ends the bisection after one run.
    An executable given by path is linked as llama-server in the probe's own folder under --out."""
    manifest = tmp_path / "bad.yaml"
    manifest.write_text("apiVersion: gate/v1\nname: bad\n")
    folders = []
    for name in ("one", "two"):
        folder = tmp_path / name
        folder.mkdir()
        exe = folder / ("llama-server" if given == "folders" else f"server-{name}")
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o755)
        folders.append(str(folder if given == "folders" else exe))
    env = {"PYTHONPATH": str(ROOT), "GATE_LEDGER": str(tmp_path / "ledger.sqlite")}
    result = CliRunner().invoke(
        command, [str(manifest), "--out", str(tmp_path / "out"), "--binaries", ",".join(folders)], env=env
    )
    assert result.exit_code == 2, result.output
    assert "run 1: " in result.output and "run 2: " not in result.output
    assert "gate run refused the input" in result.output
    links = list((tmp_path / "out" / ".bin").glob("*/llama-server"))
    if given == "executables":
        assert [link.resolve() for link in links] == [Path(folders[0]).resolve()]
    else:
        assert links == []


def git_repo(path: Path, commits: list[dict[str, str]]) -> list[str]:
    """A real git repository at `path`, one commit per dict of files; their shas, oldest first."""
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    shas = []
    for i, files in enumerate(commits):
        for name, text in files.items():
            (path / name).write_text(text)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", f"commit {i}"], check=True)
        shas.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip())
    return shas


BUILD_SH = """#!/bin/sh
mkdir -p build/bin
printf '#!/bin/sh\\necho %s\\n' "$(cat VERSION)" > build/bin/llama-server
chmod +x build/bin/llama-server
"""


def test_commits_not_a_commit_or_not_an_ancestor_is_exit_2(tmp_path: Path) -> None:
    shas = git_repo(tmp_path / "repo", [{"VERSION": "1"}, {"VERSION": "2"}])
    manifest = ROOT / "examples" / "engine-llamacpp-prefix.yaml"
    for spec, message in ((f"{shas[0]}..nope", "'nope' is not a commit"), (f"{shas[1]}..{shas[0]}", "not an ancestor")):
        args = [str(manifest), "--out", str(tmp_path / "out"), "--commits", spec, "--build-cmd", "true"]
        result = CliRunner().invoke(command, [*args, "--repo", str(tmp_path / "repo")])
        assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.parametrize("build", ["sh build.sh", "exit 7"])
def test_commits_are_exported_and_built_one_by_one(tmp_path: Path, build: str) -> None:
    """Three commits; the first probe exports the first commit's tree and runs --build-cmd in it. A build
    that fails stops with exit 3 naming it; one that works leaves llama-server where the probe finds it
    (the manifest here is refused by gate run, so the bisection stops after that one probe, exit 2)."""
    shas = git_repo(tmp_path / "repo", [{"VERSION": str(i), "build.sh": BUILD_SH} for i in range(3)])
    manifest = tmp_path / "bad.yaml"
    manifest.write_text("apiVersion: gate/v1\nname: bad\n")
    out = tmp_path / "out"
    args = [str(manifest), "--out", str(out), "--commits", f"{shas[0][:8]}..{shas[2]}", "--build-cmd", build]
    env = {"PYTHONPATH": str(ROOT), "GATE_LEDGER": str(tmp_path / "ledger.sqlite")}
    result = CliRunner().invoke(command, [*args, "--repo", str(tmp_path / "repo")], env=env)
    assert f"over 3 builds ({shas[0][:12]} .. {shas[2][:12]})" in result.output
    built = out / ".bin" / shas[0][:12] / "src" / "build" / "bin" / "llama-server"
    if build == "exit 7":
        assert result.exit_code == 3 and "--build-cmd exited 7" in result.output, result.output
        assert not built.exists()
    else:
        assert result.exit_code == 2 and "gate run refused the input" in result.output, result.output
        said = subprocess.run([str(built)], capture_output=True, text=True).stdout
        assert said == "0\n"


# -- for real, over xllamacpp builds -----------------------------------------------------------------

PREFIX_BUILDS = ["2026.4.8672.1", "2026.4.8929", "2026.5.9093"]
missing = [v for v in PREFIX_BUILDS if not installed(ROOT / CACHE / v, v)]
needs_prefix_builds = pytest.mark.skipif(
    bool(missing),
    reason=f"xllamacpp builds not installed ({', '.join(missing)}): "
    "python benchmarks/engine_builds.py --builds b8672,b8929,b9093 --install-only",
)


@pytest.mark.engine
@pytest.mark.xllamacpp
@needs_prefix_builds
def test_bisect_finds_the_ignore_eos_fix(tmp_path: Path) -> None:
    """b8672 ignores ignore_eos (engine-batch-invariance errors, exit 14), fixed from b8929: 2 runs (b9093 is
    never needed)."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GATE_LEDGER": str(tmp_path / "ledger.sqlite")}
    args = ["examples/engine-llamacpp-prefix.yaml", "--out", str(out), "--llamacpp-builds", "b8672,b8929,b9093"]
    proc = subprocess.run(
        [sys.executable, "-m", "gate", "bisect", *args, "--builds-dir", str(ROOT / CACHE)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "b8929 (after b8672); 2 runs" in proc.stdout
    summary = json.loads((out / "bisect.json").read_text())
    assert summary["runs"] == ["b8672", "b8929"]
    assert summary["change"]["before"] == "b8672" and summary["change"]["after"] == "b8929"
    assert summary["outcomes"]["b8672"]["first_failing"] == "engine-batch-invariance"
    assert summary["outcomes"]["b8672"]["exit_code"] == 14
    assert summary["outcomes"]["b8929"]["first_failing"] is None
    assert (out / "b8672" / "dossier.html").exists() and (out / "b8929" / "dossier.html").exists()
    assert "engine-batch-invariance" in proc.stdout and "*" in proc.stdout  # the side-by-side marks it
    # and the pair's `gate diff`, printed and kept for a PR comment
    assert f"gate diff {out / 'b8672'} {out / 'b8929'}:" in proc.stdout
    assert summary["change"]["diff"] == str(out / "diff.md") and "b8929" in (out / "diff.md").read_text()


@pytest.mark.engine
@pytest.mark.xllamacpp
@pytest.mark.skipif(
    not all(installed(ROOT / CACHE / v, v) for v in ("2026.7.10068", "2026.10.11549")),
    reason="xllamacpp builds not installed: python benchmarks/engine_builds.py --builds b10068,b11549 --install-only",
)
def test_binaries_with_the_same_verdict_stop_after_two_runs(tmp_path: Path) -> None:
    """Two of a user's own folders (wrappers written here) on the hosted example: no change, 2 runs."""
    folders = [write_wrapper(ROOT / CACHE / v, tmp_path / v).parent for v in ("2026.7.10068", "2026.10.11549")]
    env = {"PYTHONPATH": str(ROOT), "GATE_LEDGER": str(tmp_path / "ledger.sqlite")}
    manifest = ROOT / "examples" / "engine-llamacpp-hosted.yaml"
    args = [str(manifest), "--out", str(tmp_path / "out"), "--binaries", ",".join(map(str, folders))]
    result = CliRunner().invoke(command, args, env=env)
    assert result.exit_code == 0, result.output
    assert "no change between the ends" in result.output and "(2 runs" in result.output
    summary = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert summary["change"] is None and len(summary["runs"]) == 2


@pytest.mark.engine
@pytest.mark.xllamacpp
@needs_prefix_builds
def test_commits_built_into_llama_servers_find_the_ignore_eos_fix(tmp_path: Path) -> None:
    """A git history whose commits 'build' b8672, b8929 and b9093 (the build command writes the
    xllamacpp wrapper its VERSION file names): --commits finds the second commit, in 2 runs."""
    build = (
        f'"{sys.executable}" -c "import pathlib; from gate.adapters.openai.xllamacpp_server import write_wrapper; '
        f"write_wrapper(pathlib.Path('{ROOT / CACHE}') / pathlib.Path('VERSION').read_text().strip(), "
        "pathlib.Path('bin'))\""
    )
    shas = git_repo(tmp_path / "repo", [{"VERSION": v} for v in PREFIX_BUILDS])
    out = tmp_path / "out"
    args = ["--out", str(out), "--commits", f"{shas[0]}..{shas[2]}", "--build-cmd", build, "--repo"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GATE_LEDGER": str(tmp_path / "ledger.sqlite")}
    proc = subprocess.run(
        [sys.executable, "-m", "gate", "bisect", "examples/engine-llamacpp-prefix.yaml", *args, str(tmp_path / "repo")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{shas[1][:12]} (after {shas[0][:12]}); 2 runs" in proc.stdout
    summary = json.loads((out / "bisect.json").read_text())
    assert summary["outcomes"][shas[0][:12]]["exit_code"] == 14
