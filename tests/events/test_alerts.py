"""E-mail alerts: one digest per recipient per interval, with the ids and numbers needed
to act; an operator hears about every customer, a customer's contact only about its
own; nothing from before a recipient was configured; a failed send is retried."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys

import pytest
from django.core import mail

from events.alerts import alerts_send
from events.models import AlertMailbox
from events.scan import events_scan
from tests import conftest
from tests.factories import CustomerFactory

pytestmark = pytest.mark.django_db


def _fill(device_api, batch, count: int, prefix: str = "cam") -> None:
    for n in range(count):
        response = device_api.post(
            "/v1/activate",
            {"batch_token": batch.license.token, "device_id": f"{prefix}-{n}"},
            format="json",
        )
        assert response.status_code == 200


def _later(server_clock, minutes: float) -> None:
    server_clock.offset = getattr(server_clock, "offset", 0) + minutes * 60
    server_clock(server_clock.offset)


def test_operators_get_one_digest_per_hour(device_api, make_batch, settings, server_clock):
    settings.SVC_ALERT_EMAILS = ["ops@example.com", "oncall@example.com"]
    batch = make_batch(units=10)
    assert alerts_send() == 0  # first sight: the recipients start at the log's end
    _fill(device_api, batch, 8)
    events_scan()
    assert alerts_send() == 2
    assert [m.to for m in mail.outbox] == [["ops@example.com"], ["oncall@example.com"]]
    assert (
        f"Batch {batch.id} of {batch.customer_id} (VISION-PRO) has used 80 %" in mail.outbox[0].body
    )
    assert "8 of 10" in mail.outbox[0].body
    _fill(device_api, batch, 2, prefix="more")
    events_scan()  # 95 % and 100 %
    assert alerts_send() == 0  # within the hour: held
    _later(server_clock, 61)
    assert alerts_send() == 2
    digest = mail.outbox[2].body
    assert "95 %" in digest and "100 %" in digest and "10 of 10" in digest
    assert mail.outbox[2].subject == "[licensing] 2 alerts"
    assert alerts_send() == 0


def test_a_customer_contact_hears_only_about_its_own(
    device_api, make_batch, settings, customer, server_clock
):
    settings.SVC_ALERT_CUSTOMERS = True
    other = CustomerFactory(contact="buyer@other.example")
    customer.contact = "ops@acme.example"
    customer.save()
    mine, theirs = make_batch(units=5), make_batch(units=5, owner=other)
    alerts_send()
    _fill(device_api, mine, 5)
    _fill(device_api, theirs, 4, prefix="o")
    events_scan()
    assert alerts_send() == 2
    by_address = {m.to[0]: m for m in mail.outbox}
    assert mine.id in by_address["ops@acme.example"].body
    assert theirs.id not in by_address["ops@acme.example"].body
    assert theirs.id in by_address["buyer@other.example"].body
    assert by_address["buyer@other.example"].subject.endswith(f"for {other.id}")


def test_a_failed_send_is_tried_again(device_api, make_batch, settings, monkeypatch):
    settings.SVC_ALERT_EMAILS = ["ops@example.com"]
    batch = make_batch(units=5)
    alerts_send()
    _fill(device_api, batch, 5)
    events_scan()

    def down(*args, **kwargs):
        raise ConnectionRefusedError("SMTP server down")

    monkeypatch.setattr("events.alerts.send_mail", down)
    assert alerts_send() == 0
    box = AlertMailbox.objects.get()
    assert box.last_sent_at is None  # not counted as sent
    monkeypatch.undo()
    assert alerts_send() == 1 and "100 %" in mail.outbox[0].body


def test_a_bad_alert_address_stops_start_up():
    env = {**os.environ, "SVC_DEBUG": "1", "SVC_ALERT_EMAILS": "ops@example.com,nobody"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=conftest.REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "'nobody', not an e-mail address" in result.stderr


def test_time_is_read_from_the_server_clock(settings, server_clock, make_batch, device_api):
    settings.SVC_ALERT_EMAILS = ["ops@example.com"]
    alerts_send()
    _fill(device_api, make_batch(units=5), 5)
    events_scan()
    moment = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    assert alerts_send(now=moment) == 1
    assert AlertMailbox.objects.get().last_sent_at == moment
