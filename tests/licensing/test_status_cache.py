"""Licence statuses a cache can serve (issue 46, licensing.status_store): signed once per
window or change of what they say, stored, served with an ETag (the document's hash)
and a max-age that never reaches past the document's window; 304 for the status held;
a revocation, hold or lease change re-signs only the statuses it changes. Every time
here is the server's clock, moved by the test."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from devices.documents import parse_status, status_etag
from licensing import revocations, status_store
from licensing.models import License, RevocationHead, Sku, StatusDocument
from licensing.services import (
    license_issue,
    license_reinstate,
    license_renew,
    license_revoke,
    license_suspend,
)
from licensing.services.keys import keys_version_bump
from signing import keyring
from svccore.timeunits import DAY

URL = "/v1/revocations/status"
WINDOW = 3600
MAX_AGE = 300
T0 = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _windows(settings):
    settings.SVC_STATUS_WINDOW_SECONDS = WINDOW
    settings.SVC_STATUS_MAX_AGE = MAX_AGE


@pytest.fixture
def at(server_clock):
    """``at(seconds)``: the server's clock stopped ``seconds`` after T0 from then on."""
    held = []

    def move(seconds: float) -> None:
        if held:
            held.pop().__exit__(None, None, None)
        context = server_clock.at(T0 + dt.timedelta(seconds=seconds))
        context.__enter__()
        held.append(context)

    yield move
    if held:
        held.pop().__exit__(None, None, None)


@pytest.fixture
def unit(customer):
    return license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-0001")


def get(client, license_id, device_id="cam-0001", **headers):
    return client.get(URL, {"license_id": license_id, "device_id": device_id}, **headers)


def document(response) -> str:
    assert response.status_code == 200, response.content
    return response.json()["status"]


def test_unchanged_status_300_gets_one_signature_one_query_each(client, unit, at):
    # The list's head row exists, as migrations leave it (a database a live test flushed
    # has none until the first revocation: the lease and hold are then a query apart).
    RevocationHead.objects.get_or_create(id=1)
    at(0)
    before = revocations.SIGNATURES
    first = document(get(client, unit.id))
    with CaptureQueriesContext(connection) as queries:
        answers = [get(client, unit.id) for _ in range(299)]
    signatures = revocations.SIGNATURES - before
    per_request = [q for q in queries.captured_queries if "signingkey" not in q["sql"]]
    print(
        f"\n300 status GETs: {signatures} signature(s), {len(queries) + 0} queries after the first"
    )
    assert signatures == 1
    # The head with the licence's inputs and the stored row, in one statement; the key
    # registry (what the answer's certificates come from) is read again every few
    # seconds, not per request.
    assert len(per_request) == 299
    assert all("licensing_statusdocument" in q["sql"] for q in per_request)
    assert {document(answer) for answer in answers} == {first}
    assert {answer["ETag"] for answer in answers} == {status_etag(first)}


def test_304_for_the_status_held_with_its_headers(client, unit, at):
    at(0)
    first = get(client, unit.id)
    assert first["Cache-Control"] == f"public, max-age={MAX_AGE}"
    etag = first["ETag"]
    at(60)
    again = get(client, unit.id, HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304 and again.content == b""
    assert again["ETag"] == etag and again["Cache-Control"] == f"public, max-age={MAX_AGE}"
    stale = get(client, unit.id, HTTP_IF_NONE_MATCH='"00000000000000000000000000000000"')
    assert stale.status_code == 200 and stale["ETag"] == etag


def test_max_age_never_passes_the_window_and_the_window_end_re_signs(client, unit, at):
    at(0)
    first = document(get(client, unit.id))
    signed = parse_status(first, keyring.public_key()).issued_at
    at(WINDOW - 100)
    late = get(client, unit.id, HTTP_IF_NONE_MATCH=status_etag(first))
    # 100 s left of the window: a cache may keep it 100 s, not MAX_AGE.
    assert late.status_code == 304 and late["Cache-Control"] == "public, max-age=100"
    at(WINDOW)
    renewed = get(client, unit.id, HTTP_IF_NONE_MATCH=status_etag(first))
    assert renewed.status_code == 200
    status = parse_status(document(renewed), keyring.public_key())
    assert status.issued_at == signed + WINDOW and renewed["ETag"] != status_etag(first)


def test_a_revocation_re_signs_only_the_revoked_license(client, unit, customer, at):
    # The list exists (a database the tests flushed may have no head row yet: the first
    # revocation would create it with a new epoch, and a new list re-signs everything).
    RevocationHead.objects.get_or_create(id=1)
    other = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-0002")
    at(0)
    mine, theirs = document(get(client, unit.id)), document(get(client, other.id, "cam-0002"))
    at(10)
    before = revocations.SIGNATURES
    license_revoke(license_id=other.id, reason="stolen")
    assert document(get(client, unit.id)) == mine  # the list moved; this status did not
    revoked = parse_status(document(get(client, other.id, "cam-0002")), keyring.public_key())
    assert revoked.revoked and revoked.seq == 1 and document(get(client, other.id, "cam-0002"))
    assert revocations.SIGNATURES - before == 1
    assert theirs != document(get(client, other.id, "cam-0002"))


def test_hold_lease_and_key_changes_re_sign_renewal_does_not(client, unit, at):
    at(0)
    seen = [document(get(client, unit.id))]

    def changed() -> bool:
        text = document(get(client, unit.id))
        fresh = text != seen[-1]
        seen.append(text)
        return fresh

    at(1)
    license_renew(idempotency_key="renew-status-cache-0001", license_id=unit.id)
    assert not changed()  # a renewal changes nothing a status says
    license_suspend(license_id=unit.id, reason="invoice unpaid")
    assert changed() and parse_status(seen[-1], keyring.public_key()).suspended
    at(2)
    license_reinstate(license_id=unit.id)
    assert changed() and not parse_status(seen[-1], keyring.public_key()).suspended
    at(3)
    Sku.objects.filter(code=unit.sku).update(max_offline_days=7)
    assert changed() and parse_status(seen[-1], keyring.public_key()).lease_end == (
        int(T0.timestamp()) + 3 + 7 * DAY
    )
    at(4)
    keys_version_bump()
    assert changed()


def test_check_in_is_the_signing_of_the_status_every_cache_serves(client, unit, at):
    Sku.objects.filter(code=unit.sku).update(max_offline_days=7)
    at(0)
    first = parse_status(document(get(client, unit.id)), keyring.public_key())
    at(1800)
    again = parse_status(document(get(client, unit.id)), keyring.public_key())
    assert again.text == first.text  # within the window: the same document
    checked_in = License.objects.get(pk=unit.id).checked_in_at
    # The service's lease end (check-in + days) is the served document's, not later.
    assert int(checked_in.timestamp()) == first.issued_at
    assert first.lease_end == first.issued_at + 7 * DAY
    # Another device's status is signed, but is not this unit's check-in.
    at(1900)
    document(get(client, unit.id, "cam-x"))
    assert License.objects.get(pk=unit.id).checked_in_at == checked_in
    at(WINDOW + 5)
    later = parse_status(document(get(client, unit.id)), keyring.public_key())
    assert later.lease_end == later.issued_at + 7 * DAY > first.lease_end
    assert int(License.objects.get(pk=unit.id).checked_in_at.timestamp()) == later.issued_at


def test_a_forgotten_store_costs_one_signature(client, unit, at):
    at(0)
    first = document(get(client, unit.id))
    status_store.statuses_forget()
    assert not StatusDocument.objects.exists()
    at(1)
    assert document(get(client, unit.id)) != first
    assert StatusDocument.objects.count() == 1


def test_a_status_read_from_a_replica_is_signed_from_the_primarys_inputs(
    client, unit, at, monkeypatch
):
    """A status to sign after a read from a replica (config.replica): its inputs are read
    again, on the primary, before it is signed and stored; a stored status that holds is
    served without that second read."""
    RevocationHead.objects.get_or_create(id=1)
    at(0)
    asked = []

    def primary_from_now():
        asked.append(True)
        return True  # as when the request had read the replica

    monkeypatch.setattr(status_store.replica, "primary_from_now", primary_from_now)
    before = revocations.SIGNATURES
    with CaptureQueriesContext(connection) as queries:
        first = document(get(client, unit.id))
    reads = [q for q in queries.captured_queries if "licensing_statusdocument" in q["sql"]]
    assert len(asked) == 1 and revocations.SIGNATURES - before == 1
    assert len(reads) == 3  # read, read again, stored
    assert document(get(client, unit.id)) == first
    assert len(asked) == 1 and revocations.SIGNATURES - before == 1
