"""Issue 45: identity components, rebinding after a repair, its bound and clones,
through POST /v1/activate and GET /v1/license."""

from __future__ import annotations

import pytest
from django.test import override_settings

from audit.models import AuditEntry
from devices.identity import component_digest
from devices.token import verify_token
from events.models import Event
from licensing.clones import clone_copy_revoke
from licensing.models import Activation, CloneSuspicion, Rebinding, UnitComponent

pytestmark = pytest.mark.django_db


def parts(**raw):
    return {name: component_digest(name, value) for name, value in raw.items()}


CAMERA = dict(soc_serial="soc-0001", emmc_cid="cid-0001", board_serial="brd-0001", mac="aa:bb")


def activate(client, token, device_id, components=None, **extra):
    body = {"batch_token": token, "device_id": device_id, **extra}
    if components is not None:
        body["components"] = components
    return client.post("/v1/activate", body, format="json")


def test_components_are_stored_and_signed_into_the_token(device_api, make_batch, signing_key):
    batch = make_batch(units=3)
    body = activate(device_api, batch.license.token, "cam-1", parts(**CAMERA)).json()
    claims = verify_token(body["unit_token"], signing_key.public_key())
    assert claims["dev"] == "cam-1"
    assert claims["idn"] == {"pol": "most:2", "cmp": parts(**CAMERA)}
    unit = Activation.objects.get(license_id=body["license_id"])
    assert unit.components == parts(**CAMERA) and len(unit.components_sha256) == 64
    assert UnitComponent.objects.filter(license_id=body["license_id"]).count() == 4


def test_repair_of_one_of_three_keeps_the_license_without_a_seat(
    device_api, make_batch, signing_key
):
    batch = make_batch(units=3)
    first = activate(device_api, batch.license.token, "cam-1", parts(**CAMERA)).json()
    repaired = parts(**{**CAMERA, "emmc_cid": "cid-NEW"})
    # The device id came from the eMMC (machine-id): it changed with the repair.
    again = activate(device_api, batch.license.token, "cam-1b", repaired)
    assert again.status_code == 200, again.content
    body = again.json()
    assert body["license_id"] == first["license_id"] and body["reactivated"] is True
    claims = verify_token(body["unit_token"], signing_key.public_key())
    assert claims["dev"] == "cam-1b" and claims["idn"]["cmp"] == repaired
    batch.refresh_from_db()
    assert batch.units_activated == 1
    rebinding = Rebinding.objects.get()
    assert (rebinding.old_device_id, rebinding.new_device_id) == ("cam-1", "cam-1b")
    assert rebinding.changed == ["emmc_cid"]
    assert rebinding.old_components == parts(**CAMERA) and rebinding.new_components == repaired
    event = Event.objects.get(type="license.rebound")
    assert event.data["changed"] == ["emmc_cid"] and event.data["device_id"] == "cam-1b"
    assert AuditEntry.objects.filter(action="license.rebind", result="ok").count() == 1
    # The old token (superseded) and the new one both refresh to the current one.
    refreshed = device_api.get(
        "/v1/license",
        {"device_id": "cam-1b"},
        HTTP_AUTHORIZATION=f"Bearer {body['unit_token']}",
    )
    assert refreshed.status_code == 304


def test_repair_with_the_same_device_id_re_signs_to_the_new_set(
    device_api, make_batch, signing_key
):
    batch = make_batch(units=3)
    first = activate(device_api, batch.license.token, "cam-1", parts(**CAMERA)).json()
    repaired = parts(**{**CAMERA, "board_serial": "brd-NEW"})
    body = activate(device_api, batch.license.token, "cam-1", repaired).json()
    assert body["license_id"] == first["license_id"] and body["unit_token"] != first["unit_token"]
    assert verify_token(body["unit_token"], signing_key.public_key())["idn"]["cmp"] == repaired
    assert Rebinding.objects.get().changed == ["board_serial"]


def test_two_of_three_changed_is_a_new_device(device_api, make_batch):
    batch = make_batch(units=3)
    first = activate(device_api, batch.license.token, "cam-1", parts(**CAMERA)).json()
    other = parts(**{**CAMERA, "emmc_cid": "cid-X", "board_serial": "brd-X"})
    body = activate(device_api, batch.license.token, "cam-2", other).json()
    assert body["license_id"] != first["license_id"] and body["reactivated"] is False
    batch.refresh_from_db()
    assert batch.units_activated == 2
    assert not Rebinding.objects.exists()


def test_weak_components_never_count_alone(device_api, make_batch):
    batch = make_batch(units=3)
    weak = parts(mac="aa:bb", machine_id="m-1")
    first = activate(device_api, batch.license.token, "cam-1", weak).json()
    body = activate(device_api, batch.license.token, "cam-2", weak).json()
    assert body["license_id"] != first["license_id"]


def test_rebinding_is_bounded_per_unit(device_api, make_batch, freeze_clock=None):
    batch = make_batch(units=3)
    first = activate(device_api, batch.license.token, "cam-1", parts(**CAMERA)).json()
    step1 = parts(**{**CAMERA, "emmc_cid": "cid-2"})
    assert (
        activate(device_api, batch.license.token, "cam-1", step1).json()["license_id"]
        == (first["license_id"])
    )
    # A second part within 30 days: refused on its own id, a new device on another.
    step2 = parts(**{**CAMERA, "emmc_cid": "cid-2", "board_serial": "brd-2"})
    refused = activate(device_api, batch.license.token, "cam-1", step2)
    assert refused.status_code == 403 and "at most 1" in refused.json()["detail"]
    past = CloneSuspicion.objects.get()  # recorded, though the answer was a refusal
    assert past.evidence["reason"] == "past the rebinding bound"
    assert Event.objects.filter(type="license.clone_suspected").count() == 1
    moved = activate(device_api, batch.license.token, "cam-9", step2).json()
    assert moved["license_id"] != first["license_id"]
    assert Rebinding.objects.count() == 1


def test_rebinding_bound_is_configurable(device_api, make_batch):
    batch = make_batch(units=3)
    first = activate(device_api, batch.license.token, "cam-1", parts(**CAMERA)).json()
    with override_settings(SVC_REBIND_MAX_CHANGES=2):
        activate(device_api, batch.license.token, "cam-1", parts(**{**CAMERA, "emmc_cid": "2"}))
        again = activate(
            device_api,
            batch.license.token,
            "cam-1",
            parts(**{**CAMERA, "emmc_cid": "2", "board_serial": "3"}),
        ).json()
    assert again["license_id"] == first["license_id"]
    assert Rebinding.objects.count() == 2


def test_clone_with_the_same_id_and_other_hardware_is_flagged(device_api, make_batch):
    batch = make_batch(units=3)
    first = activate(device_api, batch.license.token, "mac-aabb", parts(**CAMERA)).json()
    clone = parts(soc_serial="soc-C", emmc_cid="cid-C", board_serial="brd-C", mac="aa:bb")
    body = activate(device_api, batch.license.token, "mac-aabb", clone).json()
    # The unit keeps its binding: the clone gets the token, whose set it cannot meet.
    assert body["license_id"] == first["license_id"]
    assert Activation.objects.get().components == parts(**CAMERA)
    suspicion = CloneSuspicion.objects.get()
    assert suspicion.evidence["changed"] == ["board_serial", "emmc_cid", "soc_serial"]
    assert suspicion.evidence["matched"] == ["mac"]
    assert Event.objects.filter(type="license.clone_suspected").count() == 1
    activate(device_api, batch.license.token, "mac-aabb", clone)  # the same copy again
    assert CloneSuspicion.objects.count() == 1
    clone_copy_revoke(suspicion_id=suspicion.pk)
    refused = activate(device_api, batch.license.token, "mac-aabb", clone)
    assert refused.status_code == 403 and "copy" in refused.json()["detail"]
    # The original keeps working.
    original = activate(device_api, batch.license.token, "mac-aabb", parts(**CAMERA))
    assert original.status_code == 200


def test_old_firmware_without_components_is_unchanged(device_api, make_batch, signing_key):
    batch = make_batch(units=3)
    body = activate(device_api, batch.license.token, "cam-1").json()
    assert "idn" not in verify_token(body["unit_token"], signing_key.public_key())
    again = activate(device_api, batch.license.token, "cam-1").json()
    assert again["unit_token"] == body["unit_token"]
    # Firmware updated to report components: the unit adopts them, no event.
    adopted = activate(device_api, batch.license.token, "cam-1", parts(**CAMERA)).json()
    assert adopted["license_id"] == body["license_id"]
    assert Activation.objects.get().components == parts(**CAMERA)
    assert not Event.objects.filter(type__in=["license.rebound", "license.clone_suspected"])


@pytest.mark.parametrize(
    "components",
    [
        {"soc_serial": "nothex"},
        {"Bad Name": "0" * 64},
        {"a": 5},
        "x",
        {f"c{i}": "0" * 64 for i in range(17)},
    ],
)
def test_malformed_components_are_400(device_api, make_batch, components):
    batch = make_batch(units=3)
    response = activate(device_api, batch.license.token, "cam-1", components)
    assert response.status_code == 400 and "detail" in response.json()


def refresh(client, token, device_id, components=None):
    query = {"device_id": device_id}
    if isinstance(components, str):
        query["components"] = components
    elif components is not None:
        query["components"] = ",".join(f"{n}={d}" for n, d in sorted(components.items()))
    return client.get("/v1/license", query, HTTP_AUTHORIZATION=f"Bearer {token}")


def test_sync_rebinds_a_repaired_unit_to_its_new_id(device_api, make_batch, signing_key):
    batch = make_batch(units=3)
    first = activate(device_api, batch.license.token, "cam-1", parts(**CAMERA)).json()
    assert refresh(device_api, first["unit_token"], "cam-1", parts(**CAMERA)).status_code == 304
    repaired = parts(**{**CAMERA, "emmc_cid": "cid-NEW"})
    answer = refresh(device_api, first["unit_token"], "cam-1b", repaired)
    assert answer.status_code == 200, answer.content
    claims = verify_token(answer.json()["token"], signing_key.public_key())
    assert claims["dev"] == "cam-1b" and claims["idn"]["cmp"] == repaired
    assert Rebinding.objects.get().via == "sync"
    # Another id with other hardware: refused as before.
    other = parts(soc_serial="x", emmc_cid="y", board_serial="z")
    assert refresh(device_api, answer.json()["token"], "cam-9", other).status_code == 403
    assert refresh(device_api, first["unit_token"], "cam-1", "bad").status_code == 400


def test_console_shows_components_rebindings_and_clones(admin_client, device_api, make_batch):
    from django.urls import reverse

    batch = make_batch(units=3)
    first = activate(device_api, batch.license.token, "cam-1", parts(**CAMERA)).json()
    activate(device_api, batch.license.token, "cam-1b", parts(**{**CAMERA, "emmc_cid": "n"}))
    clone = parts(soc_serial="c", emmc_cid="c", board_serial="c", mac="aa:bb")
    activate(device_api, batch.license.token, "cam-1b", clone)
    unit = Activation.objects.get(license_id=first["license_id"])
    page = admin_client.get(reverse("admin:licensing_activation_change", args=[unit.pk]))
    body = page.content.decode()
    assert page.status_code == 200
    assert "Identity components (hashed)" in body and "soc_serial" in body
    assert parts(**CAMERA)["soc_serial"][:16] in body and "mac " in body and "(weak)" in body
    assert "emmc_cid (device cam-1 → cam-1b)" in body
    listing = admin_client.get(reverse("admin:licensing_clonesuspicion_changelist"))
    text = listing.content.decode()
    assert listing.status_code == 200 and first["license_id"] in text
    assert "changed board_serial, emmc_cid, soc_serial; matched mac" in text
    suspicion = CloneSuspicion.objects.get()
    detail = admin_client.get(reverse("admin:licensing_clonesuspicion_change", args=[suspicion.pk]))
    assert detail.status_code == 200 and "Copy&#x27;s components" in detail.content.decode()
    done = admin_client.post(
        reverse("admin:licensing_clonesuspicion_changelist"),
        {"action": "revoke_copies", "_selected_action": [suspicion.pk]},
        follow=True,
    )
    assert "Revoked 1 copy" in done.content.decode()
    suspicion.refresh_from_db()
    assert suspicion.copy_revoked_at is not None
    rebound = admin_client.get(reverse("admin:licensing_rebinding_changelist"))
    assert rebound.status_code == 200 and "cam-1b" in rebound.content.decode()


def test_a_batch_policy_of_one_named_component(admin_api, customer, device_api, signing_key):
    made = admin_api.post(
        "/v1/admin/batches",
        {
            "customer_id": customer.id,
            "sku": "VISION-PRO",
            "units": 3,
            "identity_policy": "one:soc_serial",
        },
        format="json",
    )
    assert made.status_code == 201, made.content
    token = made.json()["batch_token"]
    first = activate(device_api, token, "cam-1", parts(**CAMERA)).json()
    claims = verify_token(first["unit_token"], signing_key.public_key())
    assert claims["idn"]["pol"] == "one:soc_serial"
    # Board and eMMC swapped, the SoC kept: the same camera under one:soc_serial.
    kept = parts(**{**CAMERA, "emmc_cid": "n", "board_serial": "n"})
    with override_settings(SVC_REBIND_MAX_CHANGES=2):
        again = activate(device_api, token, "cam-1c", kept).json()
    assert again["license_id"] == first["license_id"]
    weak = admin_api.post(
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 3, "identity_policy": "one:mac"},
        format="json",
    )
    assert weak.status_code == 400 and "weak" in weak.json()["detail"]


def test_a_sku_s_policy_is_in_the_catalogue_and_its_batches_follow_it(
    admin_api, customer, device_api, signing_key
):
    from licensing.models import Sku
    from svccore import catalogue

    Sku.objects.filter(pk="VISION-PRO").update(identity_policy="all")
    skus = {entry["sku"]: entry for entry in admin_api.get("/v1/admin/catalogue").json()["skus"]}
    assert skus["VISION-PRO"]["identity_policy"] == "all"
    assert skus["DETECT-STD"]["identity_policy"] == ""  # the default, most:2
    made = admin_api.post(
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 3},
        format="json",
    )
    token = made.json()["batch_token"]
    first = activate(device_api, token, "cam-1", parts(**CAMERA)).json()
    assert verify_token(first["unit_token"], signing_key.public_key())["idn"]["pol"] == "all"
    # A catalogue file naming a weak component alone, or nonsense, is refused by name.
    entry = Sku.objects.get(pk="VISION-PRO").entry()
    for policy, says in (("one:mac", "weak component"), ("some", "must be all, most")):
        with pytest.raises(ValueError, match=f"identity_policy '{policy}' .*{says}"):
            catalogue.normalise_entry({**entry, "identity_policy": policy})
