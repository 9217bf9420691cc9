"""Signing keys (issue 9): key ids in what is signed, the key registry and its commands
(key_install, key_list, key_retire, key_revoke), refusing to sign with an uncertified,
retired or revoked key, rotation without a firmware update, and the certificates and
revoked keys the revocation list and the activation answer carry."""

from __future__ import annotations

import hashlib
import io
import json
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import CommandError, call_command

from audit.models import AuditEntry
from config.errors import SigningKeyUnusable
from devices import token as codec
from devices.documents import parse_revocation_page, parse_status
from devices.errors import BadSignature
from devices.keys import Keyring, parse_certificate, unverified_payload
from licensing import revocations
from licensing.models import License, Revocation
from licensing.services import license_issue
from licensing.services.activation import unit_activate
from signing import keyring
from signing.models import SigningKey
from signing.services import signing_key_install
from svccore import authority
from svccore.authority import sign_document
from svccore.keyfile import read_private_key
from tests.licensing.key_support import certificate, install, legacy_token

pytestmark = pytest.mark.django_db

T0 = int(time.time()) // 3600 * 3600 - 86400


def activate(client, token: str, device_id: str):
    body = {"batch_token": token, "device_id": device_id}
    return client.post("/v1/activate", body, format="json")


def upload(client, token: str, device_id: str, start: int = T0):
    record = {
        "period_start": start,
        "period_end": start + 3600,
        "inferences": 5,
        "frames": 0,
        "stream_seconds": 0,
        "events": 0,
    }
    return client.post(
        "/v1/usage",
        {"device_id": device_id, "records": [record]},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def kid_of(key) -> str:
    return codec.key_id(key.public_key())


def claims_of(token: str) -> dict:
    return codec.decode_unverified(token)


# --- key ids -----------------------------------------------------------------------------


def test_issued_tokens_name_their_signing_key_and_are_stored_with_their_hash(
    make_batch, signing_key
):
    batch = make_batch()
    key = batch.license
    assert claims_of(key.token)["kid"] == kid_of(signing_key) == key.claims["kid"]
    assert key.claims == codec.verify_token(key.token, signing_key.public_key())
    assert key.token_sha256 == hashlib.sha256(key.token.encode()).hexdigest()


def test_the_configured_key_is_registered_when_first_used(make_batch, signing_key):
    make_batch()
    row = SigningKey.objects.get(pk=kid_of(signing_key))
    assert row.public_key == codec.public_key_b64url(signing_key.public_key())
    assert row.fingerprint == codec.key_fingerprint(signing_key.public_key())
    assert (row.use, keyring.key_state(row), row.certificate) == ("online", "active", "")


def test_token_from_before_key_ids_verifies_against_the_active_key_then_the_others(
    settings, new_key, customer, signing_key
):
    lic = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-1")
    old_claims = {name: value for name, value in lic.claims.items() if name != "kid"}
    assert keyring.verify(legacy_token(old_claims, signing_key)) == old_claims
    path, _ = new_key()
    settings.SVC_SIGNING_KEY_FILE = path  # the old key is registered, no longer active
    assert keyring.verify(legacy_token(old_claims, signing_key)) == old_claims
    stranger = legacy_token(old_claims, new_key()[1])
    with pytest.raises(BadSignature, match="does not verify"):
        keyring.verify(stranger)


def test_verification_reads_the_keys_once_per_refresh_not_per_token(
    make_batch, django_assert_num_queries, monkeypatch, caches_held
):
    token = make_batch().license.token
    keyring.verify(token)
    with django_assert_num_queries(0):
        for _ in range(3):
            keyring.verify(token)
    # Another process revoked the key: seen at the next refresh, at most 5 s later.
    SigningKey.objects.filter(pk=claims_of(token)["kid"]).update(retired_at="2026-01-01T00:00Z")
    monkeypatch.setattr(keyring, "REFRESH_SECONDS", 0)
    with pytest.raises(SigningKeyUnusable, match="retired"):
        keyring.verify(token)


# --- key_install -------------------------------------------------------------------------


def test_key_install_registers_a_certified_key(with_roots, new_key, tmp_path):
    _, key = new_key()
    text = certificate(with_roots, key, not_before=T0, not_after=T0 + 10**8)
    out = install(tmp_path, text)
    row = SigningKey.objects.get(pk=kid_of(key))
    assert f"signing key {row.kid}" in out and "standby" in out
    assert (row.certificate, row.use, row.not_before, row.not_after) == (
        text,
        "online",
        T0,
        T0 + 10**8,
    )
    assert row.public_key == codec.public_key_b64url(key.public_key())
    entry = AuditEntry.objects.get(action="signing_key.install")
    assert (entry.target, entry.result, entry.actor_kind) == (row.kid, "ok", "cli")


def test_key_install_takes_an_offline_air_gap_key(with_roots, new_key, tmp_path):
    _, key = new_key()
    install(tmp_path, certificate(with_roots, key, use="offline"))
    assert SigningKey.objects.get(pk=kid_of(key)).use == "offline"


def _tampered(text: str) -> str:
    """The certificate with its end date removed, signature kept."""
    prefix, payload, signature = text.split(".")
    fields = json.loads(codec.b64url_decode(payload))
    fields["exp"] = 0
    forged = codec.b64url_encode(json.dumps(fields).encode())
    return f"{prefix}.{forged}.{signature}"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("unknown root", "not in SVC_ROOT_KEYS"),
        ("tampered", "does not verify"),
        ("not a certificate", "not a key certificate"),
        ("a licence token", "not a key certificate"),
        ("wrong shape", "unexpected shape"),
        ("expired", "expired at"),
    ],
)
def test_key_install_refuses_and_stores_nothing(with_roots, new_key, tmp_path, case, message):
    _, key = new_key()
    root = with_roots
    text = {
        "unknown root": lambda: certificate(Ed25519PrivateKey.generate(), key),
        "tampered": lambda: _tampered(certificate(root, key, not_after=T0 + 10**8)),
        "not a certificate": lambda: "SVCK1.not-a-certificate",
        "a licence token": lambda: authority.encode_token({"lic": "x"}, key),
        "wrong shape": lambda: sign_document(
            "SVCK1", {"typ": "svc-key-cert", "root": kid_of(root), "kid": kid_of(key)}, root
        ),
        "expired": lambda: certificate(root, key, not_before=T0 - 100, not_after=T0),
    }[case]()
    with pytest.raises(CommandError, match=message):
        install(tmp_path, text)
    assert not SigningKey.objects.filter(pk=kid_of(key)).exists()
    entry = AuditEntry.objects.get(action="signing_key.install")
    assert entry.result == "failed" and message in entry.message


def test_key_install_without_roots_is_refused(new_key, tmp_path, root):
    _, key = new_key()
    with pytest.raises(CommandError, match="SVC_ROOT_KEYS is not set"):
        install(tmp_path, certificate(root, key))


def test_key_install_of_a_missing_file_is_a_command_error(tmp_path):
    with pytest.raises(CommandError, match="does not exist"):
        call_command("key_install", str(tmp_path / "absent.cert"))


# --- refusing to sign -------------------------------------------------------------------


def test_roots_configured_and_active_key_uncertified_refuses_then_works_once_installed(
    device_api, make_batch, settings, root, signing_key, tmp_path, client
):
    batch = make_batch(units=2)  # issued before the roots were configured
    settings.SVC_ROOT_KEYS = [codec.public_key_b64url(root.public_key())]
    kid = kid_of(signing_key)
    refused = activate(device_api, batch.license.token, "cam-1")
    assert refused.status_code == 503 and int(refused["Retry-After"]) >= 1
    detail = refused.json()["detail"]
    assert kid in detail and "python manage.py key_install CERT" in detail
    health = client.get("/healthz")
    assert health.status_code == 503 and health.json()["detail"] == detail
    assert batch.units_activated == 0 and not License.objects.filter(kind="unit").exists()

    text = certificate(root, signing_key)
    install(tmp_path, text)
    answer = activate(device_api, batch.license.token, "cam-1")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["certificates"] == [text]
    assert client.get("/healthz").json()["ok"] is True


def test_a_certificate_that_does_not_cover_now_refuses_to_sign(with_roots, signing_key, customer):
    later = int(time.time()) + 86400  # staged ahead of a rotation
    signing_key_install(certificate=certificate(with_roots, signing_key, not_before=later))
    with pytest.raises(SigningKeyUnusable, match=f"{later}..no end, not now"):
        license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-1")


def test_an_offline_key_configured_as_the_server_key_refuses_to_sign(
    with_roots, settings, new_key, customer
):
    path, key = new_key()
    signing_key_install(certificate=certificate(with_roots, key, use="offline"))
    settings.SVC_SIGNING_KEY_FILE = path
    with pytest.raises(SigningKeyUnusable, match="offline minting only"):
        license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-1")


def test_a_retired_key_configured_as_active_refuses_to_sign(
    settings, new_key, admin_api, customer, client
):
    path, key = new_key()
    settings.SVC_SIGNING_KEY_FILE = path
    body = {"customer_id": customer.id, "sku": "DETECT-STD", "device_id": "cam-1"}
    assert admin_api.post("/v1/admin/licenses", body, format="json").status_code == 201
    err = io.StringIO()
    call_command("key_retire", kid_of(key), stdout=io.StringIO(), stderr=err)
    assert "SVC_SIGNING_KEY_FILE" in err.getvalue()
    refused = admin_api.post("/v1/admin/licenses", body | {"device_id": "cam-2"}, format="json")
    assert refused.status_code == 503 and int(refused["Retry-After"]) >= 1
    assert kid_of(key) in refused.json()["detail"] and "retired" in refused.json()["detail"]
    health = client.get("/healthz")
    assert health.status_code == 503 and "retired" in health.json()["detail"]


def test_revoking_the_configured_key_warns_that_the_server_stops_signing(settings, new_key):
    path, key = new_key()
    settings.SVC_SIGNING_KEY_FILE = path
    keyring.certificates()  # loading the registry registers the configured key
    err = io.StringIO()
    call_command("key_revoke", kid_of(key), "--reason", "leaked", stdout=io.StringIO(), stderr=err)
    assert f"warning: {kid_of(key)} is this host's SVC_SIGNING_KEY_FILE key" in err.getvalue()


# --- rotation ----------------------------------------------------------------------------


def test_rotation_retirement_and_revocation_of_a_signing_key(
    with_roots, settings, new_key, tmp_path, make_batch, device_api, client
):
    path1, key1 = new_key()
    path2, key2 = new_key()
    kid1, kid2 = kid_of(key1), kid_of(key2)
    cert1, cert2 = certificate(with_roots, key1), certificate(with_roots, key2)
    install(tmp_path, cert1, "1.cert")
    install(tmp_path, cert2, "2.cert")

    settings.SVC_SIGNING_KEY_FILE = path1
    old_batch = make_batch(units=10)
    old_unit = activate(device_api, old_batch.license.token, "cam-1").json()["unit_token"]
    assert claims_of(old_unit)["kid"] == kid1

    # Rotation: the server now signs with key 2; no device needs a new firmware.
    settings.SVC_SIGNING_KEY_FILE = path2
    assert client.get("/healthz").json()["kid"] == kid2
    new_batch = make_batch(units=10)
    assert claims_of(new_batch.license.token)["kid"] == kid2
    moved = activate(device_api, old_batch.license.token, "cam-2")
    assert moved.status_code == 200 and claims_of(moved.json()["unit_token"])["kid"] == kid2
    assert upload(device_api, old_unit, "cam-1").status_code == 200

    # Retired: signs nothing more, what it signed keeps verifying.
    call_command("key_retire", kid1, stdout=io.StringIO())
    assert keyring.key_state(SigningKey.objects.get(pk=kid1)) == "retired"
    assert activate(device_api, old_batch.license.token, "cam-3").status_code == 200
    assert upload(device_api, old_unit, "cam-1", T0 + 3600).status_code == 200

    # Revoked: nothing it signed is accepted any more, and the list says so; but the
    # batch key it signed is the very token issued, so it still activates, answered with
    # a key-2 licence (tests/licensing/test_batch_key_after_rotation.py).
    start = revocations.head_get().seq
    call_command("key_revoke", kid1, "--reason", "laptop stolen", stdout=io.StringIO())
    still = activate(device_api, old_batch.license.token, "cam-4")
    assert still.status_code == 200 and claims_of(still.json()["unit_token"])["kid"] == kid2
    # The key-1 licence on a camera is the token issued: its usage is still billed, the
    # receipt signed by key 2; a variant signed with the leaked key 1 is refused.
    usage = upload(device_api, old_unit, "cam-1", T0 + 7200)
    assert usage.status_code == 200, usage.json()
    assert unverified_payload(usage.json()["receipt"])["kid"] == kid2
    forged = authority.encode_token(
        {**claims_of(old_unit), "exp": claims_of(old_unit)["exp"] + 1}, key1
    )
    refused = upload(device_api, forged, "cam-1", T0 + 10800)
    assert refused.status_code == 403 and "compromise" in refused.json()["detail"]
    assert activate(device_api, new_batch.license.token, "cam-5").status_code == 200

    assert revocations.head_get().seq == start + 1
    entry = Revocation.objects.get(seq=start + 1)
    assert (entry.license_id, entry.usable_until) == (f"KEY-{kid1}", 0)
    body = client.get("/v1/revocations", {"since": start}).json()
    page = parse_revocation_page(body["revocations"], key2.public_key())
    assert page.revoked == ((f"KEY-{kid1}", 0),)
    assert page.revoked_keys == frozenset({kid1})
    assert body["certificates"] == [cert2]
    legacy = client.get("/v1/revocations").json()
    assert f"KEY-{kid1}" in legacy["revoked"] and legacy["certificates"] == [cert2]
    # A device's status names the revoked key too, signed by the key in use.
    held = claims_of(old_unit)
    answer = client.get(
        "/v1/revocations/status", {"license_id": held["lic"], "device_id": "cam-1"}
    ).json()
    status = parse_status(answer["status"], key2.public_key())
    assert status.revoked_keys == frozenset({kid1}) and not status.revoked
    assert answer["certificates"] == [cert2]
    row = SigningKey.objects.get(pk=kid1)
    assert (keyring.key_state(row), row.revoke_reason) == ("revoked", "laptop stolen")
    actions = list(
        AuditEntry.objects.filter(action__startswith="signing_key.").values_list("action", "target")
    )
    assert ("signing_key.retire", kid1) in actions and ("signing_key.revoke", kid1) in actions


def test_revoking_twice_keeps_the_first_time_and_one_list_entry(new_key, settings, customer):
    path, key = new_key()
    settings.SVC_SIGNING_KEY_FILE = path
    license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-1")
    settings.SVC_SIGNING_KEY_FILE = new_key()[0]
    call_command("key_revoke", kid_of(key), "--reason", "first", stdout=io.StringIO())
    call_command("key_revoke", kid_of(key), "--reason", "again", stdout=io.StringIO())
    assert Revocation.objects.filter(license_id=f"KEY-{kid_of(key)}").count() == 1
    assert SigningKey.objects.get(pk=kid_of(key)).revoke_reason == "first"


def test_a_revoked_key_cannot_be_installed_again(with_roots, new_key, tmp_path, settings):
    _, key = new_key()
    install(tmp_path, certificate(with_roots, key))
    call_command("key_revoke", kid_of(key), "--reason", "lost", stdout=io.StringIO())
    with pytest.raises(CommandError, match="revoked"):
        install(tmp_path, certificate(with_roots, key), "again.cert")


@pytest.mark.parametrize("command", ["key_retire", "key_revoke"])
def test_unknown_key_id_is_a_command_error(command):
    args = [command, "0123456789abcdef"] + (["--reason", "x"] if command == "key_revoke" else [])
    with pytest.raises(CommandError, match="no signing key '0123456789abcdef'"):
        call_command(*args, stdout=io.StringIO())


# --- certificates in the answers ---------------------------------------------------------


def test_certificates_ride_with_activation_and_every_list_answer(
    with_roots, signing_key, new_key, tmp_path, make_batch, device_api, client
):
    active = certificate(with_roots, signing_key)
    install(tmp_path, active)
    batch = make_batch()
    new = activate(device_api, batch.license.token, "cam-1").json()
    again = activate(device_api, batch.license.token, "cam-1").json()
    assert new["certificates"] == again["certificates"] == [active]
    # A device holding only the root verifies everything it was handed.
    ring = Keyring([with_roots.public_key()])
    assert ring.add_valid(new["certificates"]) == 1
    codec.verify_token(new["unit_token"], ring)
    parse_revocation_page(new["revocations"], ring)

    first = client.get("/v1/revocations", {"since": 0})
    assert first.json()["certificates"] == [active]
    # A key installed later (a standby, an air-gap key) is never served stale.
    _, standby = new_key()
    offline = certificate(with_roots, standby, use="offline")
    install(tmp_path, offline, "standby.cert")
    second = client.get("/v1/revocations", {"since": 0}, HTTP_IF_NONE_MATCH=first["ETag"])
    assert second.status_code == 200 and second["ETag"] != first["ETag"]
    assert second.json()["certificates"] == [active, offline]
    assert client.get("/v1/revocations").json()["certificates"] == [active, offline]
    assert activate(device_api, batch.license.token, "cam-2").json()["certificates"] == [
        active,
        offline,
    ]


def test_active_certificate_is_the_active_keys_or_empty(with_roots, signing_key, tmp_path):
    assert keyring.active_certificate() == ""
    text = certificate(with_roots, signing_key)
    install(tmp_path, text)
    assert keyring.active_certificate() == text
    assert parse_certificate(text, {kid_of(with_roots): with_roots.public_key()}).kid == kid_of(
        signing_key
    )


# --- key_list and keygen -----------------------------------------------------------------


def test_key_list_shows_every_key_with_its_state(with_roots, signing_key, new_key, tmp_path):
    install(tmp_path, certificate(with_roots, signing_key), "active.cert")
    kids = {}
    for state in ("standby", "retired", "revoked"):
        _, key = new_key()
        install(tmp_path, certificate(with_roots, key, use="offline"), f"{state}.cert")
        kids[state] = kid_of(key)
    call_command("key_retire", kids["retired"], stdout=io.StringIO())
    call_command("key_revoke", kids["revoked"], "--reason", "x", stdout=io.StringIO())
    out = io.StringIO()
    call_command("key_list", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["KID", "USE", "STATE", "FINGERPRINT", "WINDOW"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows[kid_of(signing_key)][1:3] == ["online", "active"]
    for state, kid in kids.items():
        assert rows[kid][1:3] == ["offline", state]
    assert rows[kid_of(signing_key)][3] == codec.key_fingerprint(signing_key.public_key())
    assert " ".join(rows[kid_of(signing_key)][4:]) == "any time – no end"  # dates, not seconds


def test_keygen_prints_the_key_id(tmp_path):
    out = io.StringIO()
    path = tmp_path / "k.pem"
    call_command("keygen", out=str(path), stdout=out)
    assert f"key id (kid): {kid_of(read_private_key(path))}" in out.getvalue()


# --- the admin ---------------------------------------------------------------------------


def test_admin_lists_keys_and_retires_and_revokes_through_the_services(
    admin_client, new_key, settings, make_batch, signing_key
):
    make_batch()  # registers the active key
    session_key_file = settings.SVC_SIGNING_KEY_FILE
    path, key = new_key()
    settings.SVC_SIGNING_KEY_FILE = path
    make_batch()  # registers another one
    settings.SVC_SIGNING_KEY_FILE = session_key_file
    url = "/admin/signing/signingkey/"
    page = admin_client.get(url)
    assert page.status_code == 200
    body = page.content.decode()
    assert kid_of(key) in body and kid_of(signing_key) in body and "PRIVATE" not in body
    assert admin_client.get(f"{url}{kid_of(key)}/change/").status_code == 200

    pk = kid_of(key)
    admin_client.post(url, {"action": "retire_keys", "_selected_action": [pk]})
    assert SigningKey.objects.get(pk=pk).retired_at is not None
    confirm = admin_client.post(url, {"action": "revoke_keys", "_selected_action": [pk]})
    assert confirm.status_code == 200 and b"Revoke signing keys" in confirm.content
    admin_client.post(
        url,
        {"action": "revoke_keys", "_selected_action": [pk], "apply": "1", "reason": "stolen"},
    )
    row = SigningKey.objects.get(pk=pk)
    assert (keyring.key_state(row), row.revoke_reason) == ("revoked", "stolen")
    entry = AuditEntry.objects.get(action="signing_key.revoke")
    assert (entry.actor_kind, entry.target) == ("superuser", pk)


def test_revoking_the_active_key_needs_its_kid_typed_and_says_what_stops(
    admin_client, signing_key, make_batch
):
    make_batch()  # registers the active key and signs a batch key with it
    kid = kid_of(signing_key)
    url = "/admin/signing/signingkey/"
    selection = {"action": "revoke_keys", "_selected_action": [kid]}
    page = admin_client.post(url, selection).content.decode()
    assert "is the key this server signs with" in page and 'name="kid_typed"' in page
    assert "1 batch key" in page  # what it signed that is still in service
    assert "Recorded on the key" in page and "Recorded on the licence" not in page
    for typed in ("", "not-the-kid"):
        refused = admin_client.post(
            url, {**selection, "apply": "1", "reason": "drill", "kid_typed": typed}
        )
        assert refused.status_code == 200 and f"type {kid} to revoke" in refused.content.decode()
        assert SigningKey.objects.get(pk=kid).revoked_at is None
    admin_client.post(url, {**selection, "apply": "1", "reason": "drill", "kid_typed": kid})
    assert SigningKey.objects.get(pk=kid).revoked_at is not None
    # This process's keyring must not keep the session's signing key revoked once the
    # test's transaction is rolled back: read the registry again as it will be.
    SigningKey.objects.filter(pk=kid).update(revoked_at=None)
    keyring.keys_changed()


# --- the active key in the service -------------------------------------------------------


def test_unit_activation_under_a_new_key_still_verifies_units_of_the_old(
    settings, new_key, make_batch
):
    path1, _ = new_key()
    settings.SVC_SIGNING_KEY_FILE = path1
    batch = make_batch()
    first = unit_activate(batch_token=batch.license.token, device_id="cam-1")
    settings.SVC_SIGNING_KEY_FILE = new_key()[0]
    again = unit_activate(batch_token=batch.license.token, device_id="cam-1")
    assert again.reactivated and again.token == first.token
    assert keyring.verify(first.token)["lic"] == first.license_id
