"""Errors that reach the user as one line, each with its own exit code."""

from __future__ import annotations

from typing import Any

EXIT_PASS = 0
EXIT_GATE_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_CHECK_ERROR = 3
EXIT_AWAITING_APPROVAL = 4
EXIT_PARTIAL = 5
"""`gate run --check NAME` ran only part of the plan and nothing failed: not a verdict on the manifest."""
EXIT_UNPROVEN = 6
"""Nothing failed, but a check the policy requires could not be proven (its controls could show nothing,
a required deny check could not run): told apart from exit 1, "the engine is broken"."""
EXIT_NOT_DEPLOYABLE = 7
"""`gate verify` / `gate audit trace`: authentic, but not a verdict a deploy may ship (`--any-verdict`: 0)."""
EXIT_OTHER_COMMIT = 8
"""`gate verify --commit X`: an authentic dossier of another commit, which X does not land unchanged
(gate.trust.landing): not a forgery (exit 1), not this commit's evidence either."""
# an engine behind HTTP (gate.adapters.openai): each way it can fail has its own code
EXIT_ENGINE_NOT_READY = 10
EXIT_ENGINE_PORT_IN_USE = 11
EXIT_ENGINE_CRASHED = 12
EXIT_ENGINE_TIMEOUT = 13
EXIT_ENGINE_BAD_REPLY = 14
EXIT_ENGINE_VOCAB_MISMATCH = 15
EXIT_ENGINE_NEVER_HIT = 16
EXIT_ENGINE_WRONG_MODEL = 17
"""The server serves another model than the manifest names (/v1/models, or a reply's `model` field)."""
EXIT_INTERRUPTED = 130
"""Stopped by SIGINT (Ctrl-C): 128 + 2, the shell's convention, so a cancelled job never reads as a failed gate."""
EXIT_TERMINATED = 143
"""Stopped by SIGTERM (a CI runner cancelling the job): 128 + 15."""


class GateError(Exception):
    """Base class: `str(err)` is the one line shown to the user."""

    exit_code = EXIT_CHECK_ERROR


class InputError(GateError):
    """Bad input (manifest, policy, options, usage): `FILE:LINE:COL: field.path: message`, exit 2."""

    exit_code = EXIT_BAD_INPUT

    def __init__(
        self, file: str, message: str, *, line: int | None = None, col: int | None = None, field: str | None = None
    ) -> None:
        message = " ".join(message.split("\n"))  # one line, whatever a library put in it
        self.file, self.line, self.col, self.field, self.message = file, line, col, field, message
        self.more: list[InputError] = []
        """Further errors found in the same file, each its own one-line error."""
        where = file if line is None else f"{file}:{line}:{col or 1}"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")

    def lines(self) -> list[str]:
        """This error and every further one in the same file, one line each."""
        return [str(self), *(str(e) for e in self.more)]


class OutputError(GateError):
    """`--out` cannot hold a run (a file, read-only, full, under a file, over a size limit): exit 2."""

    exit_code = EXIT_BAD_INPUT


class Terminated(BaseException):
    """Raised in the main thread by gate's SIGTERM handler; like KeyboardInterrupt, no `except Exception`
    inside a check can swallow it."""


class UnavailableError(GateError):
    """A required check or adapter is not installed or cannot run here (exit 3)."""

    exit_code = EXIT_CHECK_ERROR


class UnknownFault(ValueError):
    """A fault was requested that this path cannot apply (a control the path cannot plant)."""


class AdapterUnavailable(RuntimeError):
    """An adapter could not run here (missing extra, no GPU, ...). Maps to exit code 3."""


# -- an engine behind HTTP --------------------------------------------------------------------
# A check that meets one of these ends in `error` and the run exits with the error's code, so CI can
# tell a server that never came up from a slow one or from one that answered garbage.
class EngineError(GateError):
    """An engine (HTTP server) failure; `str(err)` is the one line shown to the user."""

    exit_code = EXIT_ENGINE_CRASHED


class EngineNotReady(EngineError):
    """The server did not answer its readiness probe within the start-up timeout (or exited first)."""

    exit_code = EXIT_ENGINE_NOT_READY


class EnginePortInUse(EngineError):
    """The port the launch asks for is already taken by another process."""

    exit_code = EXIT_ENGINE_PORT_IN_USE


class EngineCrashed(EngineError):
    """The server process died, or stopped answering, while gate was using it."""

    exit_code = EXIT_ENGINE_CRASHED


class EngineTimeout(EngineError):
    """A request got no reply within the request timeout, after every retry."""

    exit_code = EXIT_ENGINE_TIMEOUT


class EngineBadReply(EngineError):
    """The server replied with something that is not the JSON an OpenAI-compatible server sends."""

    exit_code = EXIT_ENGINE_BAD_REPLY


class EngineVocabMismatch(EngineError):
    """The reference and candidate servers serve different vocabularies: token ids mean different things."""

    exit_code = EXIT_ENGINE_VOCAB_MISMATCH


class EngineWrongModel(EngineError):
    """The server does not serve the model the manifest names: an identity failure, not a bad reply."""

    exit_code = EXIT_ENGINE_WRONG_MODEL


class EngineCacheNeverHit(EngineError):
    """A cached-path check saw the candidate report no reused prompt token at all: nothing was exercised."""

    exit_code = EXIT_ENGINE_NEVER_HIT


class SubjectCrash(Exception):
    """An exception raised inside the subject (the library or engine under test), not in gate: the
    runner turns it into a failed check of class `crash`. `where`: how far the request had got."""

    def __init__(self, call: str, error: BaseException, where: dict[str, int | str]) -> None:
        self.call, self.error, self.where = call, error, where
        at = ", ".join(f"{k} {v}" for k, v in where.items())
        super().__init__(f"{call}{f' ({at})' if at else ''}: {error.__class__.__name__}: {error}")

    def diagnosis(self) -> dict[str, Any]:
        """The failure record of this crash, with the subject's traceback."""
        import traceback

        error = self.error
        return {
            "bug_class": "crash",
            "explanation": "the subject raised an exception inside its own code (a finding about the subject, "
            "not an error in gate or the environment)",
            "exception": f"{error.__class__.__name__}: {error}",
            "exception_type": error.__class__.__name__,
            "call": self.call,
            **{str(k): v for k, v in self.where.items()},
            "traceback": "".join(traceback.format_exception(error)),
        }
