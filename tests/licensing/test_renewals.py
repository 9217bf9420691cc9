"""Renewals (issue 16): a batch or a direct licence renewed in place, before its end,
in grace or after grace (server clock injected); its cameras fetch renewed licences from
GET /v1/license; idempotent per key; bad input refused with nothing extended twice."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from audit.models import AuditEntry
from devices.token import decode_unverified
from licensing.models import Batch, License, Renewal, Revocation, SupersededToken, token_digest
from licensing.services.licenses import usable_until
from licensing.services.renewals import license_refresh, license_renew
from tests.test_deploy_settings import manage

pytestmark = pytest.mark.django_db

DAY = 86400


def activate(client, token, device_id):
    response = client.post(
        "/v1/activate", {"batch_token": token, "device_id": device_id}, format="json"
    )
    assert response.status_code == 200, response.json()
    return response.json()


def renew(client, **body):
    return client.post("/v1/admin/renew", body, format="json")


def refresh(client, token, device_id):
    return client.get("/v1/license", {"device_id": device_id}, HTTP_AUTHORIZATION=f"Bearer {token}")


def end_of(batch) -> int:
    batch.refresh_from_db()
    return int(batch.expires_at.timestamp())


def test_renewed_before_expiry_the_term_runs_from_the_current_end(
    admin_api, device_api, make_batch, server_clock
):
    batch = make_batch(units=5, sku="DETECT-STD")  # 365 days, 14 days of grace
    old_key = batch.license.token
    activate(device_api, old_key, "cam-1")
    activate(device_api, old_key, "cam-2")
    old_end = end_of(batch)
    server_clock(300 * DAY)  # 65 days before the end

    response = renew(admin_api, batch_id=batch.id, idempotency_key="renew-1")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["basis"] == "before_expiry" and body["replayed"] is False
    assert (body["previous_expires_at"], body["expires_at"]) == (old_end, old_end + 365 * DAY)
    assert (body["term_days"], body["units"], body["batch_id"]) == (365, 2, batch.id)
    assert body["unit_price"] == 90 and body["amount"] == 180 and body["currency"] == "EUR"
    assert end_of(batch) == old_end + 365 * DAY
    status = admin_api.get(f"/v1/admin/batches/{batch.id}").json()
    assert status["expires_at"] == old_end + 365 * DAY
    key = License.objects.get(pk=batch.license_id)
    assert decode_unverified(key.token)["exp"] == old_end + 365 * DAY
    assert key.token_sha256 == token_digest(key.token) != token_digest(old_key)
    assert SupersededToken.objects.filter(license=key, token_sha256=token_digest(old_key)).exists()
    entry = AuditEntry.objects.get(action="license.renew")
    assert entry.result == AuditEntry.Result.OK and entry.target == batch.id
    # The batch key flashed into cameras still activates, with the renewed end.
    fresh = activate(device_api, old_key, "cam-3")
    assert decode_unverified(fresh["unit_token"])["exp"] == old_end + 365 * DAY


def test_renewed_in_grace_the_term_runs_from_the_old_end(admin_api, make_batch, server_clock):
    batch = make_batch(units=3, sku="DETECT-STD")
    old_end = end_of(batch)
    server_clock(370 * DAY)  # 5 days into 14 of grace

    body = renew(admin_api, batch_id=batch.id, idempotency_key="k", term_days=30).json()

    assert body["basis"] == "in_grace"
    assert body["expires_at"] == old_end + 30 * DAY == end_of(batch)


def test_renewed_after_grace_the_term_runs_from_now(admin_api, make_batch, server_clock):
    batch = make_batch(units=3, sku="DETECT-STD")
    old_end = end_of(batch)
    server_clock(400 * DAY)  # 35 days after the end: grace (14) is over

    body = renew(admin_api, batch_id=batch.id, idempotency_key="k", term_days=30).json()

    assert body["basis"] == "after_grace"
    assert body["expires_at"] == body["renewed_at"] + 30 * DAY == end_of(batch)
    assert body["renewed_at"] >= old_end + 35 * DAY


def test_an_expired_batch_refuses_activation_until_renewed(
    admin_api, device_api, make_batch, server_clock
):
    batch = make_batch(units=3, sku="API-METERED")  # 30 days, 7 of grace
    activate(device_api, batch.license.token, "cam-1")
    server_clock(60 * DAY)
    refused = device_api.post(
        "/v1/activate", {"batch_token": batch.license.token, "device_id": "cam-2"}, format="json"
    )
    assert refused.status_code == 403 and "expired" in refused.json()["detail"]

    renew(admin_api, batch_id=batch.id, idempotency_key="k")

    again = activate(device_api, batch.license.token, "cam-1")  # re-activation
    assert again["reactivated"] is True
    assert decode_unverified(again["unit_token"])["exp"] == end_of(batch)
    assert activate(device_api, batch.license.token, "cam-2")["reactivated"] is False


def test_a_unit_fetches_its_renewed_license_once_and_then_gets_304(
    admin_api, device_api, make_batch, server_clock
):
    batch = make_batch(units=3, sku="API-METERED")
    unit = activate(device_api, batch.license.token, "cam-1")
    old_token, license_id = unit["unit_token"], unit["license_id"]
    assert refresh(device_api, old_token, "cam-1").status_code == 304  # nothing new yet
    server_clock(20 * DAY)
    renew(admin_api, batch_id=batch.id, idempotency_key="k")
    new_end = end_of(batch)

    response = refresh(device_api, old_token, "cam-1")

    assert response.status_code == 200, response.content
    body = response.json()
    claims = decode_unverified(body["token"])
    assert (body["license_id"], body["expires_at"], claims["exp"]) == (license_id, new_end, new_end)
    assert claims["lic"] == license_id and claims["dev"] == "cam-1"
    assert claims["nbf"] == decode_unverified(old_token)["nbf"]  # valid from the same second
    assert body["certificates"] is not None
    row = License.objects.get(pk=license_id)
    assert row.token == body["token"] and row.token_sha256 == token_digest(body["token"])
    assert int(row.expires_at.timestamp()) == new_end and row.claims["exp"] == new_end
    assert refresh(device_api, body["token"], "cam-1").status_code == 304
    # The token it replaced still counts: answered the current one, not re-signed again.
    assert refresh(device_api, old_token, "cam-1").json()["token"] == body["token"]
    assert activate(device_api, batch.license.token, "cam-1")["unit_token"] == body["token"]
    upload = device_api.post(
        "/v1/usage",
        {"device_id": "cam-1", "license_id": license_id, "records": []},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {old_token}",
    )
    assert upload.status_code == 200, upload.json()


def test_a_reactivation_after_renewal_answers_the_renewed_license(
    admin_api, device_api, make_batch
):
    batch = make_batch(units=3, sku="DETECT-STD")
    first = activate(device_api, batch.license.token, "cam-1")
    renew(admin_api, batch_id=batch.id, idempotency_key="k")

    again = activate(device_api, batch.license.token, "cam-1")

    assert again["license_id"] == first["license_id"] and again["reactivated"] is True
    assert decode_unverified(again["unit_token"])["exp"] == end_of(batch)
    assert License.objects.get(pk=first["license_id"]).token == again["unit_token"]


def test_a_direct_license_renews_and_its_device_fetches_it(admin_api, device_api, customer):
    issued = admin_api.post(
        "/v1/admin/licenses",
        {"customer_id": customer.id, "sku": "VISION-PRO", "device_id": "cam-9"},
        format="json",
    ).json()

    body = renew(admin_api, license_id=issued["license_id"], idempotency_key="d1").json()

    assert body["batch_id"] is None and body["units"] == 1 and body["amount"] == 240
    assert body["expires_at"] == issued["expires_at"] + 365 * DAY
    fetched = refresh(device_api, issued["token"], "cam-9").json()
    assert decode_unverified(fetched["token"])["exp"] == body["expires_at"]
    assert refresh(device_api, fetched["token"], "cam-9").status_code == 304


def test_renewal_is_idempotent_per_key(admin_api, make_batch):
    batch = make_batch(units=3, sku="DETECT-STD")
    old_end = end_of(batch)
    first = renew(admin_api, batch_id=batch.id, idempotency_key="once")
    retry = renew(admin_api, batch_id=batch.id, idempotency_key="once")
    assert (first.status_code, retry.status_code) == (201, 200)
    assert retry.json()["replayed"] is True
    assert retry.json()["renewal_id"] == first.json()["renewal_id"]
    assert end_of(batch) == old_end + 365 * DAY and Renewal.objects.count() == 1
    # The header carries a key as well; the same key with another request is refused.
    by_header = admin_api.post(
        "/v1/admin/renew", {"batch_id": batch.id}, format="json", HTTP_IDEMPOTENCY_KEY="once"
    )
    assert by_header.status_code == 200 and by_header.json()["replayed"] is True
    other = renew(admin_api, batch_id=batch.id, idempotency_key="once", term_days=30)
    assert other.status_code == 409 and "another request" in other.json()["detail"]
    both = admin_api.post(
        "/v1/admin/renew",
        {"batch_id": batch.id, "idempotency_key": "a"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="b",
    )
    assert both.status_code == 400
    assert end_of(batch) == old_end + 365 * DAY and Renewal.objects.count() == 1


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"batch_id": "B-2026-NOSUCHBATCH"}, 404, "does not exist"),
        ({"license_id": "LIC-NOSUCHLICENCE"}, 404, "does not exist"),
        ({}, 400, "name what to renew"),
        ({"term_days": 0}, 400, "term_days"),
        ({"term_days": -5}, 400, "term_days"),
        ({"term_days": 36601}, 400, "term_days"),
        ({"term_days": "30"}, 400, "term_days"),
        ({"term_days": True}, 400, "term_days"),
        ({"idempotency_key": None}, 400, "idempotency_key"),
        ({"idempotency_key": ""}, 400, "idempotency_key"),
        ({"idempotency_key": "x" * 201}, 400, "idempotency_key"),
    ],
)
def test_bad_renewals_are_refused_and_extend_nothing(admin_api, make_batch, body, status, words):
    batch = make_batch(units=3, sku="DETECT-STD")
    old_end = end_of(batch)
    request = {"batch_id": batch.id, "idempotency_key": "k"} | body
    if "license_id" in body:
        del request["batch_id"]
    if not body:
        del request["batch_id"]

    response = renew(admin_api, **{k: v for k, v in request.items() if v is not None})

    assert response.status_code == status, response.json()
    assert words in response.json()["detail"]
    assert end_of(batch) == old_end and not Renewal.objects.exists()


def test_revoked_perpetual_unit_and_both_named_are_refused(
    admin_api, device_api, make_batch, customer
):
    revoked = make_batch(units=3, sku="DETECT-STD")
    admin_api.post("/v1/admin/revoke", {"license_id": revoked.license_id}, format="json")
    answer = renew(admin_api, batch_id=revoked.id, idempotency_key="r")
    assert answer.status_code == 409 and "revoked" in answer.json()["detail"]

    perpetual = make_batch(units=3, sku="ANPR-PERPETUAL")
    answer = renew(admin_api, batch_id=perpetual.id, idempotency_key="p")
    assert answer.status_code == 400 and "perpetual" in answer.json()["detail"]

    batch = make_batch(units=3, sku="DETECT-STD")
    unit = activate(device_api, batch.license.token, "cam-1")
    answer = renew(admin_api, license_id=unit["license_id"], idempotency_key="u")
    assert answer.status_code == 400 and f"batch_id {batch.id}" in answer.json()["detail"]

    answer = renew(admin_api, batch_id=batch.id, license_id=unit["license_id"], idempotency_key="b")
    assert answer.status_code == 400
    assert not Renewal.objects.exists()
    failed = AuditEntry.objects.filter(action="license.renew", result=AuditEntry.Result.FAILED)
    assert failed.count() == 4


def test_a_term_that_would_end_in_the_past_is_refused(admin_api, make_batch, server_clock):
    batch = make_batch(units=3, sku="DETECT-STD")
    old_end = end_of(batch)
    server_clock(375 * DAY)  # 10 days into grace: 1 day from the old end is already past

    answer = renew(admin_api, batch_id=batch.id, idempotency_key="k", term_days=1)

    assert answer.status_code == 400 and "at least 11" in answer.json()["detail"]
    assert end_of(batch) == old_end


def test_a_renewed_batch_is_renewable_by_its_batch_key_license_id(admin_api, make_batch):
    batch = make_batch(units=3, sku="DETECT-STD")
    body = renew(admin_api, license_id=batch.license_id, idempotency_key="k").json()
    assert body["batch_id"] == batch.id and end_of(batch) == body["expires_at"]


def test_a_revoked_unit_of_a_renewed_batch_stays_listed_until_the_batch_end(
    admin_api, device_api, make_batch
):
    batch = make_batch(units=3, sku="DETECT-STD")
    unit = activate(device_api, batch.license.token, "cam-1")
    renew(admin_api, batch_id=batch.id, idempotency_key="k")
    # Not refreshed: the row still ends at the old end, but the device may hold the new.
    admin_api.post("/v1/admin/revoke", {"license_id": unit["license_id"]}, format="json")

    entry = Revocation.objects.get(license_id=unit["license_id"])
    assert entry.usable_until == end_of(batch) + 14 * DAY
    assert usable_until(License.objects.get(pk=unit["license_id"])) == entry.usable_until
    assert refresh(device_api, unit["unit_token"], "cam-1").status_code == 403


def test_refresh_refuses_what_is_not_a_held_license(device_api, make_batch):
    batch = make_batch(units=3, sku="DETECT-STD")
    unit = activate(device_api, batch.license.token, "cam-1")
    assert refresh(device_api, unit["unit_token"], "cam-2").status_code == 403
    assert refresh(device_api, batch.license.token, "cam-1").status_code == 403
    assert device_api.get("/v1/license", {"device_id": "cam-1"}).status_code == 401
    assert refresh(device_api, "SVC1.abc.def", "cam-1").status_code == 401
    missing = device_api.get("/v1/license", HTTP_AUTHORIZATION=f"Bearer {unit['unit_token']}")
    assert missing.status_code == 400 and "device_id" in missing.json()["detail"]


def test_expiring_lists_what_ends_soon_with_its_customer_and_units(
    admin_api, device_api, make_batch, customer, server_clock
):
    soon = make_batch(units=4, sku="API-METERED")  # ends in 30 days
    activate(device_api, soon.license.token, "cam-1")
    later = make_batch(units=2, sku="DETECT-STD")  # 365 days
    revoked = make_batch(units=2, sku="API-METERED")
    admin_api.post("/v1/admin/revoke", {"license_id": revoked.license_id}, format="json")
    make_batch(units=2, sku="ANPR-PERPETUAL")
    direct = admin_api.post(
        "/v1/admin/licenses",
        {"customer_id": customer.id, "sku": "API-METERED", "device_id": "cam-d"},
        format="json",
    ).json()

    listed = admin_api.get("/v1/admin/expiring").json()

    assert listed["days"] == 30 and listed["count"] == 2
    ids = [(item["kind"], item["batch_id"], item["license_id"]) for item in listed["items"]]
    assert ("batch", soon.id, soon.license_id) in ids
    assert ("license", None, direct["license_id"]) in ids
    item = next(item for item in listed["items"] if item["batch_id"] == soon.id)
    assert (item["customer_id"], item["customer_name"]) == (customer.id, customer.name)
    assert (item["units_activated"], item["units_purchased"], item["in_grace"]) == (1, 4, False)
    assert item["grace_ends_at"] == item["expires_at"] + 7 * DAY
    wider = admin_api.get("/v1/admin/expiring", {"days": 400}).json()
    assert later.id in {item["batch_id"] for item in wider["items"]}
    server_clock(33 * DAY)  # ended 3 days ago: in grace, still listed
    in_grace = admin_api.get("/v1/admin/expiring", {"days": 1}).json()
    assert {item["in_grace"] for item in in_grace["items"]} == {True}
    server_clock(40 * DAY)  # grace over: too late to list (renewal runs from now)
    assert admin_api.get("/v1/admin/expiring", {"days": 1}).json()["count"] == 0
    for bad in ("0", "3661", "x", ""):
        assert admin_api.get("/v1/admin/expiring", {"days": bad}).status_code == 400


@pytest.mark.django_db(transaction=True)
def test_concurrent_renewals_with_one_key_renew_once_and_two_keys_twice(make_batch):
    batch = make_batch(units=3, sku="DETECT-STD")
    old_end = end_of(batch)
    results, errors = [], []

    def go(key):
        try:
            results.append(license_renew(idempotency_key=key, batch_id=batch.id))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=go, args=("same",)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert sorted(result.replayed for result in results) == [False, True, True, True]
    assert len({result.renewal.pk for result in results}) == 1
    assert end_of(batch) == old_end + 365 * DAY

    threads = [threading.Thread(target=go, args=(key,)) for key in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert end_of(batch) == old_end + 3 * 365 * DAY
    assert Renewal.objects.filter(batch=batch).count() == 3
    assert (
        Batch.objects.get(pk=batch.pk).expires_at
        == License.objects.get(pk=batch.license_id).expires_at
    )


@pytest.mark.django_db(transaction=True)
def test_concurrent_refreshes_of_one_unit_store_and_answer_one_token(make_batch):
    batch = make_batch(units=3, sku="DETECT-STD")
    unit = activate(APIClient(), batch.license.token, "cam-1")
    license_renew(idempotency_key="k", batch_id=batch.id)
    answers, errors = [], []

    def go():
        try:
            answers.append(license_refresh(token=unit["unit_token"], device_id="cam-1").token)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=go) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    stored = License.objects.get(pk=unit["license_id"])
    assert set(answers) == {stored.token}
    assert stored.token_sha256 == token_digest(stored.token)
    assert SupersededToken.objects.filter(license=stored).count() == 1


def test_a_moved_clock_is_refused_at_start_up_outside_a_test_database():
    refused = manage("check", SVC_TEST_CLOCK_FILE="/tmp/clock")
    assert refused.returncode != 0 and "SVC_TEST_CLOCK_FILE" in refused.stderr
    test_db = manage("check", SVC_TEST_CLOCK_FILE="/tmp/clock", DATABASE_URL="sqlite:///test_x")
    assert test_db.returncode == 0, test_db.stderr


def test_what_a_refresh_and_a_reactivation_cost_the_database(
    admin_api, device_api, make_batch, django_assert_num_queries
):
    """Pinned: a device asking with its current licence costs one query (304); the one
    ask after a renewal reads the claims, re-signs in a conditional UPDATE and records
    the replaced token (in these tests every transaction is a savepoint: 2 more);
    re-activation stays at its one query once the unit is current."""
    batch = make_batch(units=5, sku="DETECT-STD")
    unit = activate(device_api, batch.license.token, "cam-1")
    with django_assert_num_queries(1):
        assert refresh(device_api, unit["unit_token"], "cam-1").status_code == 304
    renew(admin_api, batch_id=batch.id, idempotency_key="k")
    # Lookup, claims, then UPDATE and the superseded token's INSERT in a savepoint.
    with django_assert_num_queries(1 + 1 + 2 + 2):
        renewed = refresh(device_api, unit["unit_token"], "cam-1").json()["token"]
    with django_assert_num_queries(1):
        assert refresh(device_api, renewed, "cam-1").status_code == 304
    with django_assert_num_queries(1):
        assert activate(device_api, batch.license.token, "cam-1")["unit_token"] == renewed


def test_an_expiring_window_out_of_bounds_says_the_bounds_in_words(admin_api, db):
    for days, says in (
        ("99999", "days: must be at most 3660 days (ten years)"),
        ("0", "days: must be at least 1 day"),
        ("ten", "days: A valid integer is required."),  # as every query integer says
    ):
        answer = admin_api.get("/v1/admin/expiring", {"days": days})
        assert answer.status_code == 400 and answer.json()["detail"] == says, answer.json()
