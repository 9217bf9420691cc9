"""What the hot paths cost the database, pinned: a later change cannot add a query to a
device-facing request without failing here. (In these tests every transaction is a
savepoint inside the test's own: a SAVEPOINT and a RELEASE count as two queries that
production, where BEGIN and COMMIT are not queries, does not have.)"""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest
from django.db import connection
from django.utils import timezone

from devices.documents import parse_revocation_page
from events.models import Event
from licensing import health, revocations
from licensing.models import AddOnCharge, Batch
from licensing.services import addon_add, license_issue, license_revoke
from licensing.services.activation import unit_activate
from signing import keyring

pytestmark = pytest.mark.django_db

SAVEPOINT = 2  # SAVEPOINT + RELEASE SAVEPOINT of a transaction inside the test's
POSTGRESQL = connection.vendor == "postgresql"
# A new unit's licence, activation record and event: one statement on PostgreSQL
# (config.rows.insert_rows), three INSERTs on SQLite.
UNIT_WRITES = 1 if POSTGRESQL else 3
# After the lookup, a new unit's seat and rows: on PostgreSQL one statement
# (licensing.services.activation.FRESH_SEAT_SQL with config.rows.insert_rows_after; in
# production it commits alone, here it is in a savepoint); on SQLite a transaction with
# the seat's UPDATE and the rows.
NEW_UNIT = 1 + SAVEPOINT if POSTGRESQL else 1 + UNIT_WRITES + SAVEPOINT
# What that one statement costs when it takes no seat (a released seat to transfer, an
# exhausted batch): it is tried first, then the transaction's way.
FRESH_TRY = 1 + SAVEPOINT if POSTGRESQL else 0


@pytest.fixture(autouse=True)
def _caches_held(caches_held):
    """Every count here is of a request inside what the process holds (conftest)."""


def activate(client, token, device_id, **extra):
    return client.post(
        "/v1/activate", {"batch_token": token, "device_id": device_id}, format="json", **extra
    )


@pytest.fixture
def warm_batch(make_batch, device_api):
    """A batch whose key this process has verified, and the signing keys read."""
    batch = make_batch(units=100)
    assert activate(device_api, batch.license.token, "warm-up").status_code == 200
    keyring.registry()
    return batch


def test_reactivation_is_one_query(device_api, warm_batch, django_assert_num_queries):
    with django_assert_num_queries(1):
        response = activate(device_api, warm_batch.license.token, "warm-up")
    assert response.status_code == 200 and response.json()["reactivated"] is True


COMPONENTS = {
    name: hashlib.sha256(name.encode()).hexdigest() for name in ("soc_serial", "emmc_cid", "mac")
}


def test_reactivation_with_unchanged_components_is_still_one_query(
    device_api, warm_batch, django_assert_num_queries
):
    """Issue 45: the lookup reads the stored set's hash beside the licence, so an unchanged
    set costs no query more; a new unit with components writes their rows in the same
    statement (PostgreSQL) or transaction."""
    body = {"batch_token": warm_batch.license.token, "device_id": "cam-parts"}
    body["components"] = COMPONENTS
    assert device_api.post("/v1/activate", body, format="json").status_code == 200
    with django_assert_num_queries(1):
        again = device_api.post("/v1/activate", body, format="json")
    assert again.status_code == 200 and again.json()["reactivated"] is True


def test_reactivation_records_last_seen_with_one_update_per_interval(
    device_api, warm_batch, server_clock, settings, django_assert_num_queries
):
    """Last seen (issue 42): within SVC_LAST_SEEN_MINUTES of the unit's last record by
    this process (its activation here) a re-activation stays one query; past it, one
    conditional UPDATE follows the lookup, once, after the answer is built."""
    settings.SVC_LAST_SEEN_MINUTES = 15
    server_clock(14 * 60)
    with django_assert_num_queries(1):
        assert activate(device_api, warm_batch.license.token, "warm-up").status_code == 200
    server_clock(16 * 60)
    with django_assert_num_queries(2) as captured:
        assert activate(device_api, warm_batch.license.token, "warm-up").status_code == 200
    assert captured.captured_queries[1]["sql"].lstrip().startswith("UPDATE licensing_activation")
    with django_assert_num_queries(1):
        assert activate(device_api, warm_batch.license.token, "warm-up").status_code == 200


def test_new_activation_is_the_lookup_then_seat_license_activation(
    device_api, warm_batch, django_assert_num_queries
):
    # lookup; the seat, the licence, its activation and its event (the outbox)
    with django_assert_num_queries(1 + NEW_UNIT) as captured:
        response = activate(device_api, warm_batch.license.token, "cam-new")
    assert response.status_code == 200 and response.json()["batch_units_remaining"] == 98
    statements = [q["sql"].split()[0].upper() for q in captured.captured_queries]
    if POSTGRESQL:
        assert statements.count("WITH") == 1 and "UPDATE" not in statements
    else:
        assert statements.count("UPDATE") == 1 and statements.count("INSERT") == UNIT_WRITES
    # The event reports the units left, which only the seat's UPDATE knew.
    event = Event.objects.filter(type="license.activated").latest("id")
    assert event.data["device_id"] == "cam-new" and event.data["units_remaining"] == 98


def test_a_new_activation_on_a_batch_with_an_add_on_reads_its_add_ons_once_more(
    device_api, warm_batch, django_assert_num_queries
):
    """Issue 42: the batch's add-ons are one read more; the unit's charge goes in the
    statement (or transaction) that writes the unit. A batch that never had one reads
    nothing more (the test above)."""
    addon_add(addon="anpr", batch_id=warm_batch.id)
    on_sqlite = 0 if POSTGRESQL else 1  # the charge's own INSERT
    with django_assert_num_queries(1 + 1 + NEW_UNIT + on_sqlite):
        response = activate(device_api, warm_batch.license.token, "cam-anpr")
    assert response.status_code == 200
    assert AddOnCharge.objects.filter(license_id=response.json()["license_id"]).count() == 1
    # Re-activating it costs what it always did: one query (nothing to re-sign).
    with django_assert_num_queries(1):
        assert activate(device_api, warm_batch.license.token, "cam-anpr").status_code == 200


def test_a_transfer_onto_a_released_seat_costs_two_more_statements(
    device_api, warm_batch, django_assert_num_queries
):
    from licensing.services.seats import seat_release

    on_file = warm_batch.activations.get(device_id="warm-up").license_id
    seat_release(license_id=on_file, reason="camera replaced")
    revocations.head_document()  # the list moved: its new head, built once for everyone
    # lookup; the one statement, which takes no seat; UPDATE (seat); SELECT the
    # release; UPDATE (released seats); the unit's rows
    with django_assert_num_queries(1 + FRESH_TRY + 3 + UNIT_WRITES + SAVEPOINT):
        response = activate(device_api, warm_batch.license.token, "cam-replacement")
    assert response.status_code == 200
    # With no released seat left, a new activation is back to its usual statements.
    with django_assert_num_queries(1 + NEW_UNIT):
        assert activate(device_api, warm_batch.license.token, "cam-next").status_code == 200


def test_a_batch_key_is_verified_once_per_process(
    device_api, make_batch, django_assert_num_queries
):
    batch = make_batch(units=5)
    keyring.registry()
    revocations.head_document()  # the list's head, built once for every activation
    # First sight: the batch row with its key, and the SKU still in the catalogue.
    with django_assert_num_queries(2 + 1 + NEW_UNIT):
        assert activate(device_api, batch.license.token, "cam-1").status_code == 200
    with django_assert_num_queries(1 + NEW_UNIT):
        assert activate(device_api, batch.license.token, "cam-2").status_code == 200


def test_revoking_a_cached_batch_key_is_seen_at_once(device_api, warm_batch):
    license_revoke(license_id=warm_batch.license_id, reason="stolen key")
    response = activate(device_api, warm_batch.license.token, "cam-after")
    assert response.status_code == 403
    assert "revoked" in response.json()["detail"] and "stolen key" in response.json()["detail"]
    # A device on file is refused too: the key is dead for everyone.
    assert activate(device_api, warm_batch.license.token, "warm-up").status_code == 403


def test_a_revoked_unit_on_file_is_refused_with_its_license(device_api, warm_batch):
    unit = unit_activate(batch_token=warm_batch.license.token, device_id="cam-r")
    license_revoke(license_id=unit.license_id)
    response = activate(device_api, warm_batch.license.token, "cam-r")
    assert response.status_code == 403 and unit.license_id in response.json()["detail"]


def test_an_exhausted_cached_batch_is_402(device_api, make_batch):
    batch = make_batch(units=1)
    assert activate(device_api, batch.license.token, "cam-1").status_code == 200
    response = activate(device_api, batch.license.token, "cam-2")
    assert response.status_code == 402
    assert "1 of 1 units activated" in response.json()["detail"]
    assert Batch.objects.get(pk=batch.pk).units_activated == 1


def test_throttle_counting_without_redis_is_an_upsert_and_a_read(
    device_api, warm_batch, settings, django_assert_num_queries
):
    settings.SVC_ACTIVATION_ALLOWLIST = []
    settings.SVC_ACTIVATION_RATE = "100/10s"
    # the counter's upsert (in its own transaction) and the previous window's read,
    # then the lookup; with Redis the counting is no query (tests/licensing/test_throttle.py)
    with django_assert_num_queries(2 + SAVEPOINT + 1):
        assert activate(device_api, warm_batch.license.token, "warm-up").status_code == 200


def test_healthz_reuses_a_database_check_for_a_second(client, django_assert_num_queries):
    # Warm what /healthz reads lazily (the signing keys, once per REFRESH_SECONDS or after
    # a key change an earlier test in this worker made), then count its database check.
    keyring.registry()
    assert client.get("/healthz").status_code == 200
    health._db_passed_at[0] = float("-inf")
    with django_assert_num_queries(1):
        assert client.get("/healthz").status_code == 200
    with django_assert_num_queries(0):
        assert client.get("/healthz").status_code == 200


def test_healthz_is_503_when_the_database_check_fails(client, monkeypatch):
    health._db_passed_at[0] = float("-inf")
    keyring.registry()

    def broken():
        raise health.connection.OperationalError("connection refused")

    monkeypatch.setattr(health.connection, "cursor", broken, raising=False)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["detail"].startswith("database unavailable")
    # A failed check is never reused.
    monkeypatch.undo()
    assert client.get("/healthz").status_code == 200


def test_revocation_list_costs_no_query_once_built_and_one_head_read_a_second_later(
    device_api, customer, settings, django_assert_num_queries
):
    lic = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-x")
    license_revoke(license_id=lic.id)
    head = revocations.head_get()
    first = device_api.get("/v1/revocations?since=0", HTTP_ACCEPT_ENCODING="gzip")
    assert first.status_code == 200
    with django_assert_num_queries(0):
        again = device_api.get("/v1/revocations?since=0", HTTP_ACCEPT_ENCODING="gzip")
    assert again.content == first.content
    etag = {"HTTP_IF_NONE_MATCH": revocations.page_etag(head)}
    with django_assert_num_queries(0):
        current = device_api.get(f"/v1/revocations?since={head.seq}", **etag)
    assert current.status_code == 304
    settings.SVC_LIST_HEAD_SECONDS = 0  # as when the second has passed: read the head
    with django_assert_num_queries(1):
        current = device_api.get(f"/v1/revocations?since={head.seq}", **etag)
    assert current.status_code == 304


def test_a_revocation_here_is_on_the_list_at_once(device_api, customer):
    device_api.get("/v1/revocations?since=0")  # the head is now held for a second
    lic = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-y")
    license_revoke(license_id=lic.id)
    body = device_api.get("/v1/revocations?since=0").json()
    listed = parse_revocation_page(body["revocations"], keyring.public_key()).revoked
    assert lic.id in {license_id for license_id, _ in listed}


def test_usage_upload_queries_are_pinned(
    device_api, customer, django_assert_num_queries, server_clock
):
    # Issued yesterday: the records of two hours ago lie within the licence's life.
    with server_clock.at(timezone.now() - dt.timedelta(days=1)):
        lic = license_issue(customer_id=customer.id, sku="API-METERED", device_id="cam-u")
    start = int((timezone.now() - dt.timedelta(hours=2)).timestamp()) // 3600 * 3600
    records = [
        {"period_start": start + n * 600, "period_end": start + n * 600 + 600,
         "inferences": 10, "frames": 60, "stream_seconds": 600, "events": 0}
        for n in range(3)
    ]  # fmt: skip
    body = {"device_id": "cam-u", "license_id": lic.id, "records": records}
    auth = {"HTTP_AUTHORIZATION": f"Bearer {lic.token}"}
    assert device_api.post("/v1/usage", body, format="json", **auth).status_code == 200
    later = [
        dict(r, period_start=r["period_start"] + 1800, period_end=r["period_end"] + 1800)
        for r in records
    ]
    # the licence; the records and their daily rollups (one statement on PostgreSQL, two
    # elsewhere); the licence's total for the receipt
    store = 1 if connection.vendor == "postgresql" else 2
    with django_assert_num_queries(2 + store + SAVEPOINT):
        response = device_api.post("/v1/usage", body | {"records": later}, format="json", **auth)
    assert response.status_code == 200 and response.json()["accepted"] == 3
    # Sent again, every record is held with the same counts: the insert stores none (and
    # on SQLite no rollup statement follows it); one more SELECT reads the counts held,
    # which the receipt names (contract §7).
    with django_assert_num_queries(2 + 1 + 1 + SAVEPOINT):
        response = device_api.post("/v1/usage", body | {"records": later}, format="json", **auth)
    assert response.status_code == 200
    assert (response.json()["accepted"], response.json()["duplicates"]) == (0, 3)


def test_a_sync_with_unchanged_components_from_the_unchanged_address_reads_one_row_more(
    device_api, warm_batch, django_assert_num_queries
):
    """Issue 45: GET /v1/license with the unit's components costs the refresh without them
    and the one read of the unit's activation record, which also says where the unit was
    last seen from: a steady sync from its address writes nothing (a move, or the second
    clone signal, is checked only when the address changes)."""
    body = {"batch_token": warm_batch.license.token, "device_id": "cam-parts"}
    body["components"] = COMPONENTS
    token = device_api.post("/v1/activate", body, format="json").json()["unit_token"]
    parts = ",".join(f"{n}={d}" for n, d in sorted(COMPONENTS.items()))
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    bare, with_parts = {"device_id": "cam-parts"}, {"device_id": "cam-parts", "components": parts}
    assert device_api.get("/v1/license", with_parts, **auth).status_code == 304
    with django_assert_num_queries(1) as plain:
        assert device_api.get("/v1/license", bare, **auth).status_code == 304
    with django_assert_num_queries(2) as captured:
        assert device_api.get("/v1/license", with_parts, **auth).status_code == 304
    assert [q["sql"] for q in plain.captured_queries] == [
        q["sql"] for q in captured.captured_queries if "licensing_activation" not in q["sql"]
    ]
