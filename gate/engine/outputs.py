"""`--out`: checked before anything runs, written in a fresh sibling directory, swapped in when complete.

    staged = StagedOutput(Path("out/run"), keep=[manifest, ledger, sign_key])
    staged.check()      # a file, a path under a file, read-only, too little space, a low file-size limit: exit 2
    staged.begin()      # out/run -> out/run.previous (kept aside), writes go to out/.run.partial-PID-XXXX
    staged.commit()     # out/.run.partial-PID-XXXX -> out/run (one rename)

The previous run is moved aside *before* anything runs, so after an incomplete run `--out` holds no
dossier at all. Only a gate output (one holding results.json) is ever moved aside or deleted.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from gate._util.atomic import inside
from gate.errors import OutputError

MIN_FREE_BYTES = 64 * 1024 * 1024
"""Free space `--out`'s file system must have before a run starts (a run writes a few MiB at most)."""
MIN_FILE_SIZE_LIMIT = 16 * 1024 * 1024
"""The smallest file-size limit (`ulimit -f`) under which a run's largest file still fits."""
PREVIOUS_SUFFIX = ".previous"
MARKER = "results.json"
"""What every gate output holds; a folder without it is not one, and is never moved or deleted."""
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
"""OSErrors that mean the output file system refused the run's bytes (not a fault of the subject)."""


def _partial_prefix(out: Path) -> str:
    return f".{out.name}.partial-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_failure(out: Path, err: OSError) -> OutputError:
    """A write that failed in `out` as one line (disk full, file-size limit, read-only, ...)."""
    why = {
        errno.ENOSPC: "no space left on the device",
        errno.EDQUOT: "disk quota exceeded",
        errno.EFBIG: "file-size limit reached (ulimit -f)",
        errno.EROFS: "read-only file system",
        errno.EACCES: "permission denied",
    }.get(err.errno or 0, f"{err.__class__.__name__}: {err.strerror or err}")
    return OutputError(f"--out {out}: cannot write the run's outputs: {why}; nothing was replaced")


class StagedOutput:
    """One run's output directory, staged beside `out` and renamed into place when complete."""

    def __init__(self, out: Path, keep: Iterable[Path | None] = ()) -> None:
        self.out = Path(out)
        self.keep = [Path(p) for p in keep if p is not None]
        """Inputs that must not live inside `out` (a run moves `out` aside)."""
        self.staging: Path | None = None
        self.previous = Path(f"{self.out}{PREVIOUS_SUFFIX}")

    # -- before anything runs

    def check(self, replaces: bool = True) -> None:
        """Refuse an `--out` that cannot take a run, before anything runs or moves. `replaces`: the
        run will move `out` aside (one run); a batch's DIR holds runs and is not replaced itself."""
        out = self.out
        if out.name in ("", ".", "..") or out.resolve() == Path.cwd().resolve() or inside(Path.cwd(), out):
            raise OutputError(f"--out {out}: give a directory of its own (a run replaces it), not . or a parent of .")
        if out.exists() and not out.is_dir():
            raise OutputError(f"--out {out}: is a file, not a directory")
        for path in self.keep:
            if inside(path, out):
                raise OutputError(f"--out {out}: holds {path}, which a run needs; a run replaces --out")
        if replaces:
            for folder, fate in ((out, "moved aside"), (self.previous, "deleted")):
                if _foreign(folder):
                    raise OutputError(
                        f"--out {out}: {folder} is not a gate output (it holds no {MARKER}), and a run would "
                        f"have it {fate}: give a new or empty directory"
                    )
        ancestor = out.resolve().parent
        while not ancestor.exists():
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise OutputError(f"--out {out}: {ancestor} is a file, so nothing can be created under it")
        try:
            stat = os.statvfs(ancestor)
        except OSError as err:
            raise write_failure(out, err) from None
        free = stat.f_bavail * stat.f_frsize
        if free < MIN_FREE_BYTES:
            raise OutputError(
                f"--out {out}: only {free // 1024} KiB free on its file system; a run needs "
                f"{MIN_FREE_BYTES // (1024 * 1024)} MiB"
            )
        soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY and soft < MIN_FILE_SIZE_LIMIT:
            raise OutputError(
                f"--out {out}: the file-size limit (ulimit -f) is {soft} bytes; a run needs "
                f"{MIN_FILE_SIZE_LIMIT // (1024 * 1024)} MiB"
            )

    # -- the run

    def begin(self) -> Path:
        """Create the staging directory (the real writability test) and move the previous run aside."""
        out = self.out
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            if out.is_dir():  # first, so that from here on --out never holds the previous run
                if any(out.iterdir()):
                    if self.previous.exists():
                        shutil.rmtree(self.previous)
                    os.replace(out, self.previous)
                else:
                    out.rmdir()
                _fsync(out.parent)
            self.remove_orphans()
            self.staging = Path(tempfile.mkdtemp(prefix=f"{_partial_prefix(out)}{os.getpid()}-", dir=out.parent))
            probe = self.staging / ".probe"
            probe.write_bytes(b"gate")
            probe.unlink()
        except OSError as err:
            self.abort()
            raise write_failure(out, err) from None
        return self.staging

    def commit(self) -> Path:
        """Rename the complete staging directory into place as `out`."""
        assert self.staging is not None, "begin() first"
        try:
            for child in self.staging.iterdir():
                if child.is_file():
                    _fsync(child)
            _fsync(self.staging)
            if self.out.is_dir() and not any(self.out.iterdir()):
                self.out.rmdir()  # something created an empty --out meanwhile
            os.replace(self.staging, self.out)
            _fsync(self.out.parent)
        except OSError as err:
            self.abort()
            raise write_failure(self.out, err) from None
        self.staging = None
        return self.out

    def abort(self) -> None:
        """Remove the staging directory (nothing half-done stays behind)."""
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None

    def remove_orphans(self) -> None:
        """Staging directories left by runs that were killed (their process is gone)."""
        prefix = _partial_prefix(self.out)
        for child in self.out.parent.glob(prefix + "*"):
            pid = child.name[len(prefix) :].split("-", 1)[0]
            if pid.isdigit() and not _pid_alive(int(pid)):
                shutil.rmtree(child, ignore_errors=True)


def _foreign(folder: Path) -> bool:
    """Something at `folder` that is not a gate output (nothing, or an empty folder, is not foreign)."""
    if not folder.exists() and not folder.is_symlink():
        return False
    if folder.is_symlink() or not folder.is_dir():
        return True
    return not (folder / MARKER).is_file() and any(folder.iterdir())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
