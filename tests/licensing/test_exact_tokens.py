"""A token counts only when it is byte for byte the one the authority issued (issue 9):
a validly signed variant of a batch key is refused with 403 and recorded in the audit
log as a possible signing-key compromise; ``token_check_issued`` does the same for any
licence (billing calls it for unit tokens)."""

from __future__ import annotations

import importlib
import json

import pytest
from django.apps import apps
from django.utils import timezone

from audit.models import AuditEntry
from devices import token as codec
from licensing.exact_tokens import TokenNotIssued, token_check_issued
from licensing.models import Activation, Batch, License, token_digest
from licensing.services import license_issue
from svccore import authority

pytestmark = pytest.mark.django_db

COMPROMISE = "key.compromise_suspected"


def activate(client, token, device_id="cam-1"):
    body = {"batch_token": token, "device_id": device_id}
    return client.post("/v1/activate", body, format="json")


def resign(token: str, key, **changes) -> str:
    claims = codec.decode_unverified(token) | changes
    return authority.encode_token(claims, key)


def test_resigned_batch_key_with_an_expiry_in_the_past_is_403_and_recorded(
    device_api, make_batch, signing_key
):
    batch = make_batch(units=3)
    past = int(timezone.now().timestamp()) - 86400
    forged = resign(batch.license.token, signing_key, exp=past)
    response = activate(device_api, forged)
    assert response.status_code == 403
    detail = response.json()["detail"]
    assert detail == (
        f"batch key {batch.license_id} for batch {batch.id} is validly signed (key "
        f"{codec.key_id(signing_key.public_key())}) but is not the token this authority issued "
        "(claims differ: exp); refused and recorded as a possible signing-key compromise"
    )
    entry = AuditEntry.objects.get(action=COMPROMISE)
    assert (entry.result, entry.target, entry.message) == ("refused", batch.license_id, detail)
    assert entry.detail["kid"] == codec.key_id(signing_key.public_key())
    assert entry.detail["differs"] == {
        "exp": {"presented": past, "issued": batch.license.claims["exp"]}
    }
    assert entry.ip == "127.0.0.1"


def test_resigned_batch_key_with_more_units_takes_no_seat_and_the_genuine_one_works(
    device_api, make_batch, signing_key
):
    batch = make_batch(units=1)
    licenses = License.objects.count()
    greedy = resign(batch.license.token, signing_key, batch={"id": batch.id, "units": 1000})
    response = activate(device_api, greedy)
    assert response.status_code == 403
    assert "claims differ: batch.units" in response.json()["detail"]
    assert Batch.objects.get(pk=batch.pk).units_activated == 0
    assert not Activation.objects.exists() and License.objects.count() == licenses
    differs = AuditEntry.objects.get(action=COMPROMISE).detail["differs"]
    assert differs == {"batch.units": {"presented": 1000, "issued": 1}}

    assert activate(device_api, batch.license.token).status_code == 200
    assert activate(device_api, batch.license.token, "cam-2").status_code == 402


def test_the_same_claims_in_other_bytes_are_not_the_token_issued(
    device_api, make_batch, signing_key
):
    batch = make_batch()
    claims = codec.decode_unverified(batch.license.token)
    payload = codec.b64url_encode(json.dumps(claims, indent=1).encode())  # other layout
    signed = f"SVC1.{payload}"
    signature = codec.b64url_encode(signing_key.sign(signed.encode()))
    response = activate(device_api, f"{signed}.{signature}")
    assert response.status_code == 403
    assert "same claims, other bytes" in response.json()["detail"]


def test_validly_signed_key_for_no_batch_on_file_is_recorded_too(
    device_api, make_batch, signing_key
):
    batch = make_batch()
    unknown = resign(batch.license.token, signing_key, batch={"id": "B-2026-NOSUCH", "units": 5})
    response = activate(device_api, unknown)
    assert response.status_code == 403
    assert "not issued by this authority" in response.json()["detail"]
    assert AuditEntry.objects.get(action=COMPROMISE).target == batch.license_id


def test_a_batch_key_signed_by_a_stranger_is_not_a_compromise(device_api, make_batch):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    batch = make_batch()
    forged = resign(batch.license.token, Ed25519PrivateKey.generate())
    assert activate(device_api, forged).status_code == 403
    assert not AuditEntry.objects.filter(action=COMPROMISE).exists()


@pytest.mark.django_db(transaction=True)
def test_the_audit_entry_outlives_the_refused_activations_rollback(
    device_api, make_batch, signing_key
):
    batch = make_batch()
    forged = resign(batch.license.token, signing_key, exp=1)
    assert activate(device_api, forged).status_code == 403
    # No test transaction around this one: the entry was committed on its own.
    assert AuditEntry.objects.filter(action=COMPROMISE, target=batch.license_id).count() == 1


# --- token_check_issued (unit tokens on /v1/usage) -----------------------------------------


def test_token_check_issued_passes_the_token_issued_and_refuses_a_variant(customer, signing_key):
    lic = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-1")
    token_check_issued(
        license_id=lic.id,
        token_sha256=token_digest(lic.token),
        stored_sha256=lic.token_sha256,
        claims=codec.verify_token(lic.token, signing_key.public_key()),
        stored_claims=lic.claims,
    )
    assert not AuditEntry.objects.filter(action=COMPROMISE).exists()

    variant = resign(lic.token, signing_key, lim={**lic.claims["lim"], "max_streams": 64})
    with pytest.raises(TokenNotIssued) as refused:
        token_check_issued(
            license_id=lic.id,
            token_sha256=token_digest(variant),
            stored_sha256=lic.token_sha256,
            claims=codec.verify_token(variant, signing_key.public_key()),
        )  # stored_claims read from the row
    assert refused.value.status_code == 403
    assert f"licence {lic.id} is validly signed" in refused.value.detail
    assert "claims differ: lim.max_streams" in refused.value.detail
    entry = AuditEntry.objects.get(action=COMPROMISE)
    assert (entry.target, entry.result) == (lic.id, "refused")
    refused.value.record()  # recording again writes nothing
    assert AuditEntry.objects.filter(action=COMPROMISE).count() == 1


def test_migration_backfills_the_hash_of_every_stored_token(customer):
    lic = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-1")
    License.objects.update(token_sha256="")
    migration = importlib.import_module("licensing.migrations.0004_signing_keys")
    migration.backfill_token_sha256(apps, None)
    lic.refresh_from_db()
    assert lic.token_sha256 == token_digest(lic.token) != ""
