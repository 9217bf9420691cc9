"""A usage record's identity and life (contract §7): (licence, device, period); the same
identity with other counts is a conflict, refused and kept for review; a record outside
its licence's life is refused and listed while the rest of the call is stored; the
receipt names the counts the service holds."""

from __future__ import annotations

import datetime as dt

import pytest

from audit.models import AuditEntry
from billing.models import UsageConflict, UsageDaily, UsageRecord
from devices.documents import parse_receipt
from events.models import Event
from tests.billing.conftest import record

pytestmark = pytest.mark.django_db

HOUR = 3600
NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
ISSUED = NOW - dt.timedelta(days=10)
START = int(ISSUED.timestamp())  # the first hour of the licence's life


@pytest.fixture(autouse=True)
def stopped(server_clock):
    with server_clock.at(NOW):
        yield


@pytest.fixture
def metered(direct, server_clock):
    return direct("API-METERED", "cam-1", at=ISSUED)


def receipt_of(response, signing_key) -> dict:
    assert response.status_code == 200, response.json()
    receipt = parse_receipt(response.json()["receipt"], signing_key.public_key())
    return {"records": receipt.records, "refused": receipt.refused, "total": receipt.inferences}


def test_the_same_period_with_other_counts_is_a_conflict_kept_for_review(
    metered, upload, signing_key
):
    first = upload(metered, [record(START, inferences=900, frames=5)])
    assert first.json()["accepted"] == 1
    answer = upload(metered, [record(START, inferences=0), record(START + HOUR, inferences=7)])
    body = answer.json()
    assert (body["accepted"], body["duplicates"]) == (1, 0)
    assert body["conflicts"] == [
        {
            "index": 0,
            "period_start": START,
            "period_end": START + HOUR,
            "held": {"inferences": 900, "frames": 5, "stream_seconds": 0, "events": 0},
        }
    ]
    # The first counts stay and are what is billed.
    assert UsageRecord.objects.get(period_start=START).inferences == 900
    assert UsageDaily.objects.get(license=metered).inferences == 907
    # The receipt names the counts held, not the ones sent: a device sees the conflict.
    assert receipt_of(answer, signing_key)["records"] == {
        (START, START + HOUR): (900, 5, 0, 0),
        (START + HOUR, START + 2 * HOUR): (7, 0, 0, 0),
    }
    conflict = UsageConflict.objects.get()
    assert (conflict.license_id, conflict.device_id, conflict.sku) == (
        metered.id, "cam-1", "API-METERED",
    )  # fmt: skip
    assert (conflict.held_inferences, conflict.sent_inferences) == (900, 0)
    entry = AuditEntry.objects.get(action="usage.conflict")
    assert entry.target == metered.id and entry.detail["conflicts"] == 1
    event = Event.objects.get(type="usage.conflict")
    assert event.customer_id == metered.customer_id
    assert event.data["license_id"] == metered.id and event.data["device_id"] == "cam-1"
    assert event.data["conflicts"] == 1 and event.data["period_start"] == START
    # Sent again, the same conflict is kept once; the answer lists it again.
    again = upload(metered, [record(START, inferences=0)])
    assert len(again.json()["conflicts"]) == 1
    assert UsageConflict.objects.count() == 1


def test_a_record_repeated_in_one_call_with_other_counts_is_a_conflict(metered, upload):
    body = upload(metered, [record(START, inferences=3), record(START, inferences=4),
                            record(START, inferences=3)]).json()  # fmt: skip
    assert (body["accepted"], body["duplicates"]) == (1, 1)
    assert [(c["index"], c["held"]["inferences"]) for c in body["conflicts"]] == [(1, 3)]
    assert UsageRecord.objects.get().inferences == 3


def test_two_licenses_on_one_camera_meter_separately(direct, upload):
    one = direct("API-METERED", "cam-2", at=ISSUED)
    two = direct("API-METERED", "cam-2", at=ISSUED)
    assert upload(one, [record(START, inferences=111)]).json()["accepted"] == 1
    answer = upload(two, [record(START, inferences=222)]).json()
    assert (answer["accepted"], answer["duplicates"], answer["conflicts"]) == (1, 0, [])
    totals = dict(UsageDaily.objects.values_list("license_id", "inferences"))
    assert totals == {one.id: 111, two.id: 222}


def test_records_outside_the_license_life_are_refused_and_the_rest_stored(
    metered, upload, signing_key
):
    now = int(NOW.timestamp())
    records = [
        record(START - 2 * HOUR, inferences=1),  # before the licence, beyond the leeway
        record(START - HOUR, inferences=2),  # within the hour's leeway
        record(now - HOUR, inferences=3),
        record(now, length=300, inferences=4),  # ends exactly five minutes ahead
        record(now, inferences=5),  # ends an hour ahead
    ]
    answer = upload(metered, records)
    body = answer.json()
    assert (body["accepted"], body["duplicates"], body["conflicts"]) == (3, 0, [])
    assert [(r["index"], r["period_start"]) for r in body["refused"]] == [
        (0, START - 2 * HOUR),
        (4, now),
    ]
    assert "before the licence's life" in body["refused"][0]["detail"]
    assert "in the future" in body["refused"][1]["detail"]
    days = UsageDaily.objects.filter(license=metered)
    assert sum(day.inferences for day in days) == 2 + 3 + 4
    receipt = receipt_of(answer, signing_key)
    # Refused for good: before the licence. The future one is not named: sent again later.
    assert receipt["refused"] == {(START - 2 * HOUR, START - HOUR)}
    assert set(receipt["records"]) == {
        (START - HOUR, START),
        (now - HOUR, now),
        (now, now + 300),
    }


def test_records_registered_ahead_are_refused_and_leave_nothing_to_collide_with(metered, upload):
    """The owner's own token used to register zero records for the coming hours: each is
    refused as in the future, so the camera's real counts are stored when they come."""
    now = int(NOW.timestamp()) // HOUR * HOUR
    ahead = [record(now + HOUR * i, inferences=0) for i in range(1, 1001)]
    body = upload(metered, ahead).json()
    assert (body["accepted"], len(body["refused"])) == (0, 1000)
    assert not UsageRecord.objects.exists()


def test_usage_conflicts_are_listed_for_operators(metered, upload, admin_api, customer):
    upload(metered, [record(START, inferences=10)])
    upload(metered, [record(START, inferences=11)])
    page = admin_api.get("/v1/admin/usage/conflicts", {"license_id": metered.id}).json()
    (row,) = page["conflicts"]
    assert page["next_cursor"] is None
    assert (row["license_id"], row["device_id"], row["period_start"]) == (
        metered.id,
        "cam-1",
        START,
    )
    assert (row["held"]["inferences"], row["sent"]["inferences"]) == (10, 11)
    assert row["seen_at"] == int(NOW.timestamp())
    mine = admin_api.get("/v1/admin/usage/conflicts", {"customer_id": customer.id}).json()
    assert len(mine["conflicts"]) == 1
    for name, value in (("customer_id", "CUST-NOSUCHONE00"), ("license_id", "LIC-NOSUCHONE00")):
        missing = admin_api.get("/v1/admin/usage/conflicts", {name: value})
        assert missing.status_code == 404 and value in missing.json()["detail"]
