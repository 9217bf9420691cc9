"""POST /v1/admin/licenses/register (issue 9): a licence minted offline with an air-gap
key (its own root-signed certificate) is put on file, so it can be revoked and its usage
accepted like any other."""

from __future__ import annotations

import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit.models import AuditEntry
from devices import token as codec
from devices.documents import parse_revocation_page
from licensing.models import License, token_digest
from signing import keyring
from signing.services import signing_key_install
from svccore import authority, ids
from tests.licensing.key_support import certificate

pytestmark = pytest.mark.django_db

URL = "/v1/admin/licenses/register"
DAY = 86400


@pytest.fixture
def air_gap_key(with_roots, signing_key) -> Ed25519PrivateKey:
    """The server's key and an offline minting key, both certified by the test root."""
    signing_key_install(certificate=certificate(with_roots, signing_key))
    key = Ed25519PrivateKey.generate()
    signing_key_install(certificate=certificate(with_roots, key, use="offline"))
    return key


def minted(key, customer_id: str, **changes) -> str:
    """An air-gapped licence as ``svcctl mint`` makes it."""
    now = int(time.time())
    claims = {
        "lic": ids.license_id(),
        "sku": "DETECT-STD",
        "sub": customer_id,
        "iss": "svc-test",
        "dev": "cam-airgap",
        "ent": {"detect": True, "defect": False, "ppe": False, "anpr": False},
        "lim": {"max_streams": 4, "max_fps": 15, "api_calls": 0},
        "iat": now,
        "nbf": now,
        "exp": now + 365 * DAY,
        "grace_days": 14,
        "act": "optional",
    }
    return authority.encode_token(claims | changes, key)


def register(admin_api, token: str):
    return admin_api.post(URL, {"token": token}, format="json")


def test_offline_license_is_registered_201_and_stored_as_presented(
    admin_api, air_gap_key, customer
):
    token = minted(air_gap_key, customer.id)
    claims = codec.decode_unverified(token)
    response = register(admin_api, token)
    assert response.status_code == 201, response.json()
    assert response.json() == {
        "license_id": claims["lic"],
        "customer_id": customer.id,
        "sku": "DETECT-STD",
        "device_id": "cam-airgap",
        "expires_at": claims["exp"],
        "kid": codec.key_id(air_gap_key.public_key()),
        "registered": True,
    }
    lic = License.objects.get(pk=claims["lic"])
    assert (lic.kind, lic.activation, lic.grace_days) == ("offline", "optional", 14)
    assert (lic.token, lic.token_sha256, lic.claims) == (token, token_digest(token), claims)
    assert int(lic.issued_at.timestamp()) == claims["iat"]
    assert int(lic.expires_at.timestamp()) == claims["exp"]
    entry = AuditEntry.objects.get(action="license.register")
    assert (entry.target, entry.result, entry.actor) == (claims["lic"], "ok", "bootstrap")


def test_registering_the_same_license_again_is_409(admin_api, air_gap_key, customer):
    token = minted(air_gap_key, customer.id)
    assert register(admin_api, token).status_code == 201
    again = register(admin_api, token)
    assert again.status_code == 409 and "already registered" in again.json()["detail"]
    other = minted(air_gap_key, customer.id, lic=codec.decode_unverified(token)["lic"], exp=0)
    assert register(admin_api, other).status_code == 409


def test_a_perpetual_offline_license_has_no_expiry(admin_api, air_gap_key, customer):
    response = register(admin_api, minted(air_gap_key, customer.id, exp=0))
    assert response.status_code == 201 and response.json()["expires_at"] == 0


def test_unknown_customer_is_404_and_unknown_sku_is_400(admin_api, air_gap_key, customer):
    nobody = register(admin_api, minted(air_gap_key, "CUST-NOBODY"))
    assert nobody.status_code == 404 and "CUST-NOBODY" in nobody.json()["detail"]
    odd = register(admin_api, minted(air_gap_key, customer.id, sku="NO-SUCH-SKU"))
    assert odd.status_code == 400 and "NO-SUCH-SKU" in odd.json()["detail"]
    assert not License.objects.filter(kind="offline").exists()


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"dev": "*"}, "unbound"), ({"act": "required"}, "act 'required'")],
)
def test_an_unbound_or_activation_required_license_is_400(
    admin_api, air_gap_key, customer, changes, message
):
    response = register(admin_api, minted(air_gap_key, customer.id, **changes))
    assert response.status_code == 400 and message in response.json()["detail"]


def test_a_token_by_an_unregistered_key_is_403(admin_api, air_gap_key, customer):
    stranger = Ed25519PrivateKey.generate()
    response = register(admin_api, minted(stranger, customer.id))
    assert response.status_code == 403
    detail = response.json()["detail"]
    assert codec.key_id(stranger.public_key()) in detail and "not a registered" in detail
    entry = AuditEntry.objects.get(action="license.register")
    assert entry.result == "failed" and entry.message == detail


def test_a_token_by_a_revoked_key_is_403(admin_api, air_gap_key, customer):
    from signing.services import signing_key_revoke

    token = minted(air_gap_key, customer.id)
    signing_key_revoke(kid=codec.key_id(air_gap_key.public_key()), reason="workstation lost")
    response = register(admin_api, token)
    assert response.status_code == 403 and "revoked" in response.json()["detail"]


@pytest.mark.parametrize("token", ["not a token", "SVC1.e30.AAAA", 42])
def test_malformed_input_is_400(admin_api, air_gap_key, token):
    response = admin_api.post(URL, {"token": token}, format="json")
    assert response.status_code == 400 and response.json()["detail"]


def test_tampered_offline_license_is_403(admin_api, air_gap_key, customer):
    prefix, payload, signature = minted(air_gap_key, customer.id).split(".")
    other = minted(air_gap_key, customer.id, dev="cam-other").split(".")[1]
    response = register(admin_api, f"{prefix}.{other}.{signature}")
    assert response.status_code == 403 and "does not verify" in response.json()["detail"]


def test_registering_needs_the_admin_key(device_api, air_gap_key, customer):
    response = device_api.post(URL, {"token": minted(air_gap_key, customer.id)}, format="json")
    assert response.status_code == 401


def test_a_registered_license_can_be_revoked_and_is_listed(
    admin_api, device_api, air_gap_key, customer, signing_key
):
    token = minted(air_gap_key, customer.id)
    license_id = register(admin_api, token).json()["license_id"]
    revoked = admin_api.post(
        "/v1/admin/revoke", {"license_id": license_id, "reason": "returned"}, format="json"
    )
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    body = device_api.get("/v1/revocations", {"since": 0}).json()
    page = parse_revocation_page(body["revocations"], keyring.public_key())
    assert license_id in [entry for entry, _ in page.revoked]
    assert license_id in device_api.get("/v1/revocations").json()["revoked"]


def test_a_registered_license_uploads_usage(admin_api, device_api, air_gap_key, customer):
    # Minted yesterday: the last full hour's record lies within the licence's life (an
    # offline licence's life starts at its iat).
    yesterday = int(time.time()) - DAY
    token = minted(air_gap_key, customer.id, iat=yesterday, nbf=yesterday)
    assert register(admin_api, token).status_code == 201
    start = int(time.time()) // 3600 * 3600 - 3600
    record = {
        "period_start": start,
        "period_end": start + 3600,
        "inferences": 7,
        "frames": 0,
        "stream_seconds": 0,
        "events": 0,
    }
    response = device_api.post(
        "/v1/usage",
        {"device_id": "cam-airgap", "records": [record]},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["accepted"] == 1
