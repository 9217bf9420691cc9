"""Trials (issue 42 item 3): a trial batch's units run N days from each camera's first
activation, unbilled, marked as trials; a device trials a SKU once (409 TRIAL_USED);
converting the batch (API, idempotent) makes the same devices paid licences, picked up
by the refresh of GET /v1/license without re-activation; what a trial cannot do (be
renewed, release a seat) is refused with a reason. Billing:
tests/billing/test_trial_billing.py and the oracle, tests/billing/test_trial_oracle.py; the
camera: tests/devices/test_device_trial.py."""

from __future__ import annotations

import pytest
from django.core import mail
from django.db import IntegrityError

from audit.models import AuditEntry
from devices.token import decode_unverified
from events.alerts import alerts_send
from events.models import Event
from events.scan import events_scan
from licensing.models import (
    Activation,
    ActivationDaily,
    Batch,
    License,
    Sku,
    SupersededToken,
    TrialConversion,
    TrialUse,
    token_digest,
)
from licensing.services import (
    batch_issue,
    license_revoke,
    trial_conversion_quote,
    trial_convert,
    unit_activate,
)
from licensing.services.licenses import usable_until
from tests.factories import CustomerFactory

pytestmark = pytest.mark.django_db

DAY = 86400


def activate(client, token, device_id):
    return client.post(
        "/v1/activate", {"batch_token": token, "device_id": device_id}, format="json"
    )


def refresh(client, token, device_id):
    return client.get("/v1/license", {"device_id": device_id}, HTTP_AUTHORIZATION=f"Bearer {token}")


def trial_batch(customer, *, sku="VISION-PRO", units=10, trial_days=14, term_days=None):
    return batch_issue(
        customer_id=customer.id, sku=sku, units=units, trial_days=trial_days, term_days=term_days
    )


def test_a_trial_units_term_runs_from_its_own_activation_without_grace(
    admin_api, device_api, customer, server_clock
):
    response = admin_api.post(
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 5, "trial_days": 14},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["trial_days"] == 14
    batch = Batch.objects.get(pk=response.json()["batch_id"])
    server_clock(3 * DAY)  # activated three days after issue: the trial runs from here

    answer = activate(device_api, batch.license.token, "cam-trial-1")

    assert answer.status_code == 200, answer.json()
    claims = decode_unverified(answer.json()["unit_token"])
    assert claims["trial"] is True and claims["grace_days"] == 0
    assert claims["exp"] == claims["iat"] + 14 * DAY
    assert claims["exp"] < int(batch.expires_at.timestamp())  # not the batch's end
    lic = License.objects.get(pk=claims["lic"])
    assert lic.trial and lic.grace_days == 0 and int(lic.expires_at.timestamp()) == claims["exp"]
    record = Activation.objects.get(license=lic)
    assert record.trial
    assert TrialUse.objects.filter(sku="VISION-PRO", device_id="cam-trial-1", batch=batch).exists()
    batch.refresh_from_db()
    assert batch.units_activated == 1  # a trial takes a seat of the batch as usual
    rollup = ActivationDaily.objects.get(batch=batch)
    assert (rollup.activations, rollup.transfers, rollup.trials) == (0, 0, 1)
    event = Event.objects.get(type="license.activated")
    assert event.data["trial"] is True and event.data["expires_at"] == claims["exp"]
    # The revocation list keeps a revoked trial only until the trial's own end.
    assert usable_until(lic) == claims["exp"]
    fleet = admin_api.get("/v1/admin/fleet", {"batch_id": batch.id}).json()["units"]
    assert (fleet[0]["trial"], fleet[0]["trial_ends_at"]) == (1, claims["exp"])
    status = admin_api.get(f"/v1/admin/batches/{batch.id}").json()
    assert (status["trial_days"], status["trial_converted_at"]) == (14, None)


def test_a_trial_sku_makes_trial_batches_by_default_and_zero_sells_one(customer):
    Sku.objects.filter(pk="DETECT-STD").update(trial_days=30)
    assert trial_batch(customer, sku="DETECT-STD", trial_days=None).trial_days == 30
    assert trial_batch(customer, sku="DETECT-STD", trial_days=0).trial_days is None
    assert trial_batch(customer, sku="DETECT-STD", trial_days=7).trial_days == 7
    assert batch_issue(customer_id=customer.id, sku="VISION-PRO", units=1).trial_days is None


def test_the_catalogue_entry_carries_trial_days(admin_api):
    Sku.objects.filter(pk="API-METERED").update(trial_days=21)
    skus = {entry["sku"]: entry for entry in admin_api.get("/v1/admin/catalogue").json()["skus"]}
    assert skus["API-METERED"]["trial_days"] == 21
    assert skus["VISION-PRO"]["trial_days"] is None


@pytest.mark.parametrize("days", [-1, 366, "14", True])
def test_trial_days_out_of_bounds_are_refused(admin_api, customer, days):
    response = admin_api.post(
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 5, "trial_days": days},
        format="json",
    )
    assert response.status_code == 400
    assert "trial_days" in response.json()["detail"]


def test_re_activating_on_the_same_trial_batch_is_not_a_second_trial(device_api, customer):
    batch = trial_batch(customer)
    first = activate(device_api, batch.license.token, "cam-1").json()
    again = activate(device_api, batch.license.token, "cam-1")
    assert again.status_code == 200
    assert again.json()["reactivated"] is True
    assert again.json()["unit_token"] == first["unit_token"]  # never extended to the batch's end
    batch.refresh_from_db()
    assert batch.units_activated == 1


def test_a_device_trials_a_sku_once_the_second_trial_is_refused_with_a_code(device_api, customer):
    first = trial_batch(customer)
    second = trial_batch(CustomerFactory())  # another customer's trial of the same SKU
    assert activate(device_api, first.license.token, "cam-7").status_code == 200

    refused = activate(device_api, second.license.token, "cam-7")

    assert refused.status_code == 409
    body = refused.json()
    assert body["code"] == "TRIAL_USED"
    assert first.id in body["detail"] and "VISION-PRO" in body["detail"]
    second.refresh_from_db()
    assert second.units_activated == 0  # no seat taken
    assert not Activation.objects.filter(batch=second).exists()
    entry = AuditEntry.objects.get(action="license.activate", status=409)
    assert entry.result == AuditEntry.Result.REFUSED and entry.target == "device cam-7"
    # Another SKU's trial, and a paid batch of the same SKU, are not second trials.
    other = trial_batch(customer, sku="DETECT-STD")
    assert activate(device_api, other.license.token, "cam-7").status_code == 200
    paid = batch_issue(customer_id=customer.id, sku="VISION-PRO", units=2)
    answer = activate(device_api, paid.license.token, "cam-7")
    assert answer.status_code == 200
    assert "trial" not in decode_unverified(answer.json()["unit_token"])
    # Other errors keep their plain body.
    assert "code" not in activate(device_api, "not-a-token", "cam-7").json()


def test_the_database_refuses_a_second_trial_row_of_a_sku_and_device(customer):
    batch = trial_batch(customer)
    unit = unit_activate(batch_token=batch.license.token, device_id="cam-1")
    with pytest.raises(IntegrityError):
        TrialUse.objects.create(
            sku="VISION-PRO", device_id="cam-1", batch=batch, license_id=unit.license_id
        )


def test_converting_makes_the_same_devices_paid_at_their_next_refresh(
    admin_api, device_api, customer, server_clock
):
    batch = trial_batch(customer, units=10)  # VISION-PRO: 365 days, 30 days of grace
    tokens = {}
    for n in range(3):
        tokens[f"cam-{n}"] = activate(device_api, batch.license.token, f"cam-{n}").json()[
            "unit_token"
        ]
    license_revoke(license_id=decode_unverified(tokens["cam-2"])["lic"], reason="stolen")
    server_clock(10 * DAY)

    quote = admin_api.post(f"/v1/admin/batches/{batch.id}/convert/quote", {}, format="json")
    assert quote.status_code == 200, quote.json()
    assert (quote.json()["units"], quote.json()["amount"], quote.json()["term_days"]) == (
        2, 480, 365,
    )  # fmt: skip
    response = admin_api.post(f"/v1/admin/batches/{batch.id}/convert", {}, format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["units"], body["unit_price"], body["amount"], body["currency"]) == (
        2, 240, 480, "EUR",
    )  # fmt: skip
    assert body["replayed"] is False and body["trial_days"] == 14
    assert body["expires_at"] == body["converted_at"] + 365 * DAY
    batch.refresh_from_db()
    assert batch.trial_days is None and int(batch.expires_at.timestamp()) == body["expires_at"]
    assert decode_unverified(batch.license.token)["exp"] == body["expires_at"]
    conversion = TrialConversion.objects.get(batch=batch)
    assert conversion.units == 2 and conversion.trial_days == 14
    # The camera refreshes: the same licence, paid, ending with the batch, with grace.
    answer = refresh(device_api, tokens["cam-0"], "cam-0")
    assert answer.status_code == 200, answer.json()
    paid = decode_unverified(answer.json()["token"])
    held = decode_unverified(tokens["cam-0"])
    assert paid["lic"] == held["lic"] and "trial" not in paid
    assert (paid["exp"], paid["grace_days"], paid["nbf"]) == (body["expires_at"], 30, held["nbf"])
    lic = License.objects.get(pk=paid["lic"])
    assert not lic.trial and lic.grace_days == 30
    # Its trial token still counts as issued (a camera that has not synced uploads with it).
    assert SupersededToken.objects.filter(
        license=lic, token_sha256=token_digest(tokens["cam-0"])
    ).exists()
    # The revoked trial unit stays as it was: not billed, not re-signed.
    stolen = License.objects.get(pk=decode_unverified(tokens["cam-2"])["lic"])
    assert stolen.trial and stolen.token == tokens["cam-2"]
    # A re-activation answers the paid licence; a new camera is a paid activation.
    again = activate(device_api, batch.license.token, "cam-1").json()
    assert "trial" not in decode_unverified(again["unit_token"])
    new = activate(device_api, batch.license.token, "cam-9").json()
    claims = decode_unverified(new["unit_token"])
    assert "trial" not in claims and claims["exp"] == body["expires_at"]
    assert not Activation.objects.get(license_id=claims["lic"]).trial
    fleet = {u["device_id"]: u for u in admin_api.get("/v1/admin/fleet").json()["units"]}
    assert (fleet["cam-0"]["trial"], fleet["cam-0"]["trial_ends_at"]) == (0, None)
    event = Event.objects.get(type="license.trial_converted")
    assert (event.data["batch_id"], event.data["units"]) == (batch.id, 2)
    audit = AuditEntry.objects.get(action="batch.convert_trial")
    assert audit.target == batch.id and audit.detail["units"] == 2


def test_converting_twice_answers_the_first_conversion_and_bills_nothing_more(
    admin_api, device_api, customer
):
    batch = trial_batch(customer)
    activate(device_api, batch.license.token, "cam-1")
    first = admin_api.post(f"/v1/admin/batches/{batch.id}/convert", {}, format="json").json()

    again = admin_api.post(f"/v1/admin/batches/{batch.id}/convert", {}, format="json")
    same_term = admin_api.post(
        f"/v1/admin/batches/{batch.id}/convert", {"term_days": first["term_days"]}, format="json"
    )
    other_term = admin_api.post(
        f"/v1/admin/batches/{batch.id}/convert", {"term_days": 30}, format="json"
    )

    assert again.status_code == same_term.status_code == 200
    assert again.json() == same_term.json() == first | {"replayed": True}
    assert other_term.status_code == 409
    assert "converts once" in other_term.json()["detail"]
    assert TrialConversion.objects.count() == 1
    assert Event.objects.filter(type="license.trial_converted").count() == 1


def test_what_is_not_a_trial_is_not_converted(admin_api, customer, make_batch):
    paid = make_batch(units=2)
    response = admin_api.post(f"/v1/admin/batches/{paid.id}/convert", {}, format="json")
    assert response.status_code == 409
    assert "not a trial" in response.json()["detail"]
    missing = admin_api.post("/v1/admin/batches/B-2026-NOPE/convert", {}, format="json")
    assert missing.status_code == 404
    revoked = trial_batch(customer)
    license_revoke(license_id=revoked.license_id, reason="cancelled")
    response = admin_api.post(f"/v1/admin/batches/{revoked.id}/convert", {}, format="json")
    assert response.status_code == 409 and "revoked" in response.json()["detail"]
    assert not TrialConversion.objects.exists()


def test_a_term_may_be_chosen_and_a_perpetual_trial_becomes_perpetual(
    admin_api, device_api, customer
):
    batch = trial_batch(customer)
    activate(device_api, batch.license.token, "cam-1")
    body = admin_api.post(
        f"/v1/admin/batches/{batch.id}/convert", {"term_days": 90}, format="json"
    ).json()
    assert body["term_days"] == 90 and body["expires_at"] == body["converted_at"] + 90 * DAY

    perpetual = trial_batch(customer, sku="ANPR-PERPETUAL", trial_days=30)
    assert perpetual.expires_at is None
    token = activate(device_api, perpetual.license.token, "cam-p").json()["unit_token"]
    assert decode_unverified(token)["exp"] > 0  # the trial ends
    refused = admin_api.post(
        f"/v1/admin/batches/{perpetual.id}/convert", {"term_days": 90}, format="json"
    )
    assert refused.status_code == 400 and "perpetual" in refused.json()["detail"]
    body = admin_api.post(f"/v1/admin/batches/{perpetual.id}/convert", {}, format="json").json()
    assert (body["term_days"], body["expires_at"], body["units"]) == (0, 0, 1)
    paid = decode_unverified(refresh(device_api, token, "cam-p").json()["token"])
    assert paid["exp"] == 0 and "trial" not in paid
    assert License.objects.get(pk=paid["lic"]).expires_at is None


def test_a_conversion_racing_an_activation_never_leaves_an_unbilled_trial(customer):
    """The unit signed as a trial meets a converted batch at its seat: made again as a
    paid unit (the seat's UPDATE checks the trial state under the batch's lock)."""
    from licensing.services import activation

    batch = trial_batch(customer)
    real_sign = activation._unit_sign
    converted = []

    def sign_then_convert(*args, **kwargs):
        signed = real_sign(*args, **kwargs)
        if not converted:
            converted.append(trial_convert(batch_id=batch.id))
        return signed

    activation._unit_sign = sign_then_convert
    try:
        result = unit_activate(batch_token=batch.license.token, device_id="cam-race")
    finally:
        activation._unit_sign = real_sign
    assert "trial" not in decode_unverified(result.token)
    record = Activation.objects.get(license_id=result.license_id)
    assert not record.trial and not TrialUse.objects.exists()
    assert converted[0].conversion.units == 0


def test_a_trial_batch_is_not_renewed_and_its_seats_are_not_released(
    admin_api, device_api, customer
):
    batch = trial_batch(customer)
    token = activate(device_api, batch.license.token, "cam-1").json()["unit_token"]
    renewed = admin_api.post(
        "/v1/admin/renew", {"batch_id": batch.id, "idempotency_key": "k"}, format="json"
    )
    assert renewed.status_code == 400 and "convert" in renewed.json()["detail"]
    released = admin_api.post(
        "/v1/admin/seats/release",
        {"license_id": decode_unverified(token)["lic"], "reason": "camera replaced"},
        format="json",
    )
    assert released.status_code == 409 and "trial" in released.json()["detail"]
    trial_convert(batch_id=batch.id)
    renewed = admin_api.post(
        "/v1/admin/renew", {"batch_id": batch.id, "idempotency_key": "k2"}, format="json"
    )
    assert renewed.status_code == 201 and renewed.json()["units"] == 1


def test_the_quote_is_what_converting_does(customer, device_api):
    batch = trial_batch(customer, sku="DETECT-STD", units=200)  # 80.00 a unit at 200
    for n in range(4):
        activate(device_api, batch.license.token, f"cam-{n}")
    quote = trial_conversion_quote(batch_id=batch.id, term_days=30)
    result = trial_convert(batch_id=batch.id, term_days=30)
    conversion = result.conversion
    assert (quote.units, quote.unit_price, quote.amount, quote.expires_at) == (
        conversion.units, conversion.unit_price, conversion.amount, conversion.expires_at,
    )  # fmt: skip
    assert str(quote.amount) == "320.0000"


def test_trial_expiring_events_per_camera_once_each_and_in_alerts(
    device_api, customer, server_clock, settings
):
    settings.SVC_ALERT_EMAILS = ["ops@example.com"]
    alerts_send()  # the mailbox starts at the log's end
    batch = trial_batch(customer, trial_days=14)
    activate(device_api, batch.license.token, "cam-1")
    server_clock(5 * DAY)
    activate(device_api, batch.license.token, "cam-2")  # its trial ends five days later
    events_scan()
    assert not Event.objects.filter(type="license.trial_expiring").exists()
    server_clock(8 * DAY)  # cam-1 ends in 6 days, cam-2 in 11
    events_scan()
    events_scan()
    (first,) = Event.objects.filter(type="license.trial_expiring")
    assert (first.data["device_id"], first.data["days"], first.data["batch_id"]) == (
        "cam-1", 7, batch.id,
    )  # fmt: skip
    server_clock(13 * DAY + 3600)  # cam-1 within a day, cam-2 within seven
    events_scan()
    assert sorted(
        (e.data["device_id"], e.data["days"])
        for e in Event.objects.filter(type="license.trial_expiring")
    ) == [("cam-1", 1), ("cam-1", 7), ("cam-2", 7)]
    assert alerts_send() == 1
    body = mail.outbox[0].body
    assert "trial of camera cam-1" in body and "unless the batch is converted" in body
    # Converted: no camera of the batch is on trial any more; nothing more announced.
    trial_convert(batch_id=batch.id)
    server_clock(18 * DAY + 3600)
    events_scan()
    assert Event.objects.filter(type="license.trial_expiring").count() == 3


def test_a_trial_batch_is_not_listed_or_announced_as_a_term_to_renew(
    admin_api, customer, server_clock
):
    trial = trial_batch(customer, sku="API-METERED", trial_days=7)  # a 30-day batch key
    paid = batch_issue(customer_id=customer.id, sku="API-METERED", units=2)
    listed = admin_api.get("/v1/admin/expiring", {"days": 40}).json()["items"]
    assert [item["batch_id"] for item in listed] == [paid.id]
    server_clock(25 * DAY)
    events_scan()
    announced = {e.data.get("batch_id") for e in Event.objects.filter(type="license.expiring")}
    assert announced == {paid.id} and trial.id not in announced


def test_a_trial_unit_re_signed_for_a_new_key_stays_a_trial_to_its_own_end(customer, server_clock):
    """A unit's token is re-signed when its key is retired (rekey); a trial's keeps its
    trial mark, its end and no grace, never its batch's end."""
    from licensing.services.renewals import unit_token_current

    batch = trial_batch(customer)
    unit = unit_activate(batch_token=batch.license.token, device_id="cam-rekey")
    lic = License.objects.get(pk=unit.license_id)
    server_clock(3600)  # signed again an hour later
    token = unit_token_current(
        license_id=lic.id,
        token=lic.token,
        token_sha256=lic.token_sha256,
        expires_at=lic.expires_at,
        batch_expires_at=None,  # what a unit on trial follows (licensing.trials)
        rekey=True,
    )
    claims = decode_unverified(token)
    assert claims["iat"] > lic.claims["iat"]  # signed again
    assert claims["trial"] is True and claims["grace_days"] == 0
    assert claims["exp"] == int(lic.expires_at.timestamp()) < int(batch.expires_at.timestamp())
