"""How to run a manifest: the one options model from `gate run`'s flags to the runner.

    options = RunOptions(sign_key="ci.key", only=["greedy-parity"])
    run_pipeline("examples/reference-static-layout.yaml", "out/run", options)

Plain, picklable data (a batch's task carries it to its worker); where output goes (`log`,
`progress`, `events`) is an argument of the call, not an option.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator


class RunOptions(BaseModel):
    """`gate run`'s flags, as one frozen record (paths given as text become `Path`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    policy_dirs: tuple[Path, ...] = ()
    """Extra policy directories (`--policy-dir`), read beside the built-in policies."""
    sign_key: Path | None = None
    """Ed25519 private key (`gate keygen`) that signs the dossier; loaded before anything runs."""
    ledger: str | None = None
    """Audit ledger: an SQLite file or a `postgresql://` URL, as given. Its waivers apply and the verdict
    is appended; None: no ledger."""
    trust: Path | None = None
    """Trust policy that says whose waivers apply and whose signature a recorded baseline needs
    (None: $GATE_TRUST, else ./trust.yaml, else none)."""
    reference_cache: Path | None = None
    """Directory of stored reference answers (gate.adapters.recorded.store): read instead of recomputing,
    missing answers computed and added. None: the reference computes everything."""
    record: Path | None = None
    """`gate record`: store every reference answer in this baseline directory; controls included."""
    baseline_commit: str | None = None
    """Main's commit, that a recorded reference's baseline must be bound to (gate.trust.baseline.main_commit:
    None reads $GATE_BASELINE_COMMIT, else a GitHub pull_request event's base commit)."""
    only: tuple[str, ...] = ()
    """Run only these checks of the plan (`--check`); the rest are recorded as not run and the verdict
    is at best `partial`, never pass."""
    params: dict[str, dict[str, Any]] = {}
    """Parameter overrides per check (`--param CHECK.KEY=VALUE`), merged over the manifest's."""
    profile: bool = False
    """Also time model forward passes (gate.engine.profile.ForwardClock, which slows small forwards)."""
    threads: int | None = None
    """torch CPU threads (`--threads`), set once the previous run is aside. None: torch's own choice
    for a single run, one per worker in a batch (`worker_threads`)."""

    @field_validator("ledger", mode="before")
    @classmethod
    def _ledger_text(cls, value: Any) -> Any:
        """A ledger location (gate.trust.ledger_store.LedgerURL included) as the text that names it."""
        from gate.trust.ledger_store import LedgerURL

        if isinstance(value, LedgerURL):
            return value.url
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @property
    def ledger_path(self) -> Path | None:
        """The ledger as a location: a Path, or a LedgerURL for a database."""
        from gate.trust.ledger_store import ledger_location

        return ledger_location(self.ledger) if self.ledger is not None else None

    @property
    def worker_threads(self) -> int:
        """torch CPU threads in each worker of a batch (one unless told otherwise)."""
        return self.threads or 1

    def inputs(self) -> list[Path]:
        """The files and directories a run reads (a database ledger aside), which its --out must not swallow."""
        from gate.trust.ledger_store import is_url

        ledger = self.ledger_path
        local = [ledger] if ledger is not None and not is_url(ledger) else []
        named = [p for p in (self.sign_key, self.trust, self.reference_cache) if p is not None]
        return [*local, *named, *self.policy_dirs]
