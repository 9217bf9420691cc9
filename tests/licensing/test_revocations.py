"""GET /v1/revocations: the signed, incremental revocation list (devices.documents SVCR1),
its sequence numbers, pruning, caching, ETag/304 and gzip, and the page handed out with
every activation."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings
from django.utils import timezone

from devices.documents import LIST_PREFIX, parse_revocation_page, verify_document
from licensing import revocations
from licensing.models import License, Revocation, RevocationHead
from licensing.services import license_issue, license_revoke
from licensing.services.licenses import usable_until
from signing import keyring
from svccore.keyfile import write_private_key

URL = "/v1/revocations"


@pytest.fixture
def issue(customer):
    """Issue a direct licence: ``term_days=0`` is perpetual."""
    counter = iter(range(1_000_000))

    def make(term_days: int | None = None, sku: str = "DETECT-STD") -> License:
        return license_issue(
            customer_id=customer.id, sku=sku, device_id=f"cam-{next(counter)}", term_days=term_days
        )

    return make


@pytest.fixture
def fingerprint16() -> str:
    return keyring.public_key_fingerprint()[:16]


def keys_version() -> int:
    revocations.head_forget()  # the database's, not the one this process holds
    return revocations.head_get().keys


def head() -> int:
    revocations.head_forget()
    return revocations.head_get().seq


def fetch(client, since=None, **headers):
    query = {} if since is None else {"since": since}
    return client.get(URL, query, **headers)


def page(response, signing_key):
    assert response.status_code == 200, response.content
    body = response.json()
    parsed = parse_revocation_page(body["revocations"], signing_key.public_key())
    assert (parsed.seq, parsed.more, parsed.issued_at) == (body["seq"], body["more"], body["as_of"])
    return parsed


def later(monkeypatch, moment: dt.datetime) -> None:
    """Sign and prune as if it were ``moment`` (the list module's one clock)."""
    monkeypatch.setattr(revocations, "now", lambda: moment)


# --- sequence numbers ---------------------------------------------------------------


def test_revocations_are_numbered_strictly_increasing_without_gaps(issue):
    start = head()
    licenses = [issue() for _ in range(5)]
    for lic in licenses:
        license_revoke(license_id=lic.id, reason="stolen")
    rows = list(Revocation.objects.filter(seq__gt=start).values_list("seq", "license_id"))
    assert rows == [(start + n, lic.id) for n, lic in enumerate(licenses, 1)]
    assert head() == start + 5


def test_head_read_names_the_head_table():
    # The per-request head read is plain SQL; it must follow the model's table.
    assert f" FROM {RevocationHead._meta.db_table} " in revocations.HEAD_SQL


def test_revoking_twice_allocates_one_number(issue):
    start = head()
    lic = issue()
    license_revoke(license_id=lic.id, reason="first")
    license_revoke(license_id=lic.id, reason="again")
    assert head() == start + 1
    entry = Revocation.objects.get(license_id=lic.id)
    lic.refresh_from_db()
    assert (entry.seq, entry.revoked_at) == (start + 1, lic.revoked_at)


def test_usable_until_is_expiry_plus_grace_and_zero_when_perpetual(issue):
    term = issue(term_days=30)
    perpetual = issue(term_days=0)
    license_revoke(license_id=term.id)
    license_revoke(license_id=perpetual.id)
    expected = int(term.expires_at.timestamp()) + term.grace_days * 86400
    assert Revocation.objects.get(license_id=term.id).usable_until == expected == usable_until(term)
    assert Revocation.objects.get(license_id=perpetual.id).usable_until == 0


# --- pages --------------------------------------------------------------------------


def test_walking_pages_from_zero_collects_every_listed_license_exactly_once(
    device_api, issue, signing_key, monkeypatch
):
    monkeypatch.setattr(revocations, "PAGE_ENTRIES", 3)
    start = head()
    kept, pruned = [], []
    for n in range(10):
        # Every fourth licence runs out (term + grace) before the walk: it drops out.
        lic = issue(term_days=1) if n % 4 == 1 else issue(term_days=0)
        license_revoke(license_id=lic.id)
        (pruned if n % 4 == 1 else kept).append(lic.id)
    later(monkeypatch, timezone.now() + dt.timedelta(days=1 + 14, seconds=1))
    since, seen, pages = start, [], []
    while True:
        doc = page(fetch(device_api, since), signing_key)
        assert doc.start == since and len(doc.revoked) <= 3
        pages.append(doc)
        seen += [license_id for license_id, _ in doc.revoked]
        if not doc.more:
            break
        assert doc.seq < head()
        since = doc.seq
    assert seen == kept and not set(seen) & set(pruned)
    assert pages[-1].seq == head() == start + 10
    # A full page ends at its last entry's number.
    by_id = dict(Revocation.objects.values_list("license_id", "seq"))
    assert all(doc.seq == by_id[doc.revoked[-1][0]] for doc in pages[:-1])


def test_page_lists_entries_after_since_in_sequence_order(device_api, issue, signing_key):
    start = head()
    ids = [issue(term_days=0).id for _ in range(3)]
    for license_id in ids:
        license_revoke(license_id=license_id)
    doc = page(fetch(device_api, start + 1), signing_key)
    assert (doc.start, doc.seq, doc.more) == (start + 1, start + 3, False)
    assert verify_document(LIST_PREFIX, doc.text, signing_key.public_key())["iss"] == (
        settings.SVC_ISSUER
    )
    assert doc.revoked == ((ids[1], 0), (ids[2], 0))
    assert doc.issued_at == page(fetch(device_api, start + 1), signing_key).issued_at


def test_license_past_expiry_and_grace_drops_out_perpetual_stays(
    device_api, issue, signing_key, monkeypatch
):
    start = head()
    expiring, perpetual = issue(term_days=10), issue(term_days=0)
    license_revoke(license_id=expiring.id)
    license_revoke(license_id=perpetual.id)
    until = usable_until(expiring)
    later(monkeypatch, dt.datetime.fromtimestamp(until - 1, tz=dt.UTC))
    doc = page(fetch(device_api, start), signing_key)
    assert doc.revoked == ((expiring.id, until), (perpetual.id, 0))
    assert doc.issued_at == until - 1

    # Cached answers live an hour; pruning shows once the cache has let them go.
    revocations.answers_forget()
    later(monkeypatch, dt.datetime.fromtimestamp(until, tz=dt.UTC))
    doc = page(fetch(device_api, start), signing_key)
    assert doc.revoked == ((perpetual.id, 0),)
    assert doc.seq == head() == start + 2
    legacy = fetch(device_api).json()
    assert expiring.id not in legacy["revoked"] and perpetual.id in legacy["revoked"]


@pytest.mark.parametrize("since", ["-1", "abc", "", "1.5", " 1", "0x1"])
def test_since_that_is_not_a_whole_number_is_400(device_api, db, since):
    response = fetch(device_api, since)
    assert response.status_code == 400
    assert repr(since) in response.json()["detail"]


def test_since_past_the_head_is_409(device_api, issue):
    license_revoke(license_id=issue().id)
    current = head()
    response = fetch(device_api, current + 1)
    assert response.status_code == 409
    assert response.json()["detail"].startswith(
        f"revocation list is at sequence {current}; the device holds {current + 1}"
    )


# --- caching, ETag, gzip --------------------------------------------------------------


def test_device_at_head_gets_304_without_a_body_until_a_new_revocation(
    device_api, issue, signing_key, fingerprint16, django_assert_num_queries, caches_held
):
    license_revoke(license_id=issue().id)
    current = head()
    first = fetch(device_api, current)
    etag = f'"{fingerprint16}-{current}-k{keys_version()}"'
    assert first["ETag"] == etag
    assert first["Cache-Control"] == "no-cache" and first["Vary"] == "Accept-Encoding"
    doc = page(first, signing_key)
    assert (doc.start, doc.seq, doc.revoked) == (current, current, ())

    builds = revocations.BUILDS
    with django_assert_num_queries(0):  # the head read a moment ago, nothing else
        unchanged = fetch(device_api, current, HTTP_IF_NONE_MATCH=etag)
    assert unchanged.status_code == 304 and unchanged.content == b""
    assert unchanged["ETag"] == etag
    assert revocations.BUILDS == builds

    newly = issue()
    license_revoke(license_id=newly.id)
    changed = fetch(device_api, current, HTTP_IF_NONE_MATCH=etag)
    doc = page(changed, signing_key)
    assert changed["ETag"] == f'"{fingerprint16}-{current + 1}-k{keys_version()}"'
    assert (doc.seq, doc.revoked) == (current + 1, ((newly.id, usable_until(newly)),))


def test_matching_etag_behind_the_head_still_gets_the_page(device_api, issue, fingerprint16):
    start = head()
    license_revoke(license_id=issue().id)
    stale = f'"{fingerprint16}-{start}-k{keys_version()}"'
    response = fetch(device_api, start, HTTP_IF_NONE_MATCH=stale)
    assert response.status_code == 200 and response.json()["seq"] == start + 1


def test_gzip_answer_decompresses_to_the_plain_answer(device_api, issue):
    start = head()
    for _ in range(3):
        license_revoke(license_id=issue().id)
    builds = revocations.BUILDS
    zipped = fetch(device_api, start, HTTP_ACCEPT_ENCODING="br, gzip;q=0.8")
    plain = fetch(device_api, start)
    refused = fetch(device_api, start, HTTP_ACCEPT_ENCODING="gzip;q=0, identity")
    assert zipped["Content-Encoding"] == "gzip" and zipped["Content-Type"] == "application/json"
    assert not plain.has_header("Content-Encoding") and not refused.has_header("Content-Encoding")
    assert gzip.decompress(zipped.content) == plain.content == refused.content
    assert revocations.BUILDS == builds + 1  # compressed once, when built


def test_repeated_request_is_served_from_cache_and_a_revocation_rebuilds(
    device_api, issue, django_assert_num_queries, caches_held
):
    start = head()
    license_revoke(license_id=issue().id)
    first = fetch(device_api, start)
    builds = revocations.BUILDS
    with django_assert_num_queries(0):  # the head was read a moment ago
        again = fetch(device_api, start)
    assert again.content == first.content and revocations.BUILDS == builds
    license_revoke(license_id=issue().id)
    rebuilt = fetch(device_api, start)
    assert revocations.BUILDS == builds + 1
    assert rebuilt.json()["seq"] == start + 2


def test_new_signing_key_is_never_served_documents_of_the_old_one(
    device_api, issue, settings, tmp_path
):
    start = head()
    license_revoke(license_id=issue().id)
    old = fetch(device_api, start)
    settings.SVC_SIGNING_KEY_FILE = tmp_path / "new-key.pem"
    write_private_key(settings.SVC_SIGNING_KEY_FILE)
    fresh = fetch(device_api, start)
    assert fresh["ETag"] != old["ETag"]
    parse_revocation_page(fresh.json()["revocations"], keyring.public_key())


# --- older firmware -------------------------------------------------------------------


def test_without_since_the_answer_is_every_listed_id_plus_the_first_page(
    device_api, issue, signing_key, fingerprint16
):
    ids = [issue(term_days=0).id for _ in range(3)]
    for license_id in ids:
        license_revoke(license_id=license_id)
    response = fetch(device_api)
    body = response.json()
    assert set(body) == {"revoked", "as_of", "seq", "revocations", "certificates"}
    assert body["revoked"][-3:] == ids and body["seq"] == head()
    doc = parse_revocation_page(body["revocations"], signing_key.public_key())
    assert (doc.start, doc.seq, doc.issued_at) == (0, head(), body["as_of"])
    assert [license_id for license_id, _ in doc.revoked] == body["revoked"]
    etag = f'"{fingerprint16}-full-{head()}-k{keys_version()}"'
    assert response["ETag"] == etag
    unchanged = fetch(device_api, HTTP_IF_NONE_MATCH=f'"other", {etag}')
    assert unchanged.status_code == 304 and unchanged.content == b""
    zipped = fetch(device_api, HTTP_ACCEPT_ENCODING="gzip")
    assert gzip.decompress(zipped.content) == response.content


# --- activation -------------------------------------------------------------------------


def test_activation_answer_carries_a_verified_empty_page_at_the_head(
    device_api, make_batch, issue, signing_key
):
    license_revoke(license_id=issue().id)
    batch = make_batch()
    body = {"batch_token": batch.license.token, "device_id": "cam-1"}
    new = device_api.post("/v1/activate", body, format="json").json()
    doc = parse_revocation_page(new["revocations"], signing_key.public_key())
    assert (doc.start, doc.seq, doc.more, doc.revoked) == (head(), head(), False, ())
    assert {"unit_token", "license_id", "reactivated", "batch_units_remaining"} <= set(new)

    license_revoke(license_id=issue().id)
    again = device_api.post("/v1/activate", body, format="json").json()
    assert again["reactivated"] is True
    doc = parse_revocation_page(again["revocations"], signing_key.public_key())
    assert (doc.start, doc.seq) == (head(), head())


# --- concurrency ----------------------------------------------------------------------


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_concurrent_revocations_get_consecutive_numbers(live_service, issue, signing_key):
    start = head()
    ids = [issue().id for _ in range(20)]
    bodies = [json.dumps({"license_id": i, "reason": "race"}).encode() for i in ids * 2]
    barrier = threading.Barrier(len(bodies))

    def revoke(body: bytes) -> int:
        request = urllib.request.Request(
            f"{live_service.url}/v1/admin/revoke",
            data=body,
            headers={"Content-Type": "application/json", "X-Admin-Key": live_service.admin_key},
        )
        barrier.wait(timeout=30)
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        assert list(pool.map(revoke, bodies)) == [200] * len(bodies)
    rows = dict(Revocation.objects.filter(seq__gt=start).values_list("license_id", "seq"))
    assert sorted(rows.values()) == list(range(start + 1, start + 21))
    assert set(rows) == set(ids) and head() == start + 20

    with urllib.request.urlopen(f"{live_service.url}{URL}?since={start}", timeout=30) as r:
        doc = parse_revocation_page(json.load(r)["revocations"], signing_key.public_key())
    assert [license_id for license_id, _ in doc.revoked] == sorted(rows, key=rows.get)
    assert doc.seq == start + 20
