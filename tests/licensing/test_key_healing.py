"""Key revocation heals the fleet (issue 22, item 4): a camera whose licence was signed
by a key revoked or retired since gets it re-signed by the active key when it comes
back, at re-activation and at its licence refresh, and only for the very token issued."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.utils import timezone

from audit.models import AuditEntry
from devices import token as codec
from licensing.models import SupersededToken
from signing.models import SigningKey
from svccore import authority
from tests import conftest as live  # its test_database_url is no test of this module
from tests.licensing.key_support import certificate, install
from tests.licensing.test_signing_keys import T0, activate, kid_of, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_keys(with_roots, settings, new_key, tmp_path):
    """Key 1 signs first; the server then moves to key 2 (both certified)."""
    (path1, key1), (path2, key2) = new_key(), new_key()
    install(tmp_path, certificate(with_roots, key1), "1.cert")
    install(tmp_path, certificate(with_roots, key2), "2.cert")
    settings.SVC_SIGNING_KEY_FILE = path1

    def rotate(to: int = 2) -> None:
        settings.SVC_SIGNING_KEY_FILE = {1: path1, 2: path2}[to]

    return key1, key2, rotate


def refresh(client, token: str, device_id: str):
    return client.get("/v1/license", {"device_id": device_id}, HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.mark.parametrize("command", ["key_revoke", "key_retire"])
def test_reactivation_re_signs_a_unit_of_a_key_gone_since(
    two_keys, make_batch, device_api, command
):
    """The issue's case: the batch key is signed by key 2 (node B); the camera activated
    on a node still signing with key 1 (node A); key 1 is then revoked (or retired) and
    the camera re-activates."""
    key1, key2, rotate = two_keys
    rotate()
    batch_key = make_batch(units=5).license.token  # signed by key 2
    rotate(to=1)
    first = activate(device_api, batch_key, "cam-1").json()  # the unit: key 1
    assert codec.decode_unverified(first["unit_token"])["kid"] == kid_of(key1)
    rotate()
    args = [command, kid_of(key1)] + (["--reason", "leaked"] if command == "key_revoke" else [])
    call_command(*args, stdout=io.StringIO())
    healed = activate(device_api, batch_key, "cam-1")
    body = healed.json()
    assert healed.status_code == 200 and body["reactivated"] is True
    assert body["license_id"] == first["license_id"]
    claims = codec.verify_token(body["unit_token"], key2.public_key())
    assert claims["kid"] == kid_of(key2)
    assert claims["exp"] == codec.decode_unverified(first["unit_token"])["exp"]
    assert SupersededToken.objects.filter(license_id=body["license_id"]).count() == 1
    assert upload(device_api, body["unit_token"], "cam-1").status_code == 200
    again = activate(device_api, batch_key, "cam-1").json()  # healed once, then stable
    assert again["unit_token"] == body["unit_token"]


def test_a_unit_of_a_revoked_key_is_re_signed_at_its_license_refresh(
    two_keys, make_batch, device_api
):
    key1, key2, rotate = two_keys
    batch = make_batch(units=5)
    old = activate(device_api, batch.license.token, "cam-1").json()["unit_token"]
    rotate()
    call_command("key_revoke", kid_of(key1), "--reason", "leaked", stdout=io.StringIO())
    # The licence held is the token issued: its usage is still billed (checked under the
    # revoked key, byte for byte); the refresh then re-signs it.
    assert upload(device_api, old, "cam-1").status_code == 200
    answer = refresh(device_api, old, "cam-1")
    assert answer.status_code == 200, answer.content
    renewed = answer.json()["token"]
    claims = codec.verify_token(renewed, key2.public_key())
    assert claims["kid"] == kid_of(key2)
    assert claims["exp"] == codec.decode_unverified(old)["exp"]
    assert upload(device_api, renewed, "cam-1", T0 + 3600).status_code == 200
    assert refresh(device_api, renewed, "cam-1").status_code == 304
    assert refresh(device_api, old, "cam-1").status_code == 200  # the old one still proves


def test_a_direct_license_of_a_revoked_key_is_re_signed_at_its_refresh(
    two_keys, admin_api, device_api, customer
):
    key1, key2, rotate = two_keys
    issued = admin_api.post(
        "/v1/admin/licenses",
        {"customer_id": customer.id, "sku": "DETECT-STD", "device_id": "cam-d", "term_days": 0},
        format="json",
    ).json()
    rotate()
    call_command("key_revoke", kid_of(key1), "--reason", "leaked", stdout=io.StringIO())
    answer = refresh(device_api, issued["token"], "cam-d")
    assert answer.status_code == 200
    claims = codec.verify_token(answer.json()["token"], key2.public_key())
    assert claims["exp"] == 0 and claims["lic"] == issued["license_id"]


def test_a_token_forged_with_a_leaked_revoked_key_gets_nothing(two_keys, make_batch, device_api):
    key1, key2, rotate = two_keys
    old = activate(device_api, make_batch(units=5).license.token, "cam-1").json()["unit_token"]
    rotate()
    call_command("key_revoke", kid_of(key1), "--reason", "leaked", stdout=io.StringIO())
    claims = codec.decode_unverified(old)
    forged = authority.encode_token({**claims, "exp": claims["exp"] + 10**6}, key1)
    answer = refresh(device_api, forged, "cam-1")
    assert answer.status_code == 403
    assert AuditEntry.objects.filter(action__contains="compromise").exists() or (
        "issued" in answer.json()["detail"]
    )


@pytest.mark.django_db(transaction=True)
def test_a_node_on_a_retired_key_says_why_at_start_up(new_key, settings):
    path, key = new_key()
    SigningKey.objects.create(
        kid=kid_of(key),
        public_key=codec.public_key_b64url(key.public_key()),
        fingerprint=codec.key_fingerprint(key.public_key()),
        use=SigningKey.Use.ONLINE,
        retired_at=timezone.now(),
    )
    env = {
        **os.environ,
        "DATABASE_URL": live.test_database_url(),
        "SVC_SIGNING_KEY_FILE": str(path),
        "SVC_SECRET_KEY": settings.SECRET_KEY,
        "SVC_DEBUG": "0",
    }
    started = subprocess.run(
        [sys.executable, "-c", "import config.wsgi"],
        cwd=live.REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert "answers 503 wherever a signature is needed" in started.stderr
    assert f"{kid_of(key)} (SVC_SIGNING_KEY_FILE) was retired" in started.stderr
