"""The HTTP transport of :mod:`devices.client`: one exchange bounded by a
:class:`Deadline` for the whole call (name resolution, connect, TLS, sending, the status
line, every header and the body), redirects declined. Standard library only; loaded with
the client, on the first ``activate`` or ``sync``, never by ``import devices``.
"""

from __future__ import annotations

import functools
import http.client
import io
import socket
import threading
import time
import urllib.request
from typing import Any

from .bounds import timeout_seconds


class Deadline:
    """The moment a whole call must be over by, on the monotonic clock (no clock setting
    moves it). Every network step waits at most :meth:`remaining`, which raises
    TimeoutError (an OSError: the call ends with ``NETWORK_ERROR``) once the moment has
    passed.

    The network functions of :mod:`devices.client` take ``timeout=`` as seconds or as a Deadline,
    so several requests can share one: ``Engine.sync`` passes one to all of its."""

    __slots__ = ("seconds", "_end")

    def __init__(self, seconds: float) -> None:
        self.seconds = timeout_seconds(seconds)  # InvalidArgument: (0, 1 day] only
        self._end = time.monotonic() + self.seconds

    @classmethod
    def after(cls, timeout: float | Deadline) -> Deadline:
        """``timeout`` itself when it is a Deadline, else one ``timeout`` seconds from
        now (InvalidArgument unless ``0 < timeout <= 86400``)."""
        return timeout if isinstance(timeout, Deadline) else cls(timeout)

    def left(self) -> float:
        """Seconds until the deadline, 0 or less once it has passed."""
        return self._end - time.monotonic()

    def remaining(self) -> float:
        """Seconds until the deadline; TimeoutError once it has passed."""
        left = self.left()
        if left <= 0:
            raise TimeoutError(f"the {self.seconds:g} s timeout of the whole call passed")
        return left

    def passed(self) -> bool:
        return self.left() <= 0


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects are answered, not followed: a 3xx would carry the licence's bearer token
    to another address (https to http, another host) that the caller never configured.
    Declining here, before the Location header is even read, leaves the 3xx to
    ``call``."""

    def http_error_302(self, *args: Any, **kwargs: Any) -> None:
        return None

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def _open_socket(
    address: tuple[str, int],
    timeout: object = None,
    source_address: tuple[str, int] | None = None,
    *,
    deadline: Deadline,
) -> socket.socket:
    """``socket.create_connection`` ended by ``deadline``: name resolution, which no socket
    timeout bounds, included. It runs in a helper thread that the call stops waiting for
    at the deadline; a connection it makes after that is closed, never used."""
    outcome: list[Any] = []
    lock = threading.Lock()
    given_up = threading.Event()

    def connect() -> None:
        try:
            made: Any = socket.create_connection(address, deadline.remaining(), source_address)
        except BaseException as exc:  # handed to the caller below
            made = exc
        with lock:
            if given_up.is_set():
                if isinstance(made, socket.socket):
                    made.close()
                return
            outcome.append(made)

    helper = threading.Thread(target=connect, name="devices-connect", daemon=True)
    helper.start()
    helper.join(max(deadline.left(), 0))
    with lock:
        if not outcome:
            given_up.set()
            raise TimeoutError(
                f"no connection to {address[0]} within the {deadline.seconds:g} s timeout"
            )
    made = outcome[0]
    if isinstance(made, BaseException):
        raise made
    made.settimeout(max(deadline.left(), 0.001))  # the TLS handshake, a proxy tunnel
    return made


class _DeadlineReader(io.RawIOBase):
    """The socket's byte stream, each read waiting at most the time the deadline leaves
    (http.client reads the status line and headers line by line and the body in
    chunks: every one of those reads goes through here)."""

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        super().__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)  # keeps the socket open while read
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self._sock.settimeout(self._deadline.remaining())
        return self._raw.readinto(buffer)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class _DeadlineSocket:
    """What an HTTPResponse is given instead of the socket: it only calls ``makefile``."""

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        self._sock, self._deadline = sock, deadline

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))


class _DeadlineResponse(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args: Any, deadline: Deadline, **kwargs: Any):
        super().__init__(_DeadlineSocket(sock, deadline), *args, **kwargs)  # type: ignore[arg-type]


class _WithinDeadline:
    """An http.client connection whose every step ends by ``deadline``: connecting
    (:func:`_open_socket`), each send, and each read of the answer, a proxy's answer to
    CONNECT included (:class:`_DeadlineResponse`)."""

    sock: Any

    def __init__(self, *args: Any, deadline: Deadline, **kwargs: Any) -> None:
        kwargs["timeout"] = deadline.remaining()
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        self._deadline = deadline
        self._create_connection = functools.partial(_open_socket, deadline=deadline)
        self.response_class = functools.partial(_DeadlineResponse, deadline=deadline)

    def send(self, data: Any) -> None:
        if self.sock is not None:
            self.sock.settimeout(self._deadline.remaining())  # sendall: the whole send
        super().send(data)  # type: ignore[misc]


class _HTTPConnection(_WithinDeadline, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_WithinDeadline, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        connection = functools.partial(_HTTPConnection, deadline=self._deadline)
        return self.do_open(connection, req)  # type: ignore[arg-type]


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        connection = functools.partial(_HTTPSConnection, deadline=self._deadline)
        return self.do_open(connection, req, context=self._context)  # type: ignore[arg-type]


def opener(deadline: Deadline) -> urllib.request.OpenerDirector:
    """urllib as before (proxies from the environment, redirects refused), its
    connections bounded by ``deadline``."""
    return urllib.request.build_opener(
        _RefuseRedirects, _HTTPHandler(deadline), _HTTPSHandler(deadline)
    )
