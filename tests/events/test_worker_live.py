"""The webhook worker as it runs in production: ``manage.py deliver_events`` processes,
two at once, on the test database; one is killed with SIGKILL mid-delivery. Every event
reaches every endpoint, in order (a delivery cut short may arrive twice: at least once),
and no endpoint ever has two deliveries in flight at once."""

from __future__ import annotations

import signal
import time

import pytest

from events.models import Webhook
from events.services import webhook_create
from licensing.services.activation import unit_activate
from tests.events.processes import manage, stop_all, worker

pytestmark = pytest.mark.live

EVENTS = 12
ENDPOINTS = 3


def test_two_workers_and_a_kill_deliver_everything_in_order(
    transactional_db, make_batch, receiver, settings, tmp_path
):
    settings.SVC_WEBHOOK_ALLOW_HTTP = True
    settings.SVC_WEBHOOK_ALLOW_PRIVATE = True
    receiver.delay = 0.15
    hooks = [
        webhook_create(url=receiver.url_for(f"ep{n}"), events=["license.activated"])
        for n in range(ENDPOINTS)
    ]
    receiver.secrets = [hook.secret for hook in hooks]
    batch = make_batch(units=EVENTS)
    devices = [f"cam-{n:02d}" for n in range(EVENTS)]
    for device in devices:
        unit_activate(batch_token=batch.license.token, device_id=device)

    first, second = (
        worker(tmp_path / "a.log", webhook_timeout=1),
        worker(tmp_path / "b.log", webhook_timeout=1),
    )
    try:
        deadline = time.monotonic() + 10
        while len(receiver.accepted()) < ENDPOINTS and time.monotonic() < deadline:
            time.sleep(0.01)
        while not any(receiver.inflight.values()) and time.monotonic() < deadline:
            time.sleep(0.005)
        first.send_signal(signal.SIGKILL)  # mid-delivery: a request is in flight
        first.wait(5)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = Webhook.objects.filter(position__gt=0).values_list("position", flat=True)
            if len(receiver.accepted()) >= EVENTS * ENDPOINTS and len(done) == ENDPOINTS:
                positions = set(done)
                if len(positions) == 1:
                    break
            time.sleep(0.1)
    finally:
        stop_all([first, second])
    logs = "".join(path.read_text() for path in tmp_path.glob("*.log"))
    assert "Traceback" not in logs, logs[-3000:]
    for n in range(ENDPOINTS):
        path = f"/hooks/ep{n}?tenant=1"
        seen = [d.body["data"]["device_id"] for d in receiver.accepted() if d.path == path]
        # In order; a delivery the kill cut short may be repeated right after itself.
        deduplicated = [device for i, device in enumerate(seen) if i == 0 or seen[i - 1] != device]
        assert deduplicated == devices, (path, seen)
        assert len(seen) - len(deduplicated) <= 1
    assert receiver.most_inflight == 1
    assert second.returncode == 0  # SIGTERM: it finished the attempt in hand and exited


def test_the_scheduled_pass_on_two_nodes_at_once_writes_each_event_once(
    transactional_db, make_batch, tmp_path
):
    """Two ``events_scan`` processes started together over 40 batches past every
    threshold and terms about to end: each event is in the log once."""
    from django.db.models import Count

    from events.models import Event
    from licensing.models import Batch

    batches = [make_batch(units=1) for _ in range(40)]
    Batch.objects.filter(pk__in=[b.pk for b in batches]).update(units_activated=1)
    runs = [manage(tmp_path / f"scan-{n}.log", "events_scan") for n in range(2)]
    outputs = [run.wait(120) for run in runs]
    assert outputs == [0, 0], "".join(path.read_text() for path in tmp_path.glob("*.log"))
    thresholds = Event.objects.filter(type="batch.threshold")
    assert thresholds.count() == 40 * 3
    twice = thresholds.values("once_key").annotate(n=Count("id")).filter(n__gt=1)
    assert not twice.exists()
