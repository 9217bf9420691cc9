"""The signed usage receipt in the answer to POST /v1/usage (devices.documents, SVCU1): a
device deletes spooled records only when a receipt that verifies covers them."""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.db.models import Sum

from billing.models import UsageDaily, UsageRecord
from devices import BadSignature
from devices.documents import (
    NONCE_MAX_CHARS,
    RECEIPT_PREFIX,
    RECEIPT_TYPE,
    parse_receipt,
    verify_document,
)
from licensing.services import license_revoke
from tests.billing.conftest import record

pytestmark = pytest.mark.django_db

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z
# The cameras activate a month before the usage they upload (a record must lie within
# its licence's life, contract §7).
ACTIVATED = dt.datetime.fromtimestamp(T0, dt.UTC) - dt.timedelta(days=30)


@pytest.fixture
def unit(make_batch, activate):
    return activate(make_batch(units=5), "cam-1", at=ACTIVATED)


def keys(records: list[dict]) -> frozenset[tuple[int, int]]:
    return frozenset((r["period_start"], r["period_end"]) for r in records)


def held(records: list[dict]) -> dict[tuple[int, int], tuple[int, int, int, int]]:
    """What a receipt names for ``records`` stored as sent: key -> counts."""
    return {
        (r["period_start"], r["period_end"]): (
            r["inferences"], r["frames"], r["stream_seconds"], r["events"]
        )
        for r in records
    }  # fmt: skip


def receipt_of(response, signing_key):
    assert response.status_code == 200, response.json()
    return parse_receipt(response.json()["receipt"], signing_key.public_key())


def test_receipt_verifies_and_names_device_license_nonce_and_issuer(unit, upload, signing_key):
    before = int(time.time())
    sent = record(T0, inferences=5, frames=4, stream_seconds=3, events=2)
    response = upload(unit, [sent], nonce="n0nce-A_z9")
    receipt = receipt_of(response, signing_key)
    assert (receipt.device_id, receipt.license_id, receipt.nonce) == (
        "cam-1",
        unit.id,
        "n0nce-A_z9",
    )
    assert before <= receipt.issued_at <= int(time.time())
    assert receipt.records == {(T0, T0 + 3600): (5, 4, 3, 2)}
    assert receipt.holds((T0, T0 + 3600), (5, 4, 3, 2))
    assert not receipt.holds((T0, T0 + 3600), (5, 4, 3, 0))
    assert (receipt.refused, receipt.inferences) == (frozenset(), 5)
    payload = verify_document(RECEIPT_PREFIX, response.json()["receipt"], signing_key.public_key())
    assert isinstance(payload.pop("kid"), str)  # the signing key's id (key rotation)
    assert payload == {
        "typ": RECEIPT_TYPE,
        "iss": settings.SVC_ISSUER,
        "dev": "cam-1",
        "lic": unit.id,
        "nonce": "n0nce-A_z9",
        "iat": receipt.issued_at,
        "records": [[T0, T0 + 3600, 5, 4, 3, 2]],
        "refused": [],
        "inferences": 5,
    }
    assert set(response.json()) == {
        "accepted", "duplicates", "conflicts", "refused", "receipt", "certificates"
    }  # fmt: skip


def test_receipt_covers_new_and_already_stored_records(unit, upload, signing_key):
    stored = [record(T0 + i * 3600, inferences=1) for i in range(3)]
    first = receipt_of(upload(unit, stored, nonce="first"), signing_key)
    assert first.records == held(stored)
    fresh = [record(T0 + 10 * 3600, inferences=1, events=6)]
    response = upload(unit, stored + fresh, nonce="second")
    assert (response.json()["accepted"], response.json()["duplicates"]) == (1, 3)
    again = receipt_of(response, signing_key)
    assert again.records == held(stored + fresh)
    assert again.nonce == "second"


def test_duplicate_within_a_call_is_covered_once_in_key_order(unit, upload, signing_key):
    late, early = record(T0 + 3600, inferences=2), record(T0, inferences=1)
    response = upload(unit, [late, early, dict(late)])
    assert (response.json()["accepted"], response.json()["duplicates"]) == (2, 1)
    payload = verify_document(RECEIPT_PREFIX, response.json()["receipt"], signing_key.public_key())
    assert payload["records"] == [[T0, T0 + 3600, 1, 0, 0, 0], [T0 + 3600, T0 + 7200, 2, 0, 0, 0]]
    assert payload["refused"] == []


def test_receipt_names_records_refused_before_the_license_but_not_future_ones(
    unit, upload, signing_key
):
    """Refused for good (before the licence's life): named in ``refused``, so the device
    stops sending them. Ending in the future: not named, sent again once ended."""
    issued = int(ACTIVATED.timestamp())
    future = (int(time.time()) // 3600 + 24) * 3600
    sent = [
        record(future, inferences=8),
        record(T0, inferences=3, frames=2),
        record(issued - 7200, inferences=1),
    ]
    response = upload(unit, sent)
    assert [(r["index"], r["period_start"]) for r in response.json()["refused"]] == [
        (0, future), (2, issued - 7200)
    ]  # fmt: skip
    payload = verify_document(RECEIPT_PREFIX, response.json()["receipt"], signing_key.public_key())
    assert payload["records"] == [[T0, T0 + 3600, 3, 2, 0, 0]]
    assert payload["refused"] == [[issued - 7200, issued - 3600]]
    receipt = receipt_of(response, signing_key)
    assert receipt.refused == frozenset({(issued - 7200, issued - 3600)})
    assert (receipt.records, receipt.inferences) == ({(T0, T0 + 3600): (3, 2, 0, 0)}, 3)


def test_receipt_covers_exactly_the_first_1000_records_not_the_deferred(unit, upload, signing_key):
    # Sent newest first, so "the first 1000" are the ones sent first, not the smallest keys.
    records = [record(T0 + i * 60, length=60, inferences=1) for i in reversed(range(1003))]
    response = upload(unit, records)
    assert response.json()["deferred"] == 3
    receipt = receipt_of(response, signing_key)
    assert receipt.records == held(records[:1000])
    assert not receipt.records.keys() & keys(records[1000:])


def test_receipt_inferences_is_the_license_total_after_the_upload(
    make_batch, activate, upload, admin_api, signing_key
):
    batch = make_batch(units=5)
    mine, other = activate(batch, "cam-1", at=ACTIVATED), activate(batch, "cam-2", at=ACTIVATED)
    upload(other, [record(T0, inferences=1000)])  # another licence: not in mine's total
    first = upload(mine, [record(T0, inferences=5), record(T0 + 86_400, inferences=7)])
    assert receipt_of(first, signing_key).inferences == 12
    second = upload(mine, [record(T0, inferences=99), record(T0 + 3600, inferences=11)])
    assert [c["index"] for c in second.json()["conflicts"]] == [0]
    receipt = receipt_of(second, signing_key)
    assert receipt.inferences == 23  # the conflicting 99 is not stored
    assert receipt.records == {(T0, T0 + 3600): (5, 0, 0, 0), (T0 + 3600, T0 + 7200): (11, 0, 0, 0)}
    assert admin_api.get(f"/v1/admin/usage/{mine.id}").json()["inferences"] == 23


def test_empty_upload_gets_a_signed_time_and_the_current_total(unit, upload, signing_key):
    response = upload(unit, [], nonce="empty")
    assert response.json()["accepted"] == response.json()["duplicates"] == 0
    assert receipt_of(response, signing_key).inferences == 0
    upload(unit, [record(T0, inferences=42)])
    before = int(time.time())
    response = upload(unit, [], nonce="empty-2")
    receipt = receipt_of(response, signing_key)
    assert (receipt.records, receipt.refused, receipt.inferences, receipt.nonce) == (
        {}, frozenset(), 42, "empty-2"
    )  # fmt: skip
    assert before <= receipt.issued_at <= int(time.time())
    assert UsageRecord.objects.count() == 1


@pytest.mark.parametrize("body", [{}, {"nonce": None}])
def test_missing_or_null_nonce_is_echoed_as_empty(unit, upload, signing_key, body):
    assert receipt_of(upload(unit, [record(T0)], **body), signing_key).nonce == ""


@pytest.mark.parametrize("nonce", ["a", "A" * NONCE_MAX_CHARS, "Zz09-_"])
def test_base64url_nonce_of_1_to_64_characters_is_echoed(unit, upload, signing_key, nonce):
    assert receipt_of(upload(unit, [record(T0)], nonce=nonce), signing_key).nonce == nonce


@pytest.mark.parametrize(
    "nonce",
    [7, True, ["abc"], {"n": "abc"}, "", "a" * (NONCE_MAX_CHARS + 1), "abc=", "ab/c", "a+b",
     "a b", "abc\n", "caf\u00e9"],
)  # fmt: skip
def test_bad_nonce_is_400_and_nothing_is_stored(unit, upload, nonce):
    response = upload(unit, [record(T0, inferences=3), record(T0 + 3600)], nonce=nonce)
    assert response.status_code == 400
    assert set(response.json()) == {"detail"}
    assert response.json()["detail"].startswith("nonce must be")
    assert not UsageRecord.objects.exists() and not UsageDaily.objects.exists()


def test_receipt_license_comes_from_the_token_not_the_body(
    make_batch, activate, upload, signing_key
):
    batch = make_batch(units=5)
    mine, other = activate(batch, "cam-1", at=ACTIVATED), activate(batch, "cam-2", at=ACTIVATED)
    response = upload(mine, [record(T0, inferences=9)], license_id=other.id)
    receipt = receipt_of(response, signing_key)
    assert (receipt.license_id, receipt.device_id, receipt.inferences) == (mine.id, "cam-1", 9)


def test_errors_carry_no_receipt(unit, upload):
    license_revoke(license_id=unit.id, reason="stolen")
    response = upload(unit, [record(T0)], nonce="abc")
    assert response.status_code == 403
    assert set(response.json()) == {"detail"}


def test_tampered_receipt_does_not_verify(unit, upload, signing_key):
    text = upload(unit, [record(T0, inferences=5)], nonce="abc").json()["receipt"]
    prefix, payload, signature = text.split(".")
    middle = len(payload) // 2
    flipped = "B" if payload[middle] == "A" else "A"
    forged = f"{prefix}.{payload[:middle]}{flipped}{payload[middle + 1 :]}.{signature}"
    with pytest.raises(BadSignature):
        parse_receipt(forged, signing_key.public_key())
    with pytest.raises(BadSignature):  # a receipt from anyone but this authority
        parse_receipt(text, Ed25519PrivateKey.generate().public_key())


def _post(url: str, token: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{url}/v1/usage",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, json.load(response)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_concurrent_uploads_each_get_a_receipt_for_exactly_their_records(
    live_service, make_batch, activate, signing_key
):
    unit = activate(make_batch(units=2), "cam-race", at=ACTIVATED)
    records = [record(T0 + i * 3600, inferences=i + 1) for i in range(300)]
    calls = []
    for n in range(8):
        mine = records[:]
        random.Random(n).shuffle(mine)
        calls.append({"device_id": "cam-race", "records": mine[:200], "nonce": f"call-{n}"})
    start = threading.Barrier(len(calls))

    def fire(body: dict) -> tuple[int, dict]:
        start.wait(timeout=30)
        return _post(live_service.url, unit.token, body)

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        results = list(pool.map(fire, calls))
    stored = set(UsageRecord.objects.values_list("period_start", "period_end"))
    total = UsageDaily.objects.aggregate(n=Sum("inferences"))["n"]
    for body, (status, answer) in zip(calls, results, strict=True):
        assert status == 200, answer
        receipt = parse_receipt(answer["receipt"], signing_key.public_key())
        assert receipt.nonce == body["nonce"]
        assert receipt.records == held(body["records"])
        assert receipt.records.keys() <= stored
        # Every record a receipt covers was committed when its total was read.
        assert sum(r["inferences"] for r in body["records"]) <= receipt.inferences <= total
