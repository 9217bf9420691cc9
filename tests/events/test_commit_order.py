"""No event that commits late falls behind a reader's position (issue 37, item 1).

An event takes its id at the INSERT; a transaction that took id n may commit after one
that took n + 1 was delivered. Readers (webhook endpoints, e-mail alert mailboxes) take
only what every earlier-begun writing transaction has settled (:mod:`events.log`). The
interleavings are forced with thread events, never by sleeping for a guessed time; the
live test below then runs the whole thing as production does."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from django.core import mail
from django.db import connection, transaction

from events import delivery
from events.alerts import alerts_send
from events.models import Event, Webhook
from events.services import event_emit, webhook_create
from licensing.services.activation import unit_activate
from tests.events.processes import manage, stop_all, worker
from tests.events.test_delete_race import Runner

on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="concurrent writing transactions: PostgreSQL"
)
SENT = delivery.Outcome(ok=True, status_code=204, latency_ms=1, excerpt="", error="")


def _threshold(n: int) -> dict:
    return {
        "batch_id": f"BATCH-{n}", "customer_id": "CUST-1", "sku": "VISION-PRO",
        "percent": 80, "units_activated": 8, "units_purchased": 10,
    }  # fmt: skip


class Open:
    """A writing transaction on its own connection: writes an event, then stays open
    until :meth:`commit`."""

    def __init__(self, n: int) -> None:
        self.written, self.go = threading.Event(), threading.Event()
        self.runner = Runner(self._run)
        self.n = n
        self.runner.start()
        assert self.written.wait(timeout=30)

    def _run(self) -> None:
        with transaction.atomic():
            event_emit(Event.Type.BATCH_THRESHOLD, customer_id="CUST-1", data=_threshold(self.n))
            self.written.set()
            assert self.go.wait(timeout=30)

    def commit(self) -> None:
        self.go.set()
        self.runner.outcome()


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_an_endpoint_waits_for_an_earlier_transaction_and_gets_both_in_order(
    local_hooks, monkeypatch
):
    hook = webhook_create(url="http://127.0.0.1:9/hook", events=["*"])
    sent: list[str] = []
    monkeypatch.setattr(
        delivery, "send", lambda hook, event: sent.append(event.data["batch_id"]) or SENT
    )
    earlier = Open(1)  # took its id first, commits last
    event_emit(Event.Type.BATCH_THRESHOLD, customer_id="CUST-1", data=_threshold(2))
    assert list(Event.objects.order_by("id").values_list("data__batch_id", flat=True)) == [
        "BATCH-2"
    ]  # the later one is committed and visible...
    assert delivery.deliver_one() is delivery.NOTHING_TO_SEND  # ...and waits
    Webhook.objects.filter(pk=hook.pk).update(next_attempt_at=hook.next_attempt_at)
    earlier.commit()
    for _ in range(2):
        assert delivery.deliver_one() is SENT
        Webhook.objects.filter(pk=hook.pk).update(next_attempt_at=hook.next_attempt_at)
    assert sent == ["BATCH-1", "BATCH-2"]
    assert delivery.deliver_one() is delivery.NOTHING_TO_SEND
    assert delivery.backlog() == 0


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_an_alert_digest_waits_for_an_earlier_transaction(settings):
    settings.SVC_ALERT_EMAILS = ["ops@example.com"]
    assert alerts_send() == 0  # the mailbox starts at the log's end
    earlier = Open(1)
    event_emit(Event.Type.BATCH_THRESHOLD, customer_id="CUST-1", data=_threshold(2))
    assert alerts_send() == 0 and not mail.outbox  # BATCH-2 waits for BATCH-1's transaction
    earlier.commit()
    assert alerts_send() == 1
    body = mail.outbox[0].body
    assert body.index("BATCH-1 ") < body.index("BATCH-2 "), body


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_a_new_endpoint_hears_of_an_event_still_being_written(local_hooks, monkeypatch):
    event_emit(Event.Type.SEAT_RELEASED, data={"n": 0})  # settled before: not heard
    earlier = Open(1)
    hook = webhook_create(url="http://127.0.0.1:9/hook", events=["*"])
    earlier.commit()
    event_emit(Event.Type.SEAT_RELEASED, data={"n": 2})
    sent: list[str] = []
    monkeypatch.setattr(delivery, "send", lambda hook, event: sent.append(event.type) or SENT)
    while delivery.deliver_one() is SENT:
        Webhook.objects.filter(pk=hook.pk).update(next_attempt_at=hook.next_attempt_at)
    assert sent == ["batch.threshold", "seat.released"]


# The production shape: concurrent writers (activations, transactions that stay open a
# while), two events_scan processes at once, twice, two workers of which one is killed
# mid-delivery and a third started. Every event reaches every endpoint, in the log's
# order.

ENDPOINTS = {
    "all": ["*"],
    "activations": ["license.activated"],
    "batches": ["batch.threshold", "seat.released"],
}


def _activations(batches, prefix: str) -> None:
    for b, batch in enumerate(batches):
        for n in range(batch.units_purchased):
            unit_activate(batch_token=batch.license.token, device_id=f"{prefix}-{b}-{n}")


def _open_transactions(rounds: int, done: threading.Event) -> None:
    """Transactions that take an event's id, stay open while others commit later ids,
    then write another: the late commits that passed positions in ids."""
    try:
        for n in range(rounds):
            with transaction.atomic():
                event_emit(Event.Type.SEAT_RELEASED, data={"round": n, "part": 1})
                time.sleep(0.2)  # shapes the load; nothing is asserted on time
                event_emit(Event.Type.SEAT_RELEASED, data={"round": n, "part": 2})
    finally:
        done.set()


def _ticks(done: threading.Event) -> int:
    """Events committed at once, one every 100 ms while the open transactions run: the
    later ids a caught-up endpoint is sent while an earlier id is still open."""
    ticks = 0
    while not done.is_set():
        event_emit(Event.Type.SEAT_RELEASED, data={"tick": ticks})
        ticks += 1
        time.sleep(0.1)
    return ticks


def _received(receiver, name: str) -> list[str]:
    return [d.body["id"] for d in receiver.accepted() if d.path == f"/hooks/{name}?tenant=1"]


def _expected() -> dict[str, list[str]]:
    """Per endpoint, the events it is to receive, in the log's order."""
    return {
        name: list(
            (Event.objects if types == ["*"] else Event.objects.filter(type__in=types))
            .order_by("xid", "id")
            .values_list("event_id", flat=True)
        )
        for name, types in ENDPOINTS.items()
    }


def _caught_up(receiver, seconds: float, expected: dict | None = None) -> None:
    """Wait until every endpoint has received its events (all those written so far)."""
    expected = expected or _expected()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(
        set(expected[name]) <= set(_received(receiver, name)) for name in ENDPOINTS
    ):
        time.sleep(0.05)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_scans_and_workers_deliver_every_event_in_order(
    make_batch, receiver, local_hooks, tmp_path
):
    hooks = {name: webhook_create(url=receiver.url_for(name), events=types)
             for name, types in ENDPOINTS.items()}  # fmt: skip
    receiver.secrets = [hook.secret for hook in hooks.values()]
    receiver.delay = 0.005
    batches = [[make_batch(units=5) for _ in range(4)] for _ in range(2)]
    workers = [worker(tmp_path / "worker-1.log"), worker(tmp_path / "worker-2.log")]
    writers = [Runner(lambda b=b, n=n: _activations(b, f"cam{n}")) for n, b in enumerate(batches)]
    try:
        for writer in writers:
            writer.start()
        for round_ in range(2):
            scans = [manage(tmp_path / f"scan-{round_}-{n}.log", "events_scan") for n in range(2)]
            assert [scan.wait(120) for scan in scans] == [0, 0]
        deadline = time.monotonic() + 30
        while not any(receiver.inflight.values()) and time.monotonic() < deadline:
            time.sleep(0.002)
        workers[0].send_signal(signal.SIGKILL)  # mid-delivery: a request is in flight
        workers[0].wait(10)
        workers.append(worker(tmp_path / "worker-3.log"))
        for writer in writers:
            writer.outcome()
        scans = [manage(tmp_path / f"scan-last-{n}.log", "events_scan") for n in range(2)]
        assert [scan.wait(120) for scan in scans] == [0, 0]  # the last thresholds
        # Then, with the endpoints caught up, transactions that stay open while later
        # ids commit and are sent.
        _caught_up(receiver, 120)
        done = threading.Event()
        late = [Runner(lambda: _open_transactions(15, done)), Runner(lambda: _ticks(done))]
        for writer in late:
            writer.start()
        ticks = late[1].outcome()
        late[0].outcome()
        expected = _expected()
        _caught_up(receiver, 120, expected)
    finally:
        stop_all(workers)
    logs = "".join(path.read_text() for path in tmp_path.glob("*.log"))
    assert "Traceback" not in logs, logs[-3000:]
    thresholds = Event.objects.filter(type="batch.threshold").count()
    released = Event.objects.filter(type="seat.released").count()
    assert thresholds == 8 * 3  # every batch filled: 80, 95 and 100 %
    assert released == 30 + ticks
    for name in ENDPOINTS:
        seen = _received(receiver, name)
        # In the log's order; a delivery the kill cut short may come again right after.
        once = [event for i, event in enumerate(seen) if i == 0 or seen[i - 1] != event]
        missing = len(set(expected[name]) - set(once))
        assert once == expected[name], (name, f"{missing} of {len(expected[name])} missing")
        assert len(seen) - len(once) <= 1
    assert receiver.most_inflight == 1
