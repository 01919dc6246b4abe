"""What can go wrong with an engine behind HTTP, each with its own exit code and one clear line.

A check that meets one of these ends in `error` (the run could not judge the engine) and the run
exits with the error's code, so CI can tell a server that never came up from a slow one or from one
that answered garbage. The server's own log tail is quoted where there is one.
"""

from __future__ import annotations

from gate.errors import GateError

EXIT_ENGINE_NOT_READY = 10
EXIT_ENGINE_PORT_IN_USE = 11
EXIT_ENGINE_CRASHED = 12
EXIT_ENGINE_TIMEOUT = 13
EXIT_ENGINE_BAD_REPLY = 14
EXIT_ENGINE_VOCAB_MISMATCH = 15


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


def tail(text: str, lines: int = 15) -> str:
    """The last `lines` lines of a log, joined with ' | ' so they fit on the one error line."""
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(the server wrote nothing)"
