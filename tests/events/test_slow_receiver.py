"""A receiver that answers a byte at a time (issue 37, item 2): an attempt, whole, ends at
SVC_WEBHOOK_TIMEOUT and is recorded as failed; it is never in flight twice; and while it
lasts, the worker sends the other endpoints their events."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from events import delivery
from events.models import DeliveryAttempt, Event
from events.services import event_emit, webhook_create
from tests.events.processes import stop_all, worker

TRICKLE_FOR = 30.0  # seconds a trickled answer would take; far past every deadline here


class Trickler:
    """Reads a request, then answers one byte of a status line every 0.2 s for
    TRICKLE_FOR seconds. Counts connections open at once."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.open = 0
        self.most_open = 0
        self.connections = 0
        self.closed = threading.Event()  # the first connection ended
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/slow"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with self.lock:
            self.open += 1
            self.connections += 1
            self.most_open = max(self.most_open, self.open)
        try:
            conn.recv(65536)
            ends = time.monotonic() + TRICKLE_FOR
            answer = b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"." * 10_000
            for byte in answer:
                if time.monotonic() > ends:
                    break
                conn.sendall(bytes([byte]))
                time.sleep(0.2)
        except OSError:
            pass  # the worker cut it
        finally:
            conn.close()
            with self.lock:
                self.open -= 1
            self.closed.set()

    def stop(self) -> None:
        self.listener.close()


@pytest.fixture
def trickler():
    running = Trickler()
    yield running
    running.stop()


@pytest.mark.django_db
def test_an_attempt_ends_at_its_deadline_however_the_answer_trickles(
    trickler, local_hooks, settings
):
    settings.SVC_WEBHOOK_TIMEOUT = 1.5
    hook = webhook_create(url=trickler.url, events=["*"])
    event_emit(Event.Type.SEAT_RELEASED, data={"n": 1})
    event = delivery.next_event(hook)
    outcome = delivery.send(hook, event)
    assert not outcome.ok and outcome.status_code is None
    assert outcome.error == "no complete answer within 1.5 s"
    # Cut at the deadline, not at the end of the trickle (TRICKLE_FOR, 30 s).
    assert 1500 <= outcome.latency_ms < 10_000, outcome
    assert trickler.closed.wait(5)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_trickling_endpoint_holds_no_other_and_is_never_sent_to_twice(
    trickler, receiver, local_hooks, tmp_path
):
    """Two workers (4 senders each), a trickling endpoint and a healthy one. The healthy
    endpoint's events all arrive while the trickled attempt is still in flight; that
    attempt is cut at its deadline (6 s; the lease is 17 s) and recorded as failed; no
    second worker sends the same event meanwhile."""
    slow = webhook_create(url=trickler.url, events=["seat.released"])
    healthy = webhook_create(url=receiver.url, events=["license.revoked"])
    receiver.secrets = [healthy.secret]
    event_emit(Event.Type.SEAT_RELEASED, data={"n": 1})
    workers = [worker(tmp_path / f"worker-{n}.log", webhook_timeout=6) for n in range(2)]
    try:
        deadline = time.monotonic() + 30
        while trickler.open == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert trickler.open == 1, "the trickled attempt did not start"
        for n in range(5):
            event_emit(Event.Type.LICENSE_REVOKED, data={"license_id": f"LIC-{n}"})
        while len(receiver.accepted()) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        # Every healthy event came while the trickled attempt was in flight.
        in_flight_meanwhile = trickler.open == 1 and not trickler.closed.is_set()
        assert len(receiver.accepted()) == 5
        assert in_flight_meanwhile, "the healthy endpoint waited for the slow one"
        assert trickler.closed.wait(30)
        while not DeliveryAttempt.objects.filter(webhook=slow).exists():
            assert time.monotonic() < deadline + 30, "the cut attempt was never recorded"
            time.sleep(0.05)
    finally:
        stop_all(workers)
    logs = "".join(path.read_text() for path in tmp_path.glob("*.log"))
    assert "Traceback" not in logs, logs[-3000:]
    (attempt,) = DeliveryAttempt.objects.filter(webhook=slow)
    assert not attempt.ok and attempt.error == "no complete answer within 6 s"
    assert 6000 <= attempt.latency_ms < 6000 + 4000, attempt.latency_ms
    assert trickler.connections == 1 and trickler.most_open == 1
    assert [d.body["data"]["license_id"] for d in receiver.accepted()] == [
        f"LIC-{n}" for n in range(5)
    ]
    assert all(process.returncode == 0 for process in workers)
