"""Start an engine's server as gate's child, wait until it is ready, and always stop it.

The server runs in its own process group (a server that forks workers is stopped whole), with a
clean environment (environment.py) and its output captured to a log whose tail is quoted in every
error. On Linux the kernel kills it if gate dies (PR_SET_PDEATHSIG), even by `kill -9`; otherwise
`stop()` sends SIGTERM to the group, then SIGKILL after a grace period.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gate._util.text import one_line
from gate.adapters.openai import transport
from gate.adapters.openai.environment import engine_environment
from gate.errors import EngineBadReply, EngineCrashed, EngineNotReady, EnginePortInUse, SubjectCrash

_LIVE: set[ServerProcess] = set()
"""Servers started and not yet stopped (stopped at interpreter exit and on SIGTERM as a last resort)."""


def tail(text: str, lines: int = 15) -> str:
    """The last `lines` lines of a log on one line, joined with ' | ', each made printable (one_line)."""
    kept = [one_line(line, 500) for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(the server wrote nothing)"


_EXCEPTION = re.compile(
    r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception): \S|\S*: GGML_ASSERT\(.*\) failed|\S*: Assertion .* failed"
)
"""A Python exception's last line (`ValueError: why`) at the start of a line (a warning that only names
one is not an error), or a C/C++ assertion that aborted the process (llama.cpp's `GGML_ASSERT`)."""


def first_error(text: str, lines: int = 15) -> str:
    """The log's first exception line when the tail of `lines` lines does not hold it, as 'first error
    in its log: ...; ', else '': an engine dying at start-up often ends its log with a wrapper (vLLM:
    `RuntimeError: Engine core initialization failed.`) while the cause is further up."""
    kept = [line for line in text.splitlines() if line.strip()]
    for line in kept[:-lines]:
        if match := _EXCEPTION.search(line):
            return f"first error in its log: {one_line(line[match.start() :], 500)}; "
    return ""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(Exception):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class ServerProcess:
    """One launched server: `start()` waits for readiness, `stop()` ends its whole process group."""

    def __init__(
        self,
        command: list[str],
        *,
        port: int,
        probe: str,
        ready_timeout_s: float,
        stop_timeout_s: float = 10.0,
        env: dict[str, str] | None = None,
        label: str = "server",
    ) -> None:
        self.command, self.port, self.probe = command, port, probe
        self.ready_timeout_s, self.stop_timeout_s = ready_timeout_s, stop_timeout_s
        self.env, self.label = env or {}, label
        self.proc: subprocess.Popen[bytes] | None = None
        self.workdir = Path(tempfile.mkdtemp(prefix="gate-engine-"))
        """A scratch directory of this server's own (its log; `{workdir}` in a launch command)."""
        self.log_path = self.workdir / "server.log"
        self.started_s = 0.0
        self.ready_after_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def describe(self) -> dict[str, Any]:
        """For the evidence: the command, the port, how long start-up took, the log tail."""
        return {
            "command": self.command,
            "port": self.port,
            "ready_after_s": None if self.ready_after_s is None else round(self.ready_after_s, 3),
            "exit_status": self.exit_status(),
            "log_tail": self.log_text().splitlines()[-20:],
        }

    def start(self) -> ServerProcess:
        if port_in_use(self.port):
            raise EnginePortInUse(
                f"{self.label}: port {self.port} on 127.0.0.1 is already in use by another process; "
                "choose another `port` or leave it out to let gate pick a free one"
            )
        exe = shutil.which(self.command[0]) or self.command[0]
        if not Path(exe).exists():
            raise EngineNotReady(
                f"{self.label}: cannot start {self.command[0]!r}: no such program (on PATH or as a path); "
                "for llama.cpp run `make engine` and put .cache/engine on PATH"
            )
        log = self.log_path.open("wb")
        try:
            self.proc = subprocess.Popen(
                [exe, *self.command[1:]],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=engine_environment(self.env),  # never gate's keys or tokens (environment.py)
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()
        _LIVE.add(self)
        self.started_s = time.monotonic()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = self.started_s + self.ready_timeout_s
        url = self.base_url + self.probe
        last = "no answer yet"
        while time.monotonic() < deadline:
            status = self.proc.poll()
            if status is not None:
                if "address already in use" in self.log_text().lower():
                    raise EnginePortInUse(
                        f"{self.label}: port {self.port} is in use (the server said so and exited): "
                        f"{tail(self.log_text(), 5)}"
                    )
                raise EngineNotReady(
                    f"{self.label}: the server exited with status {status} before it was ready; "
                    f"{first_error(self.log_text())}its log ends: {tail(self.log_text())}"
                )
            wait = max(0.05, min(2.0, deadline - time.monotonic()))
            try:  # a total deadline: a probe that drips its answer cannot outlast ready_timeout_s
                status = transport.fetch(urllib.request.Request(url), wait, self.label, read=lambda r: r.status)
                if status == 200:
                    self.ready_after_s = time.monotonic() - self.started_s
                    return
                last = f"HTTP {status}"
            except transport.HTTPStatus as err:
                last = f"HTTP {err.code}"
            except EngineBadReply as err:
                last = str(err)
            except (urllib.error.URLError, OSError) as err:
                last = one_line(getattr(err, "reason", err), 200)
            time.sleep(0.1)
        raise EngineNotReady(
            f"{self.label}: not ready after {self.ready_timeout_s:g}s ({self.probe}: {last}); "
            f"its log ends: {tail(self.log_text())}"
        )

    def exit_status(self) -> int | None:
        """The process's exit status once it has exited (a signal as its negative number); None while it runs."""
        return None if self.proc is None else self.proc.poll()

    def death_note(self) -> str:
        """How an exited server ended: its status, the log's first error and the log's tail."""
        status = None if self.proc is None else self.proc.returncode
        log = self.log_text()
        ended = f"{first_error(log)}its log ends: {tail(log)}"
        return f"{self.label}: the server exited with status {status} during the run; {ended}"

    def check_alive(self) -> None:
        """Raise EngineCrashed (with the log tail) if the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise EngineCrashed(self.death_note())

    def stop(self) -> None:
        """SIGTERM to the whole process group, SIGKILL after `stop_timeout_s`; idempotent."""
        proc = self.proc
        _LIVE.discard(self)
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=self.stop_timeout_s)
        # what outlived SIGTERM, and children that outlived the leader (forked workers), go with the group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + self.stop_timeout_s
        while _group_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, read from /proc (empty where there is no /proc)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _ppid, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(group) == pgid and state != "Z":
            members.append(int(stat.parent.name))
    return members


def stop_all() -> None:
    """Stop every server still running (interpreter exit, SIGTERM)."""
    for server in list(_LIVE):
        server.stop()


@contextlib.contextmanager
def sigterm_stops_servers() -> Iterator[None]:
    """While servers run, SIGTERM to gate stops them and ends gate as SIGTERM would (exit 143)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: Callable[..., Any] | int | None = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: Any) -> None:
        stop_all()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


EXIT_GRACE_S = 10.0
"""How long a launched server whose connection broke may take to be seen exiting, before it is taken as alive."""


@contextlib.contextmanager
def died_serving(server: ServerProcess | None, call: str, **where: int | str) -> Iterator[None]:
    """Mark a request into the engine: a server gate launched that exits while serving it crashed, a
    finding about the subject (`SubjectCrash`), not gate's error. Only a launched process seen to exit
    counts: a `base_url` server that stops answering stays an environment error (EngineCrashed)."""
    try:
        yield
    except EngineCrashed as err:
        status = None if server is None else server.exit_status()
        if status is None and server is not None and server.proc is not None:
            # a process that aborts closes its connections before it is seen to exit (a C assertion's
            # abort, then a debugger's backtrace): give it a moment before calling it alive
            with contextlib.suppress(subprocess.TimeoutExpired):
                status = server.proc.wait(timeout=EXIT_GRACE_S)
        if status is None:
            raise
        assert server is not None
        # a broken connection says nothing of why: the crash carries the server's own last words
        # (an aborting assertion), read now that it has exited, whichever of the two was seen first
        seen = err if "its log ends:" in str(err) else EngineCrashed(f"{err}; {server.death_note()}")
        raise SubjectCrash(call, seen, {**where, "exit_status": status}) from err


atexit.register(stop_all)
