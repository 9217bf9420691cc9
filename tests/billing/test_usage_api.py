"""POST /v1/usage (spec §4.2, contract §7) and GET /v1/admin/usage/{license_id}."""

from __future__ import annotations

import datetime as dt

import pytest

from billing.models import UsageConflict, UsageDaily, UsageRecord
from devices.documents import RECEIPT_PREFIX
from licensing.services import license_revoke
from signing import keyring
from tests.billing.conftest import record

pytestmark = pytest.mark.django_db

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z
# The cameras activate a month before the usage they upload (a record must lie within
# its licence's life, contract §7).
ACTIVATED = dt.datetime.fromtimestamp(T0, dt.UTC) - dt.timedelta(days=30)
NONE_HELD = {"conflicts": [], "refused": []}


def counts(response) -> dict:
    """A 200 answer's body without its receipt (tests/billing/test_receipts.py checks it)."""
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body.pop("receipt").startswith(f"{RECEIPT_PREFIX}.")
    assert isinstance(body.pop("certificates"), list)  # of the receipt's key, when certified
    return body


@pytest.fixture
def unit(make_batch, activate):
    return activate(make_batch(units=5), "cam-1", at=ACTIVATED)


def test_upload_twice_counts_records_once(unit, upload, admin_api):
    records = [record(T0 + i * 3600, inferences=100 + i, frames=10, events=1) for i in range(3)]
    first = upload(unit, records)
    assert first.status_code == 200
    assert counts(first) == {"accepted": 3, "duplicates": 0, **NONE_HELD}
    again = upload(unit, records)
    assert counts(again) == {"accepted": 0, "duplicates": 3, **NONE_HELD}
    usage = admin_api.get(f"/v1/admin/usage/{unit.id}")
    assert usage.status_code == 200
    assert usage.json() == {
        "license_id": unit.id,
        "inferences": 303,
        "frames": 30,
        "stream_seconds": 0,
        "events": 3,
        "records": 3,
    }


def test_identical_records_in_one_call_first_accepted_second_duplicate(unit, upload):
    one = record(T0, inferences=5)
    response = upload(unit, [one, dict(one), record(T0 + 3600, inferences=7)])
    assert counts(response) == {"accepted": 2, "duplicates": 1, **NONE_HELD}
    assert UsageRecord.objects.get(period_start=T0).inferences == 5


def test_same_period_key_with_other_counts_is_a_conflict_and_the_first_counts_stay(unit, upload):
    upload(unit, [record(T0, inferences=5, frames=2)])
    response = upload(unit, [record(T0, inferences=999), record(T0, inferences=5, frames=2)])
    assert counts(response) == {
        "accepted": 0,
        "duplicates": 1,
        "conflicts": [
            {
                "index": 0,
                "period_start": T0,
                "period_end": T0 + 3600,
                "held": {"inferences": 5, "frames": 2, "stream_seconds": 0, "events": 0},
            }
        ],
        "refused": [],
    }
    assert UsageRecord.objects.get().inferences == 5
    assert UsageDaily.objects.get().inferences == 5
    conflict = UsageConflict.objects.get()
    assert (conflict.held_inferences, conflict.sent_inferences) == (5, 999)


def test_rollups_sum_by_license_and_utc_day(unit, upload):
    upload(unit, [record(T0 - 3600, inferences=1), record(T0, inferences=2),
                  record(T0 + 23 * 3600, inferences=4)])  # fmt: skip
    upload(unit, [record(T0 + 3600, inferences=8), record(T0, inferences=100)])
    days = {row.day: (row.records, row.inferences) for row in UsageDaily.objects.all()}
    assert days == {dt.date(2025, 12, 31): (1, 1), dt.date(2026, 1, 1): (3, 14)}
    row = UsageDaily.objects.get(day=dt.date(2026, 1, 1))
    assert (row.customer_id, row.sku, row.license_id) == (unit.customer_id, unit.sku, unit.id)


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic abc", "token"])
def test_missing_bearer_token_is_401(unit, device_api, header):
    extra = {} if header is None else {"HTTP_AUTHORIZATION": header}
    response = device_api.post(
        "/v1/usage", {"device_id": "cam-1", "records": [record(T0)]}, format="json", **extra
    )
    assert response.status_code == 401
    assert "Bearer" in response.json()["detail"]
    assert not UsageRecord.objects.exists()


def test_token_that_does_not_verify_is_401(unit, upload):
    head, payload, signature = unit.token.split(".")
    forged = f"{head}.{payload}.{'A' * 86}"
    response = upload(unit, [record(T0)], token=forged)
    assert response.status_code == 401
    assert set(response.json()) == {"detail"}
    assert not UsageRecord.objects.exists()


def test_token_bound_to_another_device_is_403(unit, upload):
    response = upload(unit, [record(T0)], device_id="cam-2")
    assert response.status_code == 403
    assert "cam-1" in response.json()["detail"]
    assert not UsageRecord.objects.exists()


def test_batch_key_cannot_upload_even_for_device_star(make_batch, upload):
    batch = make_batch(units=2)
    response = upload(batch.license, [record(T0)], device_id="*")
    assert response.status_code == 403
    assert "batch key" in response.json()["detail"]


def test_revoked_license_is_403(unit, upload):
    license_revoke(license_id=unit.id, reason="stolen")
    response = upload(unit, [record(T0)])
    assert response.status_code == 403
    assert "revoked" in response.json()["detail"]
    assert not UsageRecord.objects.exists()


def test_expired_but_valid_token_may_still_upload(direct, upload):
    issued = dt.datetime.fromtimestamp(T0 - 90 * 86400, dt.UTC)
    lic = direct("API-METERED", "cam-9", at=issued, term_days=30)
    claims = lic.claims
    assert claims["exp"] == T0 - 60 * 86400
    # Past term and grace long ago: usage that happened in its term is billed.
    assert claims["exp"] + claims["grace_days"] * 86400 < T0
    response = upload(lic, [record(T0 - 80 * 86400, inferences=3)])
    assert counts(response) == {"accepted": 1, "duplicates": 0, **NONE_HELD}


def test_token_decides_license_not_body_license_id(make_batch, activate, upload):
    batch = make_batch(units=5)
    mine, other = activate(batch, "cam-1", at=ACTIVATED), activate(batch, "cam-2", at=ACTIVATED)
    response = upload(mine, [record(T0, inferences=9)], license_id=other.id)
    assert response.json()["accepted"] == 1
    stored = UsageRecord.objects.get()
    assert stored.license_id == mine.id and stored.customer_id == mine.customer_id


def test_records_beyond_1000_are_deferred_not_stored(unit, upload):
    records = [record(T0 + i * 60, length=60, inferences=1) for i in range(1203)]
    response = upload(unit, records)
    assert counts(response) == {"accepted": 1000, "duplicates": 0, "deferred": 203, **NONE_HELD}
    assert UsageRecord.objects.count() == 1000
    assert not UsageRecord.objects.filter(period_start__gte=T0 + 1000 * 60).exists()
    rest = upload(unit, records[1000:])
    assert counts(rest) == {"accepted": 203, "duplicates": 0, **NONE_HELD}


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ("not a record", "must be an object"),
        ({"period_start": T0, "period_end": T0 + 60}, "lacks inferences"),
        (record(T0) | {"inferences": -1}, "inferences must be between 0"),
        (record(T0) | {"frames": "10"}, "frames must be a non-negative integer, not str"),
        (record(T0) | {"events": 1.5}, "events must be a non-negative integer, not float"),
        (record(T0) | {"events": True}, "not bool"),
        (record(T0) | {"stream_seconds": None}, "not NoneType"),
        (record(T0) | {"period_end": T0}, "period_end (1767225600) must be after period_start"),
        (record(T0) | {"period_end": T0 - 1}, "must be after period_start"),
        (record(T0) | {"inferences": 10**19}, "between 0 and"),
    ],
)
def test_invalid_record_is_400_naming_index_and_nothing_is_stored(unit, upload, bad, words):
    records = [record(T0), record(T0 + 3600), bad, record(T0 + 7200)]
    response = upload(unit, records)
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert detail.startswith("records[2]") and words in detail
    assert not UsageRecord.objects.exists() and not UsageDaily.objects.exists()


def test_invalid_deferred_record_rejects_the_whole_call(unit, upload):
    records = [record(T0 + i * 60, length=60) for i in range(1001)] + [{"period_start": 1}]
    response = upload(unit, records)
    assert response.status_code == 400
    assert response.json()["detail"].startswith("records[1001]")
    assert not UsageRecord.objects.exists()


@pytest.mark.parametrize(
    "body", [{"device_id": "cam-1"}, {"device_id": "cam-1", "records": {"a": 1}}]
)
def test_records_must_be_an_array(unit, device_api, body):
    response = device_api.post(
        "/v1/usage", body, format="json", HTTP_AUTHORIZATION=f"Bearer {unit.token}"
    )
    assert response.status_code == 400
    assert "records must be an array" in response.json()["detail"]


def test_malformed_json_is_400_with_detail(unit, device_api):
    response = device_api.post(
        "/v1/usage", "{not json", content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {unit.token}",
    )  # fmt: skip
    assert response.status_code == 400
    assert set(response.json()) == {"detail"}


def test_empty_records_is_a_no_op(unit, upload):
    assert counts(upload(unit, [])) == {"accepted": 0, "duplicates": 0, **NONE_HELD}


def test_usage_of_unknown_license_is_404(admin_api):
    response = admin_api.get("/v1/admin/usage/LIC-NOPE")
    assert response.status_code == 404
    assert "LIC-NOPE" in response.json()["detail"]


def test_usage_of_license_without_records_is_zero(unit, admin_api):
    body = admin_api.get(f"/v1/admin/usage/{unit.id}").json()
    assert body == {"license_id": unit.id, "inferences": 0, "frames": 0, "stream_seconds": 0,
                    "events": 0, "records": 0}  # fmt: skip


def test_admin_usage_needs_admin_key(unit, device_api):
    assert device_api.get(f"/v1/admin/usage/{unit.id}").status_code == 401


def test_validly_signed_variant_of_a_unit_token_is_403_and_audited(unit, upload):
    """A unit token re-signed with the authority's key but other claims (a bigger quota)
    is not the token issued: refused, and recorded as a possible key compromise."""
    from audit.models import AuditEntry

    bigger = unit.claims | {"lim": unit.claims["lim"] | {"api_calls": 10**9}}
    response = upload(unit, [record(T0, inferences=3)], token=keyring.sign(bigger))
    assert response.status_code == 403
    assert "not the token this authority issued" in response.json()["detail"]
    entry = AuditEntry.objects.get(action="key.compromise_suspected")
    assert (entry.target, entry.result) == (unit.id, "refused")
    assert not UsageRecord.objects.exists()
    assert upload(unit, [record(T0, inferences=3)]).status_code == 200  # the real one works
