"""A timeout is a deadline for the whole call (issue 36, item 4): ``activate(timeout=)``
and ``sync(timeout=)`` end by it however slowly the answer arrives, and the video path
never waits for either.

The service here is a real socket server that answers one byte at a time (in the
status line and headers, or in the body), as a peer holding a worker would. Margins are
generous: a call must end within its timeout plus 1.5 s on a loaded machine.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import devices
from devices import LicenseError, client
from tests.devices.device_support import DEVICE

pytestmark = pytest.mark.slow  # each waits out a real timeout: run one at a time

TIMEOUT = 2
MARGIN = 1.5  # scheduling on a loaded 2-core machine, thread start-up, teardown
DRIP_SECONDS = 0.25  # one byte every this long


def answer(body: bytes, status: int = 200) -> tuple[bytes, bytes]:
    """``(head, body)`` of an HTTP answer; the head holds enough header lines that
    dripping it takes far longer than any timeout here."""
    padding = b"".join(b"X-Padding-%d: %s\r\n" % (n, b"p" * 40) for n in range(20))
    head = (
        b"HTTP/1.1 %d OK\r\nContent-Type: application/json\r\n" % status
        + padding
        + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    )
    return head, body


class DrippingService:
    """A socket server on 127.0.0.1 that reads each request whole, then sends its answer
    with ``drip`` bytes at a time every ``DRIP_SECONDS``: ``where`` is ``"head"`` (the
    status line and headers drip), ``"body"`` (the head at once, the body drips) or
    ``"nothing"`` (it never answers). Counts requests and bytes sent."""

    def __init__(
        self,
        where: str,
        *,
        head: bytes | None = None,
        body: bytes = b"{}" + b" " * 4000,
        interval: float = DRIP_SECONDS,
    ) -> None:
        self.where = where
        self.head, self.body = (head, body) if head is not None else answer(body)
        self.interval = interval
        self.requests: list[bytes] = []
        self.sent = 0
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self.serve, daemon=True)
        self._acceptor.start()

    def serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            worker = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            self._threads.append(worker)
            worker.start()

    def _read_request(self, conn: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            rest += chunk
        return head

    def _drip(self, conn: socket.socket, data: bytes) -> None:
        for index in range(len(data)):
            if self._stop.wait(self.interval):
                return
            conn.sendall(data[index : index + 1])
            self.sent += 1

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30)
            try:
                self.requests.append(self._read_request(conn))
                if self.where == "nothing":
                    self._stop.wait(30)
                elif self.where == "head":
                    self._drip(conn, self.head + self.body)
                else:
                    conn.sendall(self.head)
                    self._drip(conn, self.body)
            except OSError:  # the client gave up and closed: what the test wants
                pass

    def close(self) -> None:
        self._stop.set()
        self._acceptor.join(5)
        self._listener.close()
        for worker in self._threads:
            worker.join(5)


@contextmanager
def dripping(where: str, **kwargs: object) -> Iterator[DrippingService]:
    service = DrippingService(where, **kwargs)  # type: ignore[arg-type]
    try:
        yield service
    finally:
        service.close()


def timed(call: object) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        call()  # type: ignore[operator]
    except BaseException as exc:  # noqa: BLE001 - returned for the test to judge
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


@pytest.mark.parametrize("where", ["head", "body", "nothing"])
def test_activate_ends_by_its_timeout_however_slowly_the_answer_drips(tmp_path, where):
    with dripping(where) as service:
        elapsed, raised = timed(
            lambda: devices.activate(
                service.url,
                "B",
                tmp_path / "state",
                device_id=DEVICE,
                timeout=TIMEOUT,
                allow_http=True,
            )
        )
    assert isinstance(raised, LicenseError), raised
    assert raised.code == devices.Code.NETWORK_ERROR
    assert "timeout" in str(raised)
    assert elapsed < TIMEOUT + MARGIN, elapsed
    assert len(service.requests) == 1
    assert not (tmp_path / "state" / "license.token").exists()


@pytest.mark.parametrize("where", ["head", "body"])
def test_sync_ends_by_its_timeout_for_all_its_requests_together(make_engine, make_token, where):
    """Every answer here arrives whole in about 1.2 s, within a per-read or even a
    per-request timeout of 2 s; the three requests of one sync must still end by 2 s."""
    head = b"HTTP/1.1 503 X\r\nContent-Length: 5\r\n\r\n"
    engine = make_engine()
    engine.start(make_token())
    engine.count(inferences=1)
    interval = 1.2 / (len(head) + 5 if where == "head" else 5)
    with dripping(where, head=head, body=b"{}   ", interval=interval) as service:
        elapsed, raised = timed(lambda: engine.sync(service.url, timeout=TIMEOUT, allow_http=True))
    assert isinstance(raised, LicenseError), raised
    assert raised.code in devices.Code.all()
    assert elapsed < TIMEOUT + MARGIN, elapsed
    assert devices.Code.NETWORK_ERROR in raised.summary["errors"]
    assert 1 <= len(service.requests) <= 2  # the last had no time left: not sent
    engine.count(inferences=1)  # nothing lost, the engine runs on


def test_a_sync_against_an_answer_that_never_ends_ends_by_its_timeout(make_engine, make_token):
    engine = make_engine()
    engine.start(make_token())
    engine.count(inferences=1)
    with dripping("body") as service:
        elapsed, raised = timed(lambda: engine.sync(service.url, timeout=TIMEOUT, allow_http=True))
    assert isinstance(raised, LicenseError), raised
    assert raised.code == devices.Code.NETWORK_ERROR
    assert elapsed < TIMEOUT + MARGIN, elapsed
    # The status fetch takes the whole deadline; the licence refresh, with no time
    # left, is not even sent.
    assert raised.summary["errors"] == [devices.Code.NETWORK_ERROR] * 2
    assert len(service.requests) == 1


def test_a_slow_answer_that_arrives_whole_in_time_is_read():
    body = json.dumps({"seq": 7}).encode()
    with dripping("body", body=body) as service:
        status, payload, _ = client.call("GET", service.url + "/v1/x", timeout=10)
    assert (status, payload) == (200, {"seq": 7})


def test_requests_sharing_a_deadline_get_only_the_time_left():
    deadline = client.Deadline(TIMEOUT)
    with dripping("nothing") as service:
        elapsed, raised = timed(
            lambda: [client.call("GET", service.url, timeout=deadline) for _ in range(3)]
        )
    assert isinstance(raised, LicenseError) and raised.code == devices.Code.NETWORK_ERROR
    assert elapsed < TIMEOUT + MARGIN, elapsed
    with pytest.raises(LicenseError) as caught:  # passed: nothing more is sent
        client.call("GET", service.url, timeout=deadline)
    assert caught.value.code == devices.Code.NETWORK_ERROR
    assert len(service.requests) == 1


def test_the_video_path_never_waits_for_a_sync(make_engine, make_token):
    engine = make_engine()
    engine.start(make_token())
    engine.count(inferences=1)
    with dripping("body") as service:
        syncing = threading.Thread(
            target=lambda: timed(lambda: engine.sync(service.url, timeout=3, allow_http=True))
        )
        syncing.start()
        while not service.requests:  # the sync is now waiting on the network
            time.sleep(0.01)
        slowest = 0.0
        for _ in range(20):
            started = time.monotonic()
            with engine.open_stream() as stream:
                engine.admit_frame(stream)
            engine.count(frames=1)
            engine.require("detect")
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.05)
        assert syncing.is_alive()  # all of the above ran while the sync waited
        syncing.join(10)
    assert slowest < 0.5, slowest
