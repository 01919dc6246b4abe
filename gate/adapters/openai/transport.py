"""One HTTP request under a total deadline and a size limit.

A socket timeout bounds each wait for bytes, not the request (a server dripping one byte a second
keeps it open for ever): `fetch` arms a timer for the whole request that shuts the socket down when
it fires, and the request ends as a `TimeoutError`. A reply body is read up to `MAX_BODY` bytes and a
streamed line up to `MAX_LINE`; more is refused as a bad reply.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from gate.errors import EngineBadReply

MAX_BODY = 64 * 1024 * 1024
"""Largest reply body (or whole stream) read, in bytes: far above any completion gate asks for."""
MAX_LINE = 4 * 1024 * 1024
"""Largest line of a server-sent-events stream, in bytes."""
MAX_ERROR_BODY = 4096
"""Bytes of an HTTP error's body read to quote it."""


class HTTPStatus(Exception):
    """The server answered with an HTTP error status; `body` is the start of what it said."""

    def __init__(self, code: int, body: bytes) -> None:
        super().__init__(f"HTTP {code}")
        self.code, self.body = code, body


class Deadline:
    """A timer that cuts every connection it watches when `seconds` have passed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _cut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _cut(sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _cut(sock: socket.socket) -> None:
    """Shut the socket down under whatever is reading it (the plain socket's call, TLS included)."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Connection(http.client.HTTPConnection):
    """A connection whose socket the deadline watches from the moment it is connected."""

    def __init__(self, *args: Any, deadline: Deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def connect(self) -> None:
        super().connect()
        self._deadline.watch(self.sock)


class _TLSConnection(_Connection, http.client.HTTPSConnection):
    """The same over TLS (the watched socket is the wrapped one)."""


class _Handler(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    """Opens http and https URLs on watched connections (replacing urllib's own two handlers)."""

    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_Connection, deadline=self._deadline), req)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        tls = functools.partial(_TLSConnection, deadline=self._deadline)
        return self.do_open(tls, req, context=self._context)  # type: ignore[attr-defined]


def read_body(reply: Any, where: str) -> bytes:
    """The whole body, refused beyond MAX_BODY bytes."""
    raw: bytes = reply.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise EngineBadReply(f"{where}: the reply is larger than {MAX_BODY // (1024 * 1024)} MiB")
    return raw


def lines(reply: Any, where: str) -> Iterator[bytes]:
    """The lines of a streamed reply, each refused beyond MAX_LINE bytes and all beyond MAX_BODY."""
    total = 0
    while True:
        line: bytes = reply.readline(MAX_LINE + 1)
        if not line:
            return
        total += len(line)
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            raise EngineBadReply(f"{where}: a streamed line is longer than {MAX_LINE // (1024 * 1024)} MiB")
        if total > MAX_BODY:
            raise EngineBadReply(f"{where}: the stream is larger than {MAX_BODY // (1024 * 1024)} MiB")
        yield line


def origin(url: str) -> str:
    """scheme://host:port of `url` (the port spelled out), what a redirect must keep."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


class _SameOrigin(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only within the origin asked: urllib would carry the request's headers (a
    bearer token) to whatever host a redirect names."""

    def __init__(self, where: str) -> None:
        self.where = where

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        if origin(newurl) != origin(req.full_url):
            raise EngineBadReply(
                f"{self.where}: HTTP {code} redirect to another origin ({origin(newurl)}), not followed: "
                f"requests and their headers go only to {origin(req.full_url)}"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def fetch(req: urllib.request.Request, timeout_s: float, where: str, read: Callable[[Any], Any] | None = None) -> Any:
    """Send `req` and read its reply (`read(reply)`, default the body's bytes), all within `timeout_s`:
    TimeoutError when the deadline passed (even if a read then returned something), HTTPStatus for an
    error status, the usual URLError / OSError for a connection that failed."""
    deadline = Deadline(timeout_s)
    body = b""
    opener = urllib.request.OpenerDirector()  # http and https only: never file:, ftp: or data: URLs
    for handler in (
        urllib.request.ProxyHandler(),
        urllib.request.UnknownHandler(),
        _Handler(deadline),
        urllib.request.HTTPDefaultErrorHandler(),
        _SameOrigin(where),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    try:
        with opener.open(req, timeout=timeout_s) as reply:
            out = read(reply) if read is not None else read_body(reply, where)
    except urllib.error.HTTPError as err:
        with contextlib.suppress(Exception):
            body = err.read(MAX_ERROR_BODY)
        if deadline.expired:
            raise TimeoutError(f"no complete reply within {timeout_s:g}s") from None
        raise HTTPStatus(err.code, body) from None
    except Exception:
        if deadline.expired:
            raise TimeoutError(f"no complete reply within {timeout_s:g}s") from None
        raise
    finally:
        deadline.cancel()
    if deadline.expired:
        raise TimeoutError(f"no complete reply within {timeout_s:g}s")
    return out
