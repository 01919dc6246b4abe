"""Reading a small input file safely: a regular file, at most a stated size, never a hang.

`read_regular` refuses `/dev/zero`, a FIFO, a directory or a socket at once (opened non-blocking,
checked with fstat) and a file larger than the limit, each with an InputError naming the file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gate.errors import InputError

KEY_BYTES = 64 * 1024
"""Largest PEM key file read (an Ed25519 key is a few hundred bytes)."""


def read_regular(path: Path, limit: int, what: str = "file", *, located: bool = False) -> bytes:
    """The bytes of PATH, a regular file of at most `limit` bytes; InputError otherwise (at line 1,
    column 1 when `located`: a document's errors name a position)."""
    line = 1 if located else None
    too_large = f"larger than {limit // 1024} KiB (limit of gate {what}s)"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise InputError(str(path), f"cannot read {what}: {err.strerror or err}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(
                str(path), f"{what} is not a regular file (a device, FIFO, socket or directory)", line=line, col=line
            )
        if info.st_size > limit:
            raise InputError(str(path), too_large, line=line, col=line)
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise InputError(str(path), too_large, line=line, col=line)
        return b"".join(chunks)
    except OSError as err:
        raise InputError(str(path), f"cannot read {what}: {err.strerror or err}") from None
    finally:
        os.close(fd)


__all__ = ["KEY_BYTES", "read_regular"]
