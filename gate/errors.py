"""Errors that reach the user as one line, each with its own exit code."""

from __future__ import annotations

EXIT_PASS = 0
EXIT_GATE_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_CHECK_ERROR = 3
EXIT_AWAITING_APPROVAL = 4


class GateError(Exception):
    """Base class: `str(err)` is the one line shown to the user."""

    exit_code = EXIT_CHECK_ERROR


class InputError(GateError):
    """Bad input (manifest, policy, options, usage): `FILE:LINE:COL: field.path: message`, exit 2."""

    exit_code = EXIT_BAD_INPUT

    def __init__(
        self, file: str, message: str, *, line: int | None = None, col: int | None = None, field: str | None = None
    ) -> None:
        self.file, self.line, self.col, self.field, self.message = file, line, col, field, message
        where = file if line is None else f"{file}:{line}:{col or 1}"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


class UnavailableError(GateError):
    """A required check or adapter is not installed or cannot run here (exit 3)."""

    exit_code = EXIT_CHECK_ERROR


class UnknownFault(ValueError):
    """A fault was requested that this path cannot apply (a control the path cannot plant)."""


class AdapterUnavailable(RuntimeError):
    """An adapter could not run here (missing extra, no GPU, ...). Maps to exit code 3."""
