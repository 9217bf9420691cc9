"""Issue 45, the second clone signal: a unit's very component set seen from two client
addresses in turn faster than one camera moves (a bit-for-bit copy: its state directory
on hardware whose components are identical too), through POST /v1/activate and
GET /v1/license with the addresses the requests came from."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import override_settings
from django.utils import timezone

from devices.identity import component_digest
from events.models import Event
from licensing import clones
from licensing.models import Activation, CloneSuspicion

pytestmark = pytest.mark.django_db

ORIGINAL = "198.51.100.7"  # where the camera was activated
COPY = "203.0.113.42"
CAMERA = dict(soc_serial="soc-0001", emmc_cid="cid-0001", board_serial="brd-0001", mac="aa:bb")
PARTS = {name: component_digest(name, value) for name, value in CAMERA.items()}
QUERY = ",".join(f"{n}={d}" for n, d in sorted(PARTS.items()))


@pytest.fixture
def at(server_clock):
    """``at(seconds)``: the server's clock stopped that many seconds after the start."""
    start = timezone.now().replace(microsecond=0) + dt.timedelta(seconds=60)
    held = []

    def move(seconds: int) -> dt.datetime:
        if held:
            held.pop().__exit__(None, None, None)
        moment = start + dt.timedelta(seconds=seconds)
        block = server_clock.at(moment)
        block.__enter__()
        held.append(block)
        return moment

    yield move
    if held:
        held.pop().__exit__(None, None, None)


@pytest.fixture
def unit(device_api, make_batch, at):
    """A camera activated from ORIGINAL at 0 with its components: its licence id and token."""
    batch = make_batch(units=3)
    at(0)
    body = {"batch_token": batch.license.token, "device_id": "mac-aabb", "components": PARTS}
    answer = device_api.post("/v1/activate", body, format="json", REMOTE_ADDR=ORIGINAL)
    assert answer.status_code == 200, answer.content
    body = answer.json()
    return {**body, "batch_token": batch.license.token}


def sync(client, unit, address):
    return client.get(
        "/v1/license",
        {"device_id": "mac-aabb", "components": QUERY},
        HTTP_AUTHORIZATION=f"Bearer {unit['unit_token']}",
        REMOTE_ADDR=address,
    )


def test_a_camera_that_moves_network_once_is_not_flagged(device_api, unit, at):
    at(60)
    assert sync(device_api, unit, ORIGINAL).status_code == 304
    moved = at(120)
    assert sync(device_api, unit, COPY).status_code == 304
    at(180)
    assert sync(device_api, unit, COPY).status_code == 304
    record = Activation.objects.get()
    assert (record.previous_ip, record.last_ip, record.last_ip_since) == (ORIGINAL, COPY, moved)
    assert not CloneSuspicion.objects.exists()
    assert not Event.objects.filter(type="license.clone_suspected").exists()


def test_back_and_forth_within_the_window_is_flagged_once(device_api, unit, at):
    moved = at(60)
    assert sync(device_api, unit, COPY).status_code == 304
    returned = at(120)
    assert sync(device_api, unit, ORIGINAL).status_code == 304  # answered as ever
    suspicion = CloneSuspicion.objects.get()
    assert suspicion.client_ip == COPY  # not the address the unit was activated from
    assert suspicion.components == PARTS and suspicion.device_id == "mac-aabb"
    evidence = suspicion.evidence
    assert evidence["reason"] == clones.ADDRESS_REASON
    assert (evidence["first_address"], evidence["second_address"]) == (ORIGINAL, COPY)
    assert evidence["moved_at"] == int(moved.timestamp())
    assert evidence["returned_at"] == int(returned.timestamp())
    assert evidence["window_seconds"] == 900 and evidence["copy_client_ip"] == COPY
    assert evidence["changed"] == [] and evidence["matched"] == sorted(PARTS)
    event = Event.objects.get(type="license.clone_suspected")
    assert event.data["reason"] == clones.ADDRESS_REASON
    assert event.data["suspicion_id"] == suspicion.pk and event.data["client_ip"] == COPY
    assert event.data["addresses"] == sorted([ORIGINAL, COPY])
    # The two copies keep alternating: still one suspicion, one event.
    for seconds, address in ((180, COPY), (240, ORIGINAL), (300, COPY), (360, ORIGINAL)):
        at(seconds)
        assert sync(device_api, unit, address).status_code == 304
    assert CloneSuspicion.objects.count() == 1
    assert Event.objects.filter(type="license.clone_suspected").count() == 1


def test_back_and_forth_outside_the_window_is_not_flagged(device_api, unit, at):
    at(60)
    assert sync(device_api, unit, COPY).status_code == 304
    at(60 + 900)  # back exactly one window after it left: a camera can do that
    assert sync(device_api, unit, ORIGINAL).status_code == 304
    assert not CloneSuspicion.objects.exists()
    with override_settings(SVC_CLONE_ADDRESS_WINDOW_SECONDS=3600):
        at(60 + 900 + 1800)
        assert sync(device_api, unit, COPY).status_code == 304
    assert CloneSuspicion.objects.get().client_ip == COPY


def test_the_alternation_is_seen_at_activation_too(device_api, unit, at):
    body = {"batch_token": unit["batch_token"], "device_id": "mac-aabb", "components": PARTS}
    at(30)
    again = device_api.post("/v1/activate", body, format="json", REMOTE_ADDR=COPY)
    assert again.status_code == 200 and again.json()["license_id"] == unit["license_id"]
    at(40)
    assert sync(device_api, unit, ORIGINAL).status_code == 304
    assert CloneSuspicion.objects.get().evidence["second_address"] == COPY


def test_a_pair_seen_by_a_unit_activated_from_neither_names_the_newcomer_the_copy(
    device_api, unit, at
):
    elsewhere = "192.0.2.9"
    at(30)
    assert sync(device_api, unit, elsewhere).status_code == 304  # moved, once
    at(4000)
    assert sync(device_api, unit, COPY).status_code == 304  # moved again, long after
    at(4060)
    assert sync(device_api, unit, elsewhere).status_code == 304  # and straight back
    suspicion = CloneSuspicion.objects.get()
    assert suspicion.client_ip == COPY and suspicion.addresses == f"{elsewhere},{COPY}"


def test_revoking_the_copy_refuses_its_address_and_the_original_keeps_working(
    admin_api, device_api, unit, at
):
    at(60)
    sync(device_api, unit, COPY)
    at(120)
    sync(device_api, unit, ORIGINAL)
    at(180)
    sync(device_api, unit, COPY)  # the copy was the last seen when the operator acts
    suspicion = CloneSuspicion.objects.get()
    listed = admin_api.get("/v1/admin/clones").json()["clones"]
    assert listed[0]["addresses"] == sorted([ORIGINAL, COPY])
    assert f"then {COPY} at" in listed[0]["evidence_text"]
    revoked = admin_api.post(f"/v1/admin/clones/{suspicion.pk}/revoke-copy")
    assert revoked.status_code == 200 and revoked.json()["copy_revoked_at"] is not None
    at(240)
    refused = sync(device_api, unit, COPY)
    assert refused.status_code == 403
    assert refused.json()["code"] == "CLONE_COPY_REVOKED"
    assert f"clone suspicion {suspicion.pk}" in refused.json()["detail"]
    assert COPY in refused.json()["detail"]
    body = {"batch_token": unit["batch_token"], "device_id": "mac-aabb", "components": PARTS}
    again = device_api.post("/v1/activate", body, format="json", REMOTE_ADDR=COPY)
    assert again.status_code == 403 and again.json()["code"] == "CLONE_COPY_REVOKED"
    # The original keeps its licence, and the refusals moved nothing.
    assert sync(device_api, unit, ORIGINAL).status_code == 304
    again = device_api.post("/v1/activate", body, format="json", REMOTE_ADDR=ORIGINAL)
    assert again.status_code == 200
    assert Activation.objects.get().last_ip == ORIGINAL
    assert CloneSuspicion.objects.count() == 1


def test_the_first_signal_is_unchanged_beside_the_second(device_api, unit, at):
    """A copy on other hardware (diverging components) is still one suspicion per set,
    and revoking it refuses its set with the same code, whatever its address."""
    at(60)
    clone = {n: component_digest(n, f"{v}-C") for n, v in CAMERA.items() if n != "mac"}
    clone["mac"] = PARTS["mac"]
    query = ",".join(f"{n}={d}" for n, d in sorted(clone.items()))
    ask = dict(HTTP_AUTHORIZATION=f"Bearer {unit['unit_token']}", REMOTE_ADDR=COPY)
    device_api.get("/v1/license", {"device_id": "mac-aabb", "components": query}, **ask)
    suspicion = CloneSuspicion.objects.get()
    assert suspicion.addresses == "" and suspicion.evidence["changed"]
    clones.clone_copy_revoke(suspicion_id=suspicion.pk)
    ask["REMOTE_ADDR"] = ORIGINAL
    refused = device_api.get("/v1/license", {"device_id": "mac-aabb", "components": query}, **ask)
    assert refused.status_code == 403 and refused.json()["code"] == "CLONE_COPY_REVOKED"
    assert f"clone suspicion {suspicion.pk}" in refused.json()["detail"]
    assert sync(device_api, unit, COPY).status_code == 304  # its address is not refused


def test_the_console_shows_the_two_addresses(admin_client, device_api, unit, at):
    from django.urls import reverse

    at(60)
    sync(device_api, unit, COPY)
    at(120)
    sync(device_api, unit, ORIGINAL)
    listing = admin_client.get(reverse("admin:licensing_clonesuspicion_changelist"))
    text = listing.content.decode()
    assert listing.status_code == 200 and unit["license_id"] in text
    assert f"same components from two addresses: from {ORIGINAL}, then {COPY} at" in text
    assert f"(within 900 s); the copy: {COPY}" in text


def test_firmware_that_reports_no_components_is_not_watched(device_api, make_batch, at):
    """Old firmware (no components): its syncs read no activation record, so its
    address is neither read nor written, and it is never flagged by address."""
    batch = make_batch(units=3)
    at(0)
    body = {"batch_token": batch.license.token, "device_id": "cam-old"}
    token = device_api.post("/v1/activate", body, format="json", REMOTE_ADDR=ORIGINAL)
    token = token.json()["unit_token"]
    for seconds, address in ((60, COPY), (120, ORIGINAL), (180, COPY)):
        at(seconds)
        answer = device_api.get(
            "/v1/license",
            {"device_id": "cam-old"},
            HTTP_AUTHORIZATION=f"Bearer {token}",
            REMOTE_ADDR=address,
        )
        assert answer.status_code == 304
    record = Activation.objects.get()
    assert (record.last_ip, record.previous_ip) == (None, None)
    assert not CloneSuspicion.objects.exists()
