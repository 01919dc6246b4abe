"""Where a ledger lives and where its checkpoint key is: --ledger, else $GATE_LEDGER, else
./.gate/ledger.sqlite (`gate run` records to the default only where it exists); the key --ledger-key,
else $GATE_LEDGER_KEY, else `<ledger>.key` beside an SQLite file."""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gate.trust.keys import load_private_key, write_keypair
from gate.trust.ledger_store import LedgerError, is_url, ledger_location

DEFAULT_LEDGER = Path(".gate") / "ledger.sqlite"
ENV_LEDGER = "GATE_LEDGER"
ENV_LEDGER_KEY = "GATE_LEDGER_KEY"


def resolve_ledger_path(explicit: Path | None, *, must_exist: bool = False) -> Path:
    """--ledger PATH, else $GATE_LEDGER, else ./.gate/ledger.sqlite (`must_exist`: refuse a missing file)."""
    if explicit is not None:
        path = explicit
    elif os.environ.get(ENV_LEDGER):
        path = ledger_location(os.environ[ENV_LEDGER])
    else:
        path = DEFAULT_LEDGER
    if must_exist and not is_url(path) and not path.is_file():
        raise LedgerError(f"{path}: no ledger here (give --ledger PATH or set {ENV_LEDGER})")
    return path


def named_ledger(explicit: Path | None) -> tuple[Path, str] | None:
    """The ledger a command was named (--ledger, else $GATE_LEDGER) and which named it; None: neither."""
    if explicit is not None:
        return explicit, "--ledger"
    if os.environ.get(ENV_LEDGER):
        return resolve_ledger_path(None), f"${ENV_LEDGER}"
    return None


def run_ledger_choice(explicit: Path | None) -> tuple[Path | None, str]:
    """The ledger `gate run` records to (--ledger, $GATE_LEDGER, or ./.gate/ledger.sqlite if it exists:
    never created by a run) and why that one, in words `gate run` prints; (None, "") for none."""
    if (named := named_ledger(explicit)) is not None:
        return named
    if DEFAULT_LEDGER.is_file():
        return DEFAULT_LEDGER, f"the default ledger: {DEFAULT_LEDGER} exists in this directory; --ledger names another"
    return None, ""


def resolve_key_path(ledger_path: Path, explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    if os.environ.get(ENV_LEDGER_KEY):
        return Path(os.environ[ENV_LEDGER_KEY])
    if is_url(ledger_path):  # a database ledger has no directory of its own
        raise LedgerError(f"{ledger_path}: a database ledger needs --ledger-key or ${ENV_LEDGER_KEY}")
    return ledger_path.with_suffix(".key")


def ensure_ledger_key(path: Path) -> Ed25519PrivateKey:
    """Load the ledger key at `path`, generating it (with a .pub beside it) on first use; when several
    processes race here, exactly one file wins and everyone loads it."""
    if not path.exists():
        write_keypair(path, path.with_suffix(".pub"))
    return load_private_key(path)
