"""Batch keys outlive their signing key (issue 37, item 3): after the key that signed a
batch key is revoked, the very token the authority issued for the batch (flashed into
firmware on shelves) still activates new cameras and re-activates known ones, answered
with unit licences signed by the active key; a batch key forged with the revoked key
(any other token) is refused and recorded as a possible compromise."""

from __future__ import annotations

import io
import uuid

import pytest
from django.core.management import call_command

from audit.models import AuditEntry
from devices import token as codec
from devices.errors import BadSignature
from events.models import Event
from licensing import revocations
from licensing.exact_tokens import COMPROMISE_ACTION
from licensing.models import Activation, Batch, License
from licensing.services import license_revoke
from licensing.services.renewals import license_renew
from signing import keyring
from svccore import authority
from tests.licensing.key_support import certificate, install
from tests.licensing.test_signing_keys import activate, kid_of, upload
from tests.test_query_counts import NEW_UNIT

pytestmark = pytest.mark.django_db


@pytest.fixture
def rotation(with_roots, settings, new_key, tmp_path):
    """Key 1 signs; ``rotate()`` moves the service to key 2 and revokes key 1, as the
    runbook in docs/signing-keys.md does (install, deploy, ``key_revoke``)."""
    (path1, key1), (path2, key2) = new_key(), new_key()
    install(tmp_path, certificate(with_roots, key1), "1.cert")
    settings.SVC_SIGNING_KEY_FILE = path1

    def rotate() -> None:
        install(tmp_path, certificate(with_roots, key2), "2.cert")
        settings.SVC_SIGNING_KEY_FILE = path2
        call_command("key_revoke", kid_of(key1), "--reason", "leaked", stdout=io.StringIO())

    return key1, key2, rotate


def seats(batch: Batch) -> int:
    return Batch.objects.values_list("units_activated", flat=True).get(pk=batch.pk)


def compromise_records(license_id: str) -> tuple[int, int]:
    """(audit entries, events) recording a possible compromise for ``license_id``."""
    entries = AuditEntry.objects.filter(action=COMPROMISE_ACTION, target=license_id).count()
    events = Event.objects.filter(
        type=Event.Type.TOKEN_COMPROMISE_SUSPECTED, data__license_id=license_id
    ).count()
    return entries, events


def test_a_batch_key_of_a_revoked_signing_key_activates_with_active_key_licenses(
    rotation, make_batch, device_api
):
    key1, key2, rotate = rotation
    batch = make_batch(units=5)
    batch_key = batch.license.token
    assert codec.decode_unverified(batch_key)["kid"] == kid_of(key1)
    first = {cam: activate(device_api, batch_key, cam).json() for cam in ("cam-1", "cam-2")}
    rotate()

    # A camera on file gets its licence back, re-signed by key 2: same licence, same
    # end, no seat taken again.
    again = activate(device_api, batch_key, "cam-1")
    assert again.status_code == 200, again.json()
    body = again.json()
    assert body["reactivated"] is True and body["license_id"] == first["cam-1"]["license_id"]
    claims = codec.verify_token(body["unit_token"], key2.public_key())
    assert claims["kid"] == kid_of(key2) and claims["dev"] == "cam-1"
    assert claims["exp"] == codec.decode_unverified(first["cam-1"]["unit_token"])["exp"]
    assert seats(batch) == 2
    # A new camera on the same batch takes a seat and gets a key-2 licence.
    new = activate(device_api, batch_key, "cam-3")
    assert new.status_code == 200, new.json()
    assert new.json()["reactivated"] is False and new.json()["batch_units_remaining"] == 2
    assert codec.verify_token(new.json()["unit_token"], key2.public_key())["kid"] == kid_of(key2)
    assert seats(batch) == 3 and Activation.objects.filter(batch=batch).count() == 3
    # Both licences are what the service holds: usage is accepted under them.
    assert upload(device_api, body["unit_token"], "cam-1").status_code == 200
    assert upload(device_api, new.json()["unit_token"], "cam-3").status_code == 200
    assert compromise_records(batch.license_id) == (0, 0)


def test_a_batch_key_forged_with_the_revoked_key_is_refused_and_recorded(
    rotation, make_batch, device_api
):
    key1, _, rotate = rotation
    batch = make_batch(units=5)
    activate(device_api, batch.license.token, "cam-1")
    rotate()
    issued = codec.decode_unverified(batch.license.token)
    more_units = {**issued, "batch": {**issued["batch"], "units": 5000}}
    refused = activate(device_api, authority.encode_token(more_units, key1), "cam-forged")
    assert refused.status_code == 403
    detail = refused.json()["detail"]
    assert "not the token this authority issued" in detail and "batch.units" in detail
    assert compromise_records(batch.license_id) == (1, 1)
    entry = AuditEntry.objects.get(action=COMPROMISE_ACTION, target=batch.license_id)
    assert entry.result == AuditEntry.Result.REFUSED and entry.detail["kid"] == kid_of(key1)
    assert entry.detail["differs"]["batch.units"] == {"presented": 5000, "issued": 5}
    # Re-signed by key 1 with nothing but its signing time moved: not the token issued.
    resigned = authority.encode_token({**issued, "iat": issued["iat"] + 1}, key1)
    assert activate(device_api, resigned, "cam-forged").status_code == 403
    # A device already on file gains nothing with a forged key either.
    assert (
        activate(device_api, authority.encode_token(more_units, key1), "cam-1").status_code == 403
    )
    assert compromise_records(batch.license_id) == (3, 3)
    assert seats(batch) == 1
    assert not License.objects.filter(device_id="cam-forged").exists()


def test_a_forged_key_for_a_batch_never_issued_is_recorded(rotation, make_batch, device_api):
    key1, _, rotate = rotation
    batch = make_batch(units=5)
    rotate()
    claims = codec.decode_unverified(batch.license.token)
    made_up = {**claims, "lic": "LIC-MADEUP00000", "batch": {"id": "B-2026-MADEUP0000", "units": 9}}
    refused = activate(device_api, authority.encode_token(made_up, key1), "cam-x")
    assert refused.status_code == 403 and "no such batch key is on file" in refused.json()["detail"]
    assert AuditEntry.objects.filter(action=COMPROMISE_ACTION, target="LIC-MADEUP00000").exists()


def test_a_token_that_does_not_verify_under_the_revoked_key_is_refused_unrecorded(
    rotation, make_batch, device_api, new_key
):
    """Not signed by key 1 at all (a stranger's key naming key 1): the signature is
    what fails, so the answer names the revoked key and nothing is recorded."""
    key1, _, rotate = rotation
    batch = make_batch(units=5)
    rotate()
    stranger = authority.encode_token(codec.decode_unverified(batch.license.token), new_key()[1])
    refused = activate(device_api, stranger, "cam-x")
    assert refused.status_code == 403
    assert kid_of(key1) in refused.json()["detail"] and "revoked" in refused.json()["detail"]
    assert not AuditEntry.objects.filter(action=COMPROMISE_ACTION).exists()


def test_revoking_the_batch_key_itself_still_ends_its_batch(rotation, make_batch, device_api):
    _, _, rotate = rotation
    batch = make_batch(units=5)
    activate(device_api, batch.license.token, "cam-1")
    rotate()
    license_revoke(license_id=batch.license_id, reason="firmware image leaked")
    for cam in ("cam-1", "cam-2"):
        refused = activate(device_api, batch.license.token, cam)
        assert refused.status_code == 403 and "firmware image leaked" in refused.json()["detail"]


def test_a_batch_key_renewed_since_still_activates_with_the_token_in_firmware(
    rotation, make_batch, device_api
):
    """Renewed after the rotation: the batch key is re-signed by key 2, and the key-1
    token flashed into firmware (superseded, still issued) activates after key 1 is
    revoked, with a licence to the renewed end."""
    key1, key2, rotate = rotation
    batch = make_batch(units=5)
    firmware = batch.license.token
    rotate()
    license_renew(idempotency_key=str(uuid.uuid4()), batch_id=batch.id)
    batch.refresh_from_db()
    assert codec.decode_unverified(batch.license.token)["kid"] == kid_of(key2)
    answer = activate(device_api, firmware, "cam-1")
    assert answer.status_code == 200, answer.json()
    claims = codec.verify_token(answer.json()["unit_token"], key2.public_key())
    assert claims["exp"] == int(batch.expires_at.timestamp())
    assert compromise_records(batch.license_id) == (0, 0)
    with pytest.raises(BadSignature):
        codec.verify_token(answer.json()["unit_token"], key1.public_key())


def test_once_proven_a_revoked_key_batch_costs_what_any_batch_costs(
    rotation, make_batch, device_api, django_assert_num_queries, caches_held
):
    """The check under the revoked key runs once per process and registry, like every
    batch key's verification: then a new camera is the lookup and the seat, and a
    camera on file (re-signed once) is the lookup alone."""
    _, _, rotate = rotation
    batch = make_batch(units=10)
    activate(device_api, batch.license.token, "cam-1")
    rotate()
    keyring.registry()
    revocations.head_document()  # the list moved (KEY-<kid>): its head, built once
    # First sight, as for any batch key: the batch row with its key, the SKU, the lookup.
    with django_assert_num_queries(2 + 1 + NEW_UNIT):
        assert activate(device_api, batch.license.token, "cam-warm").status_code == 200
    assert activate(device_api, batch.license.token, "cam-1").status_code == 200  # re-signed
    with django_assert_num_queries(1 + NEW_UNIT):
        assert activate(device_api, batch.license.token, "cam-2").status_code == 200
    with django_assert_num_queries(1):
        assert activate(device_api, batch.license.token, "cam-1").json()["reactivated"] is True
