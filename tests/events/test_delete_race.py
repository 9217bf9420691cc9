"""Deleting a webhook while the worker delivers to it (issue 37, item 6): the delete
answers 204, the worker records its attempt without the endpoint and carries on. The
interleavings are forced with events and by waiting for PostgreSQL to report the
blocked backend, never by sleeping for a guessed time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection, connections
from django.db.models.signals import pre_delete

from events import delivery
from events.models import DeliveryAttempt, Event, Webhook
from events.services import event_emit

pytestmark = pytest.mark.django_db(transaction=True)

on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="two connections and row locks: PostgreSQL"
)
SENT = delivery.Outcome(ok=True, status_code=204, latency_ms=1, excerpt="", error="")


def _hook(admin_api) -> str:
    created = admin_api.post(
        "/v1/admin/webhooks", {"url": "http://127.0.0.1:9/hook", "events": ["*"]}, format="json"
    )
    assert created.status_code == 201, created.content
    event_emit(Event.Type.SEAT_RELEASED, data={"n": 1})
    return created.json()["webhook_id"]


class Runner(threading.Thread):
    """``call`` on its own thread and database connection; keeps its result or error."""

    def __init__(self, call: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.call, self.result, self.error = call, None, None

    def run(self) -> None:
        try:
            self.result = self.call()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error
        finally:
            connections.close_all()

    def outcome(self):
        self.join(timeout=30)
        assert not self.is_alive(), "still running"
        if self.error is not None:
            raise self.error
        return self.result


def _blocked_or_done(runner: Runner) -> None:
    """Until a backend of this database waits for a lock, or ``runner`` has finished."""
    deadline = time.monotonic() + 30
    with connections["default"].cursor() as cursor:
        while runner.is_alive() and time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.01)  # polling an observable condition, not deciding an order
    assert not runner.is_alive(), "nothing blocked and nothing finished"


def _kept_without_endpoint() -> None:
    assert not Webhook.objects.exists()
    attempt = DeliveryAttempt.objects.get()
    assert attempt.ok and attempt.webhook_id is None


def test_a_delete_during_the_send_keeps_the_attempt(admin_api, local_hooks, monkeypatch):
    hook_id = _hook(admin_api)
    answers = []

    def send(hook, event):
        answers.append(admin_api.delete(f"/v1/admin/webhooks/{hook_id}").status_code)
        return SENT

    monkeypatch.setattr(delivery, "send", send)
    assert delivery.deliver_one() is SENT
    assert answers == [204]
    _kept_without_endpoint()
    assert delivery.deliver_one() is None


@on_postgresql
def test_a_delete_holding_the_endpoint_makes_the_record_wait(admin_api, local_hooks, monkeypatch):
    hook_id = _hook(admin_api)
    sent, locked, go = threading.Event(), threading.Event(), threading.Event()

    def send(hook, event):
        sent.set()
        assert locked.wait(timeout=30)
        return SENT

    def holding(sender, instance, **kwargs):
        locked.set()
        assert go.wait(timeout=30)

    monkeypatch.setattr(delivery, "send", send)
    worker = Runner(delivery.deliver_one)
    worker.start()
    assert sent.wait(timeout=30)
    pre_delete.connect(holding, sender=Webhook)
    try:
        delete = Runner(lambda: admin_api.delete(f"/v1/admin/webhooks/{hook_id}").status_code)
        delete.start()
        assert locked.wait(timeout=30)
        _blocked_or_done(worker)
        go.set()
        assert delete.outcome() == 204
        assert worker.outcome() is SENT
    finally:
        go.set()
        pre_delete.disconnect(holding, sender=Webhook)
    _kept_without_endpoint()


@on_postgresql
def test_a_record_holding_the_endpoint_makes_the_delete_wait(admin_api, local_hooks, monkeypatch):
    hook_id = _hook(admin_api)
    recording, go = threading.Event(), threading.Event()
    release = delivery._release

    def held_release(hook, **changes):
        recording.set()
        assert go.wait(timeout=30)
        release(hook, **changes)

    monkeypatch.setattr(delivery, "send", lambda hook, event: SENT)
    monkeypatch.setattr(delivery, "_release", held_release)
    worker = Runner(delivery.deliver_one)
    worker.start()
    try:
        assert recording.wait(timeout=30)
        delete = Runner(lambda: admin_api.delete(f"/v1/admin/webhooks/{hook_id}").status_code)
        delete.start()
        _blocked_or_done(delete)
        go.set()
        assert worker.outcome() is SENT
        assert delete.outcome() == 204
    finally:
        go.set()
    _kept_without_endpoint()


def test_deleting_twice_answers_404(admin_api, local_hooks):
    hook_id = _hook(admin_api)
    assert admin_api.delete(f"/v1/admin/webhooks/{hook_id}").status_code == 204
    assert admin_api.delete(f"/v1/admin/webhooks/{hook_id}").status_code == 404
