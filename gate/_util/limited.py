"""Reading a small input file safely: a regular file, at most a stated size, never a hang.

Keys, trust policies, manifests and recordings are read through `read_regular`: `/dev/zero`, a FIFO,
a directory or a socket is refused at once (opened non-blocking, checked with fstat before any read),
and so is a file larger than the limit (read up to one byte past it, so a file growing while read
cannot slip through). Every refusal is an InputError naming the file: exit 2, one line.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gate.errors import InputError

KEY_BYTES = 64 * 1024
"""Largest PEM key file read (an Ed25519 key is a few hundred bytes)."""


def _size(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit // 1024} KiB"


def read_regular(path: Path, limit: int, what: str = "file") -> bytes:
    """The bytes of PATH, a regular file of at most `limit` bytes; InputError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise InputError(str(path), f"cannot read {what}: {err.strerror or err}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(str(path), f"{what} is not a regular file (a device, FIFO, socket or directory)")
        if info.st_size > limit:
            raise InputError(str(path), f"{what} is larger than {_size(limit)} (limit of gate inputs)")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise InputError(str(path), f"{what} is larger than {_size(limit)} (limit of gate inputs)")
        return b"".join(chunks)
    except OSError as err:
        raise InputError(str(path), f"cannot read {what}: {err.strerror or err}") from None
    finally:
        os.close(fd)


__all__ = ["KEY_BYTES", "read_regular"]
