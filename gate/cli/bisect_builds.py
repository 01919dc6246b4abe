"""The builds `gate bisect` probes (gate.cli.bisect): xllamacpp wheels (--llamacpp-builds), a user's own
binaries (--binaries), or git commits built one by one (--commits A..B --build-cmd CMD). Each is a
`Build` whose `prepare` makes the folder put first on PATH for its `gate run`."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import click


@dataclass(frozen=True)
class Build:
    """One build to probe: its name, the folder it writes into under --out, and how to make its PATH folder."""

    name: str
    slug: str
    prepare: Callable[[Path], Path]
    """Given the folder for its own files (OUT/.bin/<slug>), return the folder to put first on PATH."""


def from_llamacpp_builds(names: str, cache: Path) -> list[Build]:
    """xllamacpp builds (gate.adapters.openai.builds), each installed into `cache` when first probed and
    run through a wrapper written under --out (the installed folder is only read)."""
    from gate.adapters.openai.builds import install, label, pick
    from gate.adapters.openai.xllamacpp_server import UsageError, write_wrapper

    try:
        versions = pick(names)
    except UsageError as err:
        raise click.UsageError(f"--llamacpp-builds: {err}") from None

    def prepare(version: str) -> Callable[[Path], Path]:
        def made(own: Path) -> Path:
            return write_wrapper(install(version, cache, wrapper=False), own).parent

        return made

    return [Build(label(v), label(v), prepare(v)) for v in versions]


def from_binaries(items: str) -> list[Build]:
    """A user's own builds: folders holding `llama-server`, or executables (linked as `llama-server`)."""
    paths = [p.strip() for p in items.split(",") if p.strip()]
    found = []
    for i, item in enumerate(paths):
        path = Path(item)
        slug = f"{i + 1:02d}-" + re.sub(r"[^A-Za-z0-9._-]+", "_", item.strip("/"))[-60:]
        if path.is_dir():
            if not os.access(path / "llama-server", os.X_OK):
                raise click.UsageError(f"--binaries: {item}: no executable llama-server in that folder")
            found.append(Build(item, slug, partial(_as_is, path.resolve())))
        elif path.is_file() and os.access(path, os.X_OK):
            found.append(Build(item, slug, partial(_linked, path.resolve())))
        else:
            raise click.UsageError(f"--binaries: {item}: neither a folder holding llama-server nor an executable")
    return found


class BuildFailed(Exception):
    """A build could not be made (its command failed, or left no llama-server): exit 3."""


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise click.UsageError(f"--commits: git {' '.join(args)}: {proc.stderr.strip() or 'failed'}")
    return proc.stdout.strip()


def _commit(repo: Path, name: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise click.UsageError(f"--commits: {name!r} is not a commit of {repo} ({proc.stderr.strip() or 'unknown'})")
    return proc.stdout.strip()


def from_commits(spec: str, build_cmd: str | None, repo: Path) -> list[Build]:
    """A, then B's first-parent history after A (oldest first), each built from its own exported tree."""
    start, dots, end = spec.partition("..")
    if not dots or not start or not end or end.startswith("."):
        raise click.UsageError(f"--commits: {spec!r} is not A..B (two commits, A an ancestor of B)")
    if not build_cmd:
        raise click.UsageError("--commits needs --build-cmd (the command building llama-server)")
    first, last = (_commit(repo, name) for name in (start, end))
    if subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", first, last]).returncode != 0:
        raise click.UsageError(f"--commits: {start} is not an ancestor of {end}")
    shas = [first, *_git(repo, "rev-list", "--reverse", "--first-parent", f"{first}..{last}").split()]
    return [Build(sha[:12], sha[:12], partial(_built, repo.resolve(), sha, build_cmd)) for sha in shas]


def _built(repo: Path, sha: str, build_cmd: str, own: Path) -> Path:
    """Export the commit's tree into own/src, run the build command there; the folder of its llama-server."""
    import shutil

    source = own / "src"
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", sha], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    done = subprocess.run(build_cmd, shell=True, cwd=source, env={**os.environ, "GATE_COMMIT": sha})
    if done.returncode != 0:
        raise BuildFailed(f"--build-cmd exited {done.returncode} in {source}")
    found = [p for p in source.rglob("llama-server") if p.is_file() and os.access(p, os.X_OK)]
    if not found:
        raise BuildFailed(f"--build-cmd left no executable llama-server under {source}")
    return min(found, key=lambda p: (len(p.parts), str(p))).parent


def _as_is(folder: Path, own: Path) -> Path:
    return folder


def _linked(executable: Path, own: Path) -> Path:
    own.mkdir(parents=True, exist_ok=True)
    link = own / "llama-server"
    link.unlink(missing_ok=True)
    link.symlink_to(executable)
    return own
