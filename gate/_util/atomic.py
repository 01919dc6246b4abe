"""Writing a file so that readers see the old bytes or the new ones, never half of either."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes_atomic(path: Path, data: bytes, mode: int = 0o644, *, exclusive: bool = False) -> Path:
    """Write `data` to a temp file beside `path`, fsync it, set `mode`, then move it into place:
    os.replace, or with `exclusive` a hard link that raises FileExistsError when `path` exists
    (so of two writers creating the same file, one wins and the other learns it lost)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if exclusive:
            os.link(tmp, path)
            Path(tmp).unlink()
        else:
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def inside(path: Path, folder: Path) -> bool:
    """Whether `path`, with every link resolved, is `folder` or lies under it."""
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True
