"""llama.cpp's prebuilt builds from xllamacpp CPU wheels, installed on demand for `gate bisect
--llamacpp-builds` and benchmarks/engine_builds.py (docs/engines.md, "Engine builds via xllamacpp"):
each in CACHE/<version> (a temporary folder renamed when complete) with a `bin/llama-server` wrapper.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from gate.adapters.openai.xllamacpp_server import UsageError, build_number, installed_version, write_wrapper

BUILDS = [
    "2026.4.8672.1",
    "2026.4.8929",
    "2026.5.9093",
    "2026.5.9294",
    "2026.6.9538",
    "2026.6.9713",
    "2026.7.9873",
    "2026.7.10068",
    "2026.8.10229",
    "2026.8.10566",
    "2026.9.10809",
    "2026.9.11063",
    "2026.10.11549",
]
"""xllamacpp's releases, oldest first, one per llama.cpp build (2026.4.8672.1 republishes 2026.4.8672)."""

CACHE = Path(".cache") / "engine-builds"
"""Where builds are installed, relative to the working directory (the repository root for the benchmark)."""


def label(version: str) -> str:
    """`b<BUILD>`, llama.cpp's name for a version's build (`2026.4.8672.1` -> `b8672`)."""
    return f"b{build_number(version)}"


def pick(names: str | None, known: list[str] = BUILDS, what: str = "build") -> list[str]:
    """The named subset of `known` (comma-separated versions or `b<BUILD>`; `all` or none: every one),
    in `known`'s order. An unknown name is a UsageError naming the known ones."""
    if not names or names.strip() == "all":
        return list(known)
    alias = {label(v): v for v in known if _has_build(v)}
    chosen = set()
    for name in (n.strip() for n in names.split(",") if n.strip()):
        name = alias.get(name, name)
        if name not in known:
            shown = ", ".join(label(v) if _has_build(v) else v for v in known)
            raise UsageError(f"unknown {what} {name!r}; known: {shown} (or all)")
        chosen.add(name)
    if not chosen:
        raise UsageError(f"no {what} named in {names!r}")
    return [k for k in known if k in chosen]


def _has_build(version: str) -> bool:
    try:
        build_number(version)
    except UsageError:
        return False
    return True


def installed(target: Path, version: str) -> bool:
    try:
        return installed_version(target) == version
    except UsageError:
        return False


def install(version: str, cache: Path = CACHE, wrapper: bool = True) -> Path:
    """xllamacpp==version in cache/<version>/, installed once, with its bin/llama-server wrapper (unless
    `wrapper=False`); a failed pip install raises CalledProcessError and leaves nothing behind."""
    target = cache / version
    if not installed(target, version):
        cache.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=cache))
        try:
            pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
            subprocess.run([*pip, "--target", str(partial), f"xllamacpp=={version}"], check=True)
            if target.exists():
                shutil.rmtree(target)
            partial.rename(target)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    script = target / "bin" / "llama-server"
    if wrapper and (not script.exists() or f'"{sys.executable}"' not in script.read_text()):
        write_wrapper(target)
    return target
