"""baseline.json's format, its key and its safe reading: torch-free, the one record the recorded adapter
(gate.adapters.recorded.store) writes and reads and gate.trust.baseline seals and checks."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import gate
from gate._util.limited import read_regular
from gate.errors import InputError

FORMAT = "gate/baseline/v1"
HEADER = "baseline.json"


def reference_key(identity: dict[str, Any], adapter: str, options: dict[str, Any], version: str | None = None) -> str:
    """What the stored answers are answers of: model identity, adapter options, gate version (this
    gate's unless `version` names the one a header states)."""
    body = {"identity": identity, "adapter": adapter, "options": options, "gate_version": version or gate.__version__}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def git_commit(cwd: Path) -> str | None:
    """The commit of the gate checkout (or the working directory's repository), when there is one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


HEADER_BYTES = 64 * 1024 * 1024
"""Largest baseline.json read (its index: about 200 bytes per stored answer)."""
OBJECT_BYTES = 1024 * 1024 * 1024
"""Largest stored answer read."""


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a regular file within HEADER_BYTES; InputError (exit 2, one line) otherwise."""
    try:
        doc = json.loads(read_regular(path, HEADER_BYTES, "baseline"))
    except (ValueError, RecursionError) as err:
        raise InputError(str(path), f"not JSON ({str(err).splitlines()[0][:120]})") from None
    if isinstance(doc, dict):
        return doc
    raise InputError(str(path), f"not a JSON object (a {type(doc).__name__})")
