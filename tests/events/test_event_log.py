"""The event log is an outbox: each event is written in the transaction of the change it
reports, so a refused or rolled-back change reports nothing, and a change reports once."""

from __future__ import annotations

import datetime as dt

import pytest

from billing.limits import start_of_day
from billing.services import credit_note_issue, invoice_issue
from events.models import Event
from events.scan import events_scan
from licensing.models import Batch
from licensing.services import license_issue, license_renew, license_revoke
from licensing.services.seats import seat_release

pytestmark = pytest.mark.django_db


def _types() -> list[str]:
    return list(Event.objects.order_by("id").values_list("type", flat=True))


def _activate(device_api, batch, device_id: str):
    return device_api.post(
        "/v1/activate", {"batch_token": batch.license.token, "device_id": device_id}, format="json"
    )


def test_an_activation_writes_its_event_and_a_refused_one_none(device_api, make_batch):
    batch = make_batch(units=1)
    assert _activate(device_api, batch, "cam-1").status_code == 200
    assert _activate(device_api, batch, "cam-1").status_code == 200  # reactivation: no event
    assert _activate(device_api, batch, "cam-2").status_code == 402  # exhausted: no event
    event = Event.objects.get()
    assert event.type == "license.activated" and event.customer_id == batch.customer_id
    assert event.event_id.startswith("evt_")
    assert event.data["batch_id"] == batch.id and event.data["device_id"] == "cam-1"
    assert event.data["units_remaining"] == 0 and event.data["transfer"] is False


def test_revoke_renew_release_invoice_and_credit_note_each_write_one_event(
    device_api, make_batch, customer, server_clock
):
    batch = make_batch(units=3, sku="VISION-PRO")
    unit = _activate(device_api, batch, "cam-1").json()
    seat_release(license_id=unit["license_id"], reason="camera replaced")
    license_revoke(license_id=unit["license_id"], reason="again")  # already revoked: no event
    license_renew(idempotency_key="k1", batch_id=batch.id)
    license_renew(idempotency_key="k1", batch_id=batch.id)  # a replay: no event
    with server_clock.at(start_of_day() - dt.timedelta(days=3)):
        direct = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="d-1")
    license_revoke(license_id=direct.id, reason="order cancelled")
    invoice = invoice_issue(customer_id=customer.id, period_days=30, end=start_of_day())
    credit_note_issue(number=invoice.number, reason="wrong address")
    assert _types() == [
        "license.activated",
        "license.revoked",
        "seat.released",
        "license.renewed",
        "license.revoked",
        "invoice.issued",
        "credit_note.issued",
    ]
    issued = Event.objects.get(type="invoice.issued").data
    assert issued["invoice_number"] == invoice.number and issued["currency"] == invoice.currency
    assert issued["total"] == f"{invoice.total:.2f}"
    note = Event.objects.get(type="credit_note.issued").data
    assert note["credits"] == invoice.number and note["reason"] == "wrong address"
    renewed = Event.objects.get(type="license.renewed").data
    assert renewed["batch_id"] == batch.id
    assert renewed["expires_at"] == int(Batch.objects.get(pk=batch.pk).expires_at.timestamp())


def test_a_rolled_back_change_reports_nothing(make_batch):
    from django.db import transaction

    batch = make_batch(units=2)
    with pytest.raises(RuntimeError), transaction.atomic():
        license_revoke(license_id=batch.license_id, reason="x")
        assert _types() == ["license.revoked"]
        raise RuntimeError("the caller's transaction fails after the revocation")
    assert _types() == []


def test_the_scheduled_pass_writes_each_reminder_once(make_batch, device_api, server_clock):
    batch = make_batch(units=5, sku="VISION-PRO")  # a one-year term
    for n in range(4):
        assert _activate(device_api, batch, f"cam-{n}").status_code == 200
    first = events_scan().written
    assert first == {"batch.threshold": 1}  # 4 of 5: 80 %
    assert events_scan().written == {}
    assert _activate(device_api, batch, "cam-4").status_code == 200
    assert events_scan().written == {"batch.threshold": 2}  # 95 % and 100 % at once
    percents = [e.data["percent"] for e in Event.objects.filter(type="batch.threshold")]
    assert sorted(percents) == [80, 95, 100]

    end = Batch.objects.get(pk=batch.pk).expires_at
    server_clock((end - dt.timedelta(days=20)).timestamp() - dt.datetime.now(dt.UTC).timestamp())
    assert events_scan().written == {"license.expiring": 1}  # 30 days
    server_clock((end - dt.timedelta(hours=12)).timestamp() - dt.datetime.now(dt.UTC).timestamp())
    assert events_scan().written == {"license.expiring": 2}  # 7 and 1 days
    assert events_scan().written == {}
    server_clock((end + dt.timedelta(days=1)).timestamp() - dt.datetime.now(dt.UTC).timestamp())
    assert events_scan().written == {"license.grace_started": 1}
    expiring = Event.objects.filter(type="license.expiring")
    assert sorted(e.data["days"] for e in expiring) == [1, 7, 30]
    assert {e.data["batch_id"] for e in expiring} == {batch.id}


def test_a_quota_threshold_comes_from_uploaded_usage(customer, device_api, server_clock):
    # Issued the day before the usage it uploads (a record lies within its licence's life).
    with server_clock.at(dt.datetime(2026, 10, 31, tzinfo=dt.UTC)):
        lic = license_issue(
            customer_id=customer.id, sku="DETECT-STD", device_id="m-1", api_quota=1000
        )
    start = int(dt.datetime(2026, 11, 1, tzinfo=dt.UTC).timestamp())
    record = {"period_start": start, "period_end": start + 60, "inferences": 850, "frames": 0,
              "stream_seconds": 0, "events": 0}  # fmt: skip
    response = device_api.post(
        "/v1/usage",
        {"device_id": "m-1", "records": [record]},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {lic.token}",
    )
    assert response.status_code == 200, response.content
    assert response.json()["accepted"] == 1
    assert events_scan().written == {"usage.quota_threshold": 1}
    event = Event.objects.get(type="usage.quota_threshold")
    assert event.data == {
        "license_id": lic.id, "customer_id": customer.id, "sku": "DETECT-STD",
        "device_id": "m-1", "percent": 80, "inferences": 850, "api_calls": 1000,
    }  # fmt: skip
