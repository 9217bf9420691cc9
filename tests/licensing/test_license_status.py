"""GET /v1/revocations/status: the list's signed word on one licence (devices.documents
SVCS1), what the device module decides from (issue 21): O(1) whatever the list holds,
bound to the list's sequence number; stored and cacheable since issue 46
(tests/licensing/test_status_cache.py)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from devices.documents import parse_status, status_etag
from licensing import revocations
from licensing.models import Revocation, RevocationHead
from licensing.services import license_issue, license_revoke
from signing import keyring

URL = "/v1/revocations/status"

pytestmark = pytest.mark.django_db


@pytest.fixture
def direct_license(customer):
    return license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-0001")


def status_of(client, license_id, device_id="cam-0001", **headers):
    response = client.get(URL, {"license_id": license_id, "device_id": device_id}, **headers)
    assert response.status_code == 200, response.content
    body = response.json()
    status = parse_status(body["status"], keyring.public_key())
    return body, status, response


def test_a_license_not_on_the_list_is_signed_not_revoked_at_the_head(
    client, direct_license, customer
):
    other = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-0002")
    license_revoke(license_id=other.id, reason="stolen")
    revocations.head_forget()
    body, status, response = status_of(client, direct_license.id)
    assert (status.license_id, status.device_id, status.revoked, status.revoked_at) == (
        direct_license.id,
        "cam-0001",
        False,
        0,
    )
    assert status.seq == revocations.head_get().seq == 1
    assert body["revoked"] is False and body["seq"] == 1 and body["as_of"] == status.issued_at
    assert response["Cache-Control"] == "public, max-age=300"
    assert response["ETag"] == status_etag(body["status"])


def test_a_revoked_license_is_signed_revoked_with_its_time(client, direct_license):
    license_revoke(license_id=direct_license.id, reason="stolen")
    revocations.head_forget()
    body, status, _ = status_of(client, direct_license.id)
    revoked_at = int(Revocation.objects.get(license_id=direct_license.id).revoked_at.timestamp())
    assert status.revoked and status.revoked_at == revoked_at and status.seq >= 1
    assert body["revoked"] is True and body["revoked_at"] == revoked_at


def test_a_pruned_entry_is_still_revoked(client, direct_license):
    license_revoke(license_id=direct_license.id, reason="stolen")
    # The licence ended long ago: the list dropped its entry, the status keeps the truth.
    Revocation.objects.filter(license_id=direct_license.id).update(usable_until=1)
    revocations.answers_forget()
    listed = client.get("/v1/revocations").json()["revoked"]
    assert direct_license.id not in listed
    _, status, _ = status_of(client, direct_license.id)
    assert status.revoked


def test_a_revocation_after_the_head_read_is_not_claimed(client, direct_license):
    """The status is bound to the head it was read at: an entry numbered past it is not
    in it (it will be at the next read)."""
    head = revocations.head_get()
    license_revoke(license_id=direct_license.id, reason="stolen")
    answer = revocations.license_status(
        license_id=direct_license.id, device_id="cam-0001", head=head
    )
    assert answer["revoked"] is False and answer["seq"] == head.seq


def test_conditional_on_the_status_held(client, direct_license):
    body, _, first = status_of(client, direct_license.id)
    query = {"license_id": direct_license.id, "device_id": "cam-0001"}
    again = client.get(URL, query, HTTP_IF_NONE_MATCH=status_etag(body["status"]))
    assert again.status_code == 304 and again["ETag"] == first["ETag"]
    other = client.get(URL, query, HTTP_IF_NONE_MATCH='"0123456789abcdef0123456789abcdef"')
    assert other.status_code == 200 and other.json()["status"] == body["status"]


def test_an_unknown_license_id_is_not_revoked(client):
    _, status, _ = status_of(client, "LIC-NEVERISSUED00")
    assert not status.revoked


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"device_id": "cam-1"}, "license_id"),
        ({"license_id": "LIC-A"}, "device_id"),
        ({"license_id": "", "device_id": "cam-1"}, "license_id"),
        ({"license_id": "L" * 65, "device_id": "cam-1"}, "license_id"),
        ({"license_id": "LIC-\u202e", "device_id": "cam-1"}, "license_id"),
        ({"license_id": "LIC-A", "device_id": "cam-\x1b"}, "device_id"),
        ({"license_id": "LIC-A", "device_id": "d" * 129}, "device_id"),
    ],
)
def test_bad_ids_are_400_naming_the_field(client, query, field):
    response = client.get(URL, query)
    assert response.status_code == 400
    assert response.json()["detail"].startswith(f"{field}: ")


def test_one_query_whatever_the_list_holds(client, direct_license):
    Revocation.objects.bulk_create(
        Revocation(
            seq=n,
            license_id=f"LIC-FILL{n:010d}",
            revoked_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            usable_until=0,
        )
        for n in range(1, 5001)
    )
    RevocationHead.objects.update_or_create(id=1, defaults={"seq": 5000})
    revocations.answers_forget()
    status_of(client, direct_license.id)  # the head and the keys are read once per change
    # The first fetch signs and stores the status, and (the first of the unit in
    # SVC_LAST_SEEN_MINUTES) records it as seen: one conditional UPDATE
    # (licensing.services.seen).
    with CaptureQueriesContext(connection) as queries:
        status_of(client, "LIC-FILL0000004321")
    sql = [query["sql"].lstrip() for query in queries]
    assert any(q.startswith('INSERT INTO "licensing_statusdocument"') for q in sql)
    assert sql[-1].startswith("UPDATE")
    with CaptureQueriesContext(connection) as queries:
        body, status, response = status_of(client, "LIC-FILL0000004321")
    # The head with the licence's revocation, lease and hold, and the stored status, in
    # one statement.
    assert len(queries) == 1
    assert status.revoked and status.seq == 5000
    assert len(response.content) < 1000


def test_the_activation_answer_carries_the_new_license_s_status(device_api, make_batch):
    batch = make_batch(units=2)
    body = device_api.post(
        "/v1/activate",
        {"batch_token": batch.license.token, "device_id": "cam-0007"},
        format="json",
    ).json()
    status = parse_status(body["status"], keyring.public_key())
    assert (status.license_id, status.device_id, status.revoked) == (
        body["license_id"],
        "cam-0007",
        False,
    )


def test_a_status_reads_the_head_now_while_the_list_reuses_the_one_held(
    client, direct_license, settings
):
    """Another process revokes (no head_forget here): the list may reuse the head this
    process holds for SVC_LIST_HEAD_SECONDS, a status never does, so two nodes never hand
    a device statuses going back, and a revocation is in every status from its commit."""
    settings.SVC_LIST_HEAD_SECONDS = 60  # as within the production second, made certain
    held = revocations.head_get()
    Revocation.objects.create(
        seq=held.seq + 1,
        license_id=direct_license.id,
        revoked_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        usable_until=0,
    )
    RevocationHead.objects.update_or_create(id=1, defaults={"seq": held.seq + 1})
    assert revocations.head_get().seq == held.seq  # the list: the head held
    _, status, _ = status_of(client, direct_license.id)
    assert status.revoked and status.seq == held.seq + 1
    assert revocations.head_get().seq == held.seq + 1  # and the list moves on with it
