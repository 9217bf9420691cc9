"""Add-on modules in the field (issue 42 item 4), at the service and device API: an add-on
added to a batch reaches its units at their next licence fetch (and new activations at
once), one added to a direct licence re-signs it at once; removal takes the module away
the same way. Each token carrying an add-on for time not yet paid writes its charge, pro
rata to the token's end; nothing is charged twice or back."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from audit.models import AuditEntry
from config.errors import Conflict, InvalidInput, NotFound
from devices.token import decode_unverified
from events.models import Event
from licensing.models import AddOn, AddOnCharge, AddOnGrant, License, SupersededToken
from licensing.services import (
    addon_add,
    addon_remove,
    license_issue,
    license_renew,
    license_revoke,
    seat_release,
)

pytestmark = pytest.mark.django_db

DAY = 86400


def activate(client, token, device_id):
    response = client.post(
        "/v1/activate", {"batch_token": token, "device_id": device_id}, format="json"
    )
    assert response.status_code == 200, response.json()
    return response.json()


def refresh(client, token, device_id):
    return client.get("/v1/license", {"device_id": device_id}, HTTP_AUTHORIZATION=f"Bearer {token}")


def ent(token: str) -> dict:
    return decode_unverified(token)["ent"]


def test_the_seeded_catalogue_offers_anpr_on_vision_pro_and_streams_on_detect_std():
    anpr = AddOn.objects.get(sku_id="VISION-PRO", code="anpr")
    assert (anpr.modules, anpr.unit_price, anpr.available) == (["anpr"], Decimal("60"), True)
    streams = AddOn.objects.get(sku_id="DETECT-STD", code="streams-4")
    assert (streams.modules, streams.extra_streams) == ([], 4)


def test_a_unit_receives_a_batch_add_on_at_its_next_fetch_and_loses_it_after_removal(
    device_api, make_batch, server_clock
):
    batch = make_batch(units=5)  # VISION-PRO: detect, defect, ppe; 365 days
    unit = activate(device_api, batch.license.token, "cam-1")
    token = unit["unit_token"]
    assert ent(token)["anpr"] is False
    server_clock(100 * DAY)

    added = addon_add(addon="anpr", batch_id=batch.id)

    assert added.changed and added.grant.term_days == 365 and added.grant.unit_price == 60
    response = refresh(device_api, token, "cam-1")
    assert response.status_code == 200, response
    renewed = response.json()["token"]
    claims = decode_unverified(renewed)
    assert claims["ent"]["anpr"] is True and claims["ent"]["ppe"] is True
    assert claims["exp"] == decode_unverified(token)["exp"]  # same end
    assert refresh(device_api, renewed, "cam-1").status_code == 304
    # The old token still counts as issued (usage from before the fetch is accepted).
    lic = License.objects.get(pk=unit["license_id"])
    assert SupersededToken.objects.filter(license=lic).count() == 1
    charge = AddOnCharge.objects.get(license=lic)
    assert (charge.grant_id, charge.quantity, charge.unit_price) == (added.grant.id, 265, 60)
    assert charge.ends_at == lic.expires_at

    server_clock(120 * DAY)
    removed = addon_remove(addon="anpr", batch_id=batch.id, reason="customer cancelled")
    assert removed.changed
    again = refresh(device_api, renewed, "cam-1").json()["token"]
    assert ent(again)["anpr"] is False and ent(again)["ppe"] is True
    assert AddOnCharge.objects.count() == 1  # removal charges nothing, back or forth
    assert list(
        Event.objects.filter(type__startswith="license.addon").values_list("type", flat=True)
    ) == [
        "license.addon_removed",
        "license.addon_added",
    ]
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"license.addon_add", "license.addon_remove"} <= actions


def test_a_new_activation_carries_the_batch_add_on_and_is_charged_at_once(
    device_api, make_batch, server_clock
):
    batch = make_batch(units=5)
    addon_add(addon="anpr", batch_id=batch.id)
    server_clock(65 * DAY)

    unit = activate(device_api, batch.license.token, "cam-9")

    assert ent(unit["unit_token"])["anpr"] is True
    charge = AddOnCharge.objects.get(license_id=unit["license_id"])
    assert charge.quantity == 300 and charge.batch_id == batch.id
    # Re-activation hands the same licence back, charging nothing more.
    again = activate(device_api, batch.license.token, "cam-9")
    assert again["unit_token"] == unit["unit_token"]
    assert AddOnCharge.objects.count() == 1


def test_a_reactivation_after_the_add_on_delivers_it(device_api, make_batch):
    batch = make_batch(units=5)
    unit = activate(device_api, batch.license.token, "cam-1")
    addon_add(addon="anpr", batch_id=batch.id)

    again = activate(device_api, batch.license.token, "cam-1")

    assert again["reactivated"] and ent(again["unit_token"])["anpr"] is True
    assert AddOnCharge.objects.filter(license_id=unit["license_id"]).count() == 1


def test_caps_add_up_and_an_add_on_already_active_is_not_added_twice(device_api, make_batch):
    batch = make_batch(units=2, sku="DETECT-STD")  # 4 streams
    first = addon_add(addon="streams-4", batch_id=batch.id)
    second = addon_add(addon="streams-4", batch_id=batch.id)
    assert first.changed and not second.changed and second.grant.id == first.grant.id
    unit = activate(device_api, batch.license.token, "cam-1")
    assert decode_unverified(unit["unit_token"])["lim"]["max_streams"] == 8


def test_a_direct_license_is_resigned_at_once_and_charged_for_the_rest_of_its_term(
    customer, device_api, server_clock
):
    lic = license_issue(customer_id=customer.id, sku="VISION-PRO", device_id="cam-d")
    old = lic.token
    server_clock(165 * DAY)

    addon_add(addon="anpr", license_id=lic.id)

    lic.refresh_from_db()
    assert ent(lic.token)["anpr"] is True and lic.sold_claims["ent"]["anpr"] is False
    assert refresh(device_api, old, "cam-d").json()["token"] == lic.token
    charge = AddOnCharge.objects.get(license=lic)
    assert charge.quantity == 200 and charge.batch_id is None

    # Renewed: the add-on runs on and its new term is charged with the renewal.
    license_renew(license_id=lic.id, idempotency_key="r1")
    lic.refresh_from_db()
    assert ent(lic.token)["anpr"] is True
    charges = list(AddOnCharge.objects.filter(license=lic).order_by("starts_at"))
    assert [c.quantity for c in charges] == [200, 365]
    assert charges[1].starts_at == charges[0].ends_at

    addon_remove(addon="anpr", license_id=lic.id)
    lic.refresh_from_db()
    assert ent(lic.token)["anpr"] is False
    # Added again within the time paid: nothing more to pay.
    addon_add(addon="anpr", license_id=lic.id)
    assert AddOnCharge.objects.filter(license=lic).count() == 2
    assert AddOnGrant.objects.filter(license=lic).count() == 2


def test_a_renewed_batch_charges_its_units_add_on_for_the_new_term_as_each_fetches_it(
    device_api, make_batch, server_clock
):
    batch = make_batch(units=5)
    addon_add(addon="anpr", batch_id=batch.id)
    unit = activate(device_api, batch.license.token, "cam-1")
    server_clock(300 * DAY)
    license_renew(batch_id=batch.id, idempotency_key="r")
    assert AddOnCharge.objects.count() == 1

    renewed = refresh(device_api, unit["unit_token"], "cam-1").json()["token"]

    assert ent(renewed)["anpr"] is True
    quantities = sorted(AddOnCharge.objects.values_list("quantity", flat=True))
    assert quantities == [365, 365]


def test_a_transfer_carries_on_the_time_paid_for_the_released_unit(
    device_api, make_batch, server_clock
):
    batch = make_batch(units=1)
    addon_add(addon="anpr", batch_id=batch.id)
    dead = activate(device_api, batch.license.token, "cam-dead")
    server_clock(10 * DAY)
    seat_release(license_id=dead["license_id"], reason="broken")

    spare = activate(device_api, batch.license.token, "cam-spare")

    assert ent(spare["unit_token"])["anpr"] is True
    assert AddOnCharge.objects.filter(license_id=spare["license_id"]).count() == 0


def test_refusals_name_what_to_do(customer, make_batch, device_api, server_clock):
    batch = make_batch(units=2)
    unit = activate(device_api, batch.license.token, "cam-1")
    with pytest.raises(InvalidInput, match=f"add the add-on to the batch \\(batch_id {batch.id}"):
        addon_add(addon="anpr", license_id=unit["license_id"])
    with pytest.raises(InvalidInput, match="has no add-on 'nope'; its add-ons are anpr"):
        addon_add(addon="nope", batch_id=batch.id)
    with pytest.raises(InvalidInput, match="one of them"):
        addon_add(addon="anpr")
    with pytest.raises(NotFound):
        addon_add(addon="anpr", batch_id="B-2026-NOPE")
    with pytest.raises(NotFound, match="has no add-on 'anpr'"):
        addon_remove(addon="anpr", batch_id=batch.id)
    license_revoke(license_id=batch.license_id, reason="fraud")
    with pytest.raises(Conflict, match="revoked"):
        addon_add(addon="anpr", batch_id=batch.id)
    other = make_batch(units=1)
    server_clock(366 * DAY)
    with pytest.raises(Conflict, match="renew it first"):
        addon_add(addon="anpr", batch_id=other.id)


def test_a_perpetual_batch_is_charged_once_per_unit(device_api, customer):
    AddOn.objects.create(sku_id="ANPR-PERPETUAL", code="ppe", name="PPE", modules=["ppe"],
                         unit_price=Decimal("120"))  # fmt: skip
    from licensing.services import batch_issue

    batch = batch_issue(customer_id=customer.id, sku="ANPR-PERPETUAL", units=3)
    grant = addon_add(addon="ppe", batch_id=batch.id).grant
    assert grant.term_days == 0
    unit = activate(device_api, batch.license.token, "cam-p")
    charge = AddOnCharge.objects.get(license_id=unit["license_id"])
    assert (charge.quantity, charge.ends_at) == (1, None)
    assert ent(unit["unit_token"])["ppe"] is True
    _ = dt
