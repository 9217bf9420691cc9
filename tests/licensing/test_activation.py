"""POST /v1/activate: spec §3 batch rows, §4.2 statuses and §7."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.db import OperationalError, connection

from devices.documents import parse_status
from devices.token import b64url_decode, b64url_encode, verify_token
from licensing.models import Activation, Batch, License, Sku
from licensing.services import license_revoke
from signing import keyring
from svccore.authority import encode_token

pytestmark = pytest.mark.django_db


def activate(client, token, device_id="cam-1", **extra):
    body = {"batch_token": token, "device_id": device_id, **extra}
    return client.post("/v1/activate", body, format="json")


def test_new_device_gets_unit_token_and_consumes_one_unit(device_api, make_batch, signing_key):
    batch = make_batch(units=3)
    response = activate(device_api, batch.license.token, "cam-1")
    assert response.status_code == 200
    body = response.json()
    assert body["reactivated"] is False
    assert body["batch_units_remaining"] == 2
    claims = verify_token(body["unit_token"], signing_key.public_key())
    assert claims["lic"] == body["license_id"] != batch.license_id
    assert claims["dev"] == "cam-1"
    assert claims["act"] == "optional"
    assert "batch" not in claims
    assert claims["sub"] == batch.customer_id and claims["sku"] == batch.sku
    assert claims["exp"] == int(batch.expires_at.timestamp())
    batch.refresh_from_db()
    assert batch.units_activated == 1


def test_reactivation_returns_same_token_without_consuming(device_api, make_batch):
    batch = make_batch(units=2)
    first = activate(device_api, batch.license.token, "cam-1").json()
    again = activate(device_api, batch.license.token, "cam-1")
    assert again.status_code == 200
    body = again.json()
    assert body.pop("revocations").startswith("SVCR1.")  # the signed list head
    status = parse_status(body.pop("status"), keyring.public_key())  # the licence's status
    assert (status.license_id, status.device_id, status.revoked) == (
        first["license_id"],
        "cam-1",
        False,
    )
    assert body.pop("certificates") == []  # no key certificate registered here
    assert body == {
        "unit_token": first["unit_token"],
        "license_id": first["license_id"],
        "reactivated": True,
    }
    batch.refresh_from_db()
    assert batch.units_activated == 1


def test_exhausted_batch_returns_402_with_batch_and_counts(device_api, make_batch):
    batch = make_batch(units=1)
    assert activate(device_api, batch.license.token, "cam-1").status_code == 200
    response = activate(device_api, batch.license.token, "cam-2")
    assert response.status_code == 402
    detail = response.json()["detail"]
    assert batch.id in detail and "1 of 1 units activated" in detail
    # The device already on file still re-activates for free on an exhausted batch.
    assert activate(device_api, batch.license.token, "cam-1").json()["reactivated"] is True


@pytest.mark.parametrize(
    ("device_id", "status"),
    [(None, 400), ("", 400), ("x" * 129, 400), ("x" * 128, 200), (12, 400)],
)
def test_device_id_must_be_1_to_128_characters(device_api, make_batch, device_id, status):
    batch = make_batch()
    body = {"batch_token": batch.license.token}
    if device_id is not None:
        body["device_id"] = device_id
    response = device_api.post("/v1/activate", body, format="json")
    assert response.status_code == status, response.json()
    if status == 400:
        assert "device_id" in response.json()["detail"]


def test_records_fingerprint_source_weak_binding_and_sdk_version(device_api, make_batch):
    batch = make_batch()
    activate(
        device_api,
        batch.license.token,
        "aa:bb:cc:dd:ee:ff",
        fingerprint_source="mac",
        weak_binding=True,
        sdk_version="1.4.2",
    )
    record = Activation.objects.get(batch=batch)
    assert (record.fingerprint_source, record.weak_binding, record.sdk_version) == (
        "mac",
        True,
        "1.4.2",
    )
    assert record.client_ip == "127.0.0.1"


def _resign(token: str, key, **changes) -> str:
    payload = json.loads(b64url_decode(token.split(".")[1]))
    payload.update(changes)
    return encode_token(payload, key)


def test_batch_key_signed_by_another_key_is_403(device_api, make_batch):
    batch = make_batch()
    forged = _resign(batch.license.token, Ed25519PrivateKey.generate())
    response = activate(device_api, forged)
    assert response.status_code == 403
    assert "signature" in response.json()["detail"]


def test_tampered_payload_with_kept_signature_is_403(device_api, make_batch):
    batch = make_batch(units=2)
    prefix, payload, signature = batch.license.token.split(".")
    claims = json.loads(b64url_decode(payload))
    claims["batch"]["units"] = 1000
    widened = b64url_encode(json.dumps(claims).encode())
    response = activate(device_api, f"{prefix}.{widened}.{signature}")
    assert response.status_code == 403


def test_validly_signed_key_this_authority_never_issued_is_403(device_api, make_batch, signing_key):
    batch = make_batch()
    unknown = _resign(batch.license.token, signing_key, batch={"id": "B-2026-NOSUCH", "units": 5})
    response = activate(device_api, unknown)
    assert response.status_code == 403
    assert "not issued by this authority" in response.json()["detail"]
    other_lic = _resign(batch.license.token, signing_key, lic="LIC-NOTTHEBATCHKEY")
    assert activate(device_api, other_lic).status_code == 403


def test_units_come_from_the_database_not_the_token(device_api, make_batch, signing_key):
    batch = make_batch(units=1)
    # A re-signed key claiming more units is not the token issued (tests/licensing/
    # test_exact_tokens.py); the genuine one gets exactly the seats bought.
    greedy = _resign(batch.license.token, signing_key, batch={"id": batch.id, "units": 1000})
    assert activate(device_api, greedy, "cam-1").status_code == 403
    assert activate(device_api, batch.license.token, "cam-1").status_code == 200
    assert activate(device_api, batch.license.token, "cam-2").status_code == 402


def test_unit_token_presented_as_batch_key_is_403(device_api, make_batch):
    batch = make_batch()
    unit = activate(device_api, batch.license.token, "cam-1").json()["unit_token"]
    response = activate(device_api, unit, "cam-2")
    assert response.status_code == 403
    assert "not a batch key" in response.json()["detail"]


def test_expired_batch_key_is_403(device_api, make_batch, server_clock):
    batch = make_batch(term_days=30)
    server_clock(31 * 86400)
    response = activate(device_api, batch.license.token)
    assert response.status_code == 403
    assert "expired" in response.json()["detail"]


def test_revoked_batch_key_is_403(device_api, make_batch):
    batch = make_batch()
    license_revoke(license_id=batch.license_id, reason="order cancelled")
    response = activate(device_api, batch.license.token)
    assert response.status_code == 403
    assert "revoked" in response.json()["detail"]
    assert "order cancelled" in response.json()["detail"]


def test_revoked_unit_is_not_handed_back_on_reactivation(device_api, make_batch):
    batch = make_batch()
    unit = activate(device_api, batch.license.token, "cam-1").json()
    license_revoke(license_id=unit["license_id"], reason="stolen")
    response = activate(device_api, batch.license.token, "cam-1")
    assert response.status_code == 403
    assert unit["license_id"] in response.json()["detail"]


def test_sku_missing_from_catalogue_is_500_with_detail(device_api, make_batch):
    batch = make_batch(sku="DETECT-STD")
    Sku.objects.filter(pk="DETECT-STD").delete()
    response = activate(device_api, batch.license.token)
    assert response.status_code == 500
    assert "DETECT-STD" in response.json()["detail"] and batch.id in response.json()["detail"]
    assert Batch.objects.get(pk=batch.id).units_activated == 0


def test_perpetual_batch_mints_perpetual_units(device_api, make_batch, signing_key):
    batch = make_batch(sku="ANPR-PERPETUAL", units=2)
    body = activate(device_api, batch.license.token).json()
    claims = verify_token(body["unit_token"], signing_key.public_key())
    assert claims["exp"] == 0
    assert claims["ent"]["anpr"] is True and claims["ent"]["ppe"] is False


def test_wrong_body_types_are_400_with_detail(device_api, make_batch):
    batch = make_batch()
    for body in (
        [],
        {"batch_token": batch.license.token, "device_id": "c", "weak_binding": "yes"},
        {"batch_token": 5, "device_id": "c"},
    ):
        response = device_api.post("/v1/activate", body, format="json")
        assert response.status_code == 400
        assert set(response.json()) == {"detail"}
    response = device_api.post("/v1/activate", "{not json", content_type="application/json")
    assert response.status_code == 400 and "JSON" in response.json()["detail"]


def test_activation_is_throttled_per_ip_outside_the_allowlist(device_api, make_batch, settings):
    settings.SVC_ACTIVATION_ALLOWLIST = []
    settings.SVC_ACTIVATION_RATE = "3/10s"
    batch = make_batch()
    statuses = [activate(device_api, batch.license.token).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    response = activate(device_api, batch.license.token)
    assert "3 requests per 10 s" in response.json()["detail"]
    assert int(response["Retry-After"]) >= 1
    # Another client IP has its own budget.
    other = device_api.post(
        "/v1/activate",
        {"batch_token": batch.license.token, "device_id": "cam-9"},
        format="json",
        REMOTE_ADDR="10.9.9.9",
    )
    assert other.status_code == 200


def test_provisioning_line_behind_trusted_proxy_is_exempt(device_api, make_batch, settings):
    settings.SVC_ACTIVATION_RATE = "1/10s"
    settings.SVC_TRUSTED_PROXIES = ["10.0.0.1/32"]
    settings.SVC_ACTIVATION_ALLOWLIST = ["192.0.2.0/24"]
    batch = make_batch(units=10)

    def via_proxy(client_ip, device):
        return device_api.post(
            "/v1/activate",
            {"batch_token": batch.license.token, "device_id": device},
            format="json",
            REMOTE_ADDR="10.0.0.1",
            HTTP_X_FORWARDED_FOR=f"{client_ip}",
        ).status_code

    assert [via_proxy("192.0.2.7", f"line-{n}") for n in range(3)] == [200, 200, 200]
    assert [via_proxy("198.51.100.4", f"field-{n}") for n in range(2)] == [200, 429]


def test_unit_license_row_links_batch(device_api, make_batch):
    batch = make_batch()
    body = activate(device_api, batch.license.token, "cam-7").json()
    unit = License.objects.get(pk=body["license_id"])
    assert (unit.kind, unit.batch_id, unit.device_id) == (License.Kind.UNIT, batch.id, "cam-7")
    assert unit.unit_price == batch.unit_price


# --- nothing after the commit fails the answer (issue 37, item 5) ---------------------


class _FailAfterSeat:
    """From the moment the seat's UPDATE has committed, every statement fails as a
    dropped database does (OperationalError) and every signature as an unplugged signer
    does: whatever the activation still did after its commit would fail its answer."""

    def __init__(self, connection):
        self.connection = connection
        self.seat_run = False
        self.failed: list[str] = []

    def committed(self) -> bool:
        return self.seat_run and not self.connection.in_atomic_block

    def __call__(self, execute, sql, params, many, context):
        if self.committed():
            self.failed.append(sql)
            raise OperationalError("terminating connection due to administrator command")
        result = execute(sql, params, many, context)
        if "SET units_activated = units_activated + 1" in sql:
            # PostgreSQL's one-statement seat (FRESH_SEAT_SQL) returns a row only when it
            # took one; the transaction's seat (SEAT_SQL) is taken once it commits.
            alone = not self.connection.in_atomic_block
            self.seat_run = self.seat_run or not alone or context["cursor"].rowcount == 1
        return result


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("released_seat", [False, True], ids=["fresh seat", "released seat"])
def test_a_seat_taken_is_answered_200_whatever_fails_after_the_commit(
    device_api, make_batch, settings, monkeypatch, released_seat
):
    """The database and the signer fail from the commit of the seat on: the device still
    gets its licence (200, a verifiable list position and status), and the seat it took
    is the one answered. The head is read afresh (not reused from memory), so an answer
    built after the commit would have had to read the database."""
    from config.errors import SignerUnavailable
    from licensing import revocations
    from licensing.services import seat_release

    settings.SVC_LIST_HEAD_SECONDS = 0
    batch = make_batch(units=2)
    token = batch.license.token
    if released_seat:  # the transfer goes the transaction's way on PostgreSQL too
        assert activate(device_api, token, "cam-dead").status_code == 200
        seat_release(batch_id=batch.id, device_id="cam-dead", reason="camera destroyed")
    revocations.answers_forget()  # nothing held in memory that the answer could reuse
    failing = _FailAfterSeat(connection)
    sign_document = keyring.sign_document

    def signer(*args, **kwargs):
        if failing.committed():
            raise SignerUnavailable("token unplugged")
        return sign_document(*args, **kwargs)

    monkeypatch.setattr(keyring, "sign_document", signer)
    with connection.execute_wrapper(failing):
        response = activate(device_api, token, "cam-new")
    monkeypatch.undo()

    assert response.status_code == 200, response.json()
    assert failing.seat_run and failing.failed == []  # nothing read after the commit
    body = response.json()
    assert body["reactivated"] is False
    assert body["batch_units_remaining"] == 1
    status = parse_status(body["status"], keyring.public_key())
    assert (status.license_id, status.device_id, status.revoked) == (
        body["license_id"],
        "cam-new",
        False,
    )
    assert body["revocations"].startswith("SVCR1.")
    # The seat taken is the licence answered.
    on_file = Activation.objects.get(batch=batch, device_id="cam-new")
    assert on_file.license_id == body["license_id"]
    assert (on_file.transfer_of_id is not None) is released_seat
    assert verify_token(body["unit_token"], keyring.public_key())["lic"] == body["license_id"]


@pytest.mark.django_db(transaction=True)
def test_a_failure_before_the_seat_answers_503_and_takes_no_seat(
    device_api, make_batch, monkeypatch
):
    """The other side of the same rule: what the answer needs is built before the seat,
    so a database failing there answers 503 with Retry-After and leaves the batch as it
    was; the device asks again and gets a fresh seat."""
    from licensing import revocations

    batch = make_batch(units=2)

    def dropped():
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr(revocations, "head_get", dropped)
    response = activate(device_api, batch.license.token, "cam-1")
    monkeypatch.undo()
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json()["detail"].startswith("database unavailable")
    batch.refresh_from_db()
    assert batch.units_activated == 0
    assert not License.objects.filter(batch=batch).exists()
    again = activate(device_api, batch.license.token, "cam-1")
    assert again.status_code == 200 and again.json()["reactivated"] is False
