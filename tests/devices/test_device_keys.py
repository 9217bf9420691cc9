"""A device build with a root keyring (issue: signing keys under a root of trust).

The root never signs licences; it certifies signing keys. The engine trusts a token,
list page or receipt only when the signing key it names (``kid``) has a certificate from
the root that was valid when it signed and is not revoked by the signed list. Keys can
then be rotated with no firmware update: certificates arrive with every answer and
inside licence files made offline."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import devices
from devices import LicenseError
from devices.keys import KeyNotTrusted, key_id
from svccore.authority import encode_token, sign_certificate
from tests.devices.device_support import DEVICE, LICENSE, NOW, claims_for, provision

YEAR = 365 * 86400


def certify(root, key, *, use="online", not_before=NOW - YEAR, not_after=0):
    return sign_certificate(
        root, key.public_key(), issued_at=NOW - YEAR, not_before=not_before,
        not_after=not_after, use=use, issuer="svc-test",
    )  # fmt: skip


@pytest.fixture
def root():
    return Ed25519PrivateKey.generate()


@pytest.fixture
def first(root):
    """The authority's first signing key and its certificate."""
    key = Ed25519PrivateKey.generate()
    return key, certify(root, key)


@pytest.fixture
def rooted(tmp_path, root, first, clock):
    """A provisioned device whose build trusts ``root`` only; returns a factory."""
    key, cert = first
    state = tmp_path / "rooted"
    provision(state, key)
    (state / "keys.json").write_text(json.dumps({"format": 1, "certificates": [cert]}))
    (state / "license.token").write_text(token(key) + "\n")
    engines = []

    def make(**kwargs):
        for earlier in engines:
            earlier._dir_lock.release()
        kwargs.setdefault("root_keys", [root.public_key()])
        engines.append(devices.Engine(state, device_id=DEVICE, clock=clock, **kwargs))
        return engines[-1]

    make.state = state
    yield make
    for engine in engines:
        engine._dir_lock.release()


def token(key, **claims):
    return encode_token(claims_for(**claims), key)


def test_token_of_a_certified_key_starts(rooted, first):
    assert rooted().start(token(first[0])) == "active"


def test_token_of_an_uncertified_key_is_refused(rooted):
    stranger = Ed25519PrivateKey.generate()
    with pytest.raises(KeyNotTrusted) as caught:
        rooted().start(token(stranger))
    assert caught.value.code == "KEY_UNKNOWN" and isinstance(caught.value, devices.BadSignature)


def test_license_pubkey_cannot_add_trust_to_a_rooted_build(rooted):
    stranger = Ed25519PrivateKey.generate()
    with pytest.raises(LicenseError) as caught:
        rooted(public_key=stranger.public_key())
    assert caught.value.code == "BAD_PUBLIC_KEY"


def test_license_file_carries_the_certificate_of_a_new_key(rooted, root):
    rotated = Ed25519PrivateKey.generate()
    license_file = token(rotated) + "\n" + certify(root, rotated) + "\n"
    engine = rooted()
    assert engine.start(license_file) == "active"
    kept = json.loads((rooted.state / "keys.json").read_text())["certificates"]
    assert len(kept) == 2  # learned for the next boot
    assert rooted().start(token(rotated)) == "active"


@pytest.mark.parametrize(
    ("certificate", "code"),
    [
        (lambda root, key: certify(Ed25519PrivateKey.generate(), key), "KEY_UNTRUSTED_ROOT"),
        (lambda root, key: certify(root, key)[:-4] + "AAAA", "KEY_CERT_INVALID"),
        (lambda root, key: "SVCK1.e30.AAAA", "KEY_UNTRUSTED_ROOT"),
        (lambda root, key: "not a certificate", "KEY_UNTRUSTED_ROOT"),
    ],
    ids=["foreign root", "tampered", "malformed", "garbage"],
)
def test_bad_certificate_in_a_license_file_is_a_coded_refusal(rooted, root, certificate, code):
    rotated = Ed25519PrivateKey.generate()
    with pytest.raises(KeyNotTrusted) as caught:
        rooted().start(token(rotated) + "\n" + certificate(root, rotated))
    assert caught.value.code == code


def test_certificate_must_cover_the_signing_time(rooted, root):
    old = Ed25519PrivateKey.generate()
    ended = certify(root, old, not_after=NOW - 10 * 86400)
    with pytest.raises(KeyNotTrusted) as caught:
        rooted().start(token(old, iat=NOW - 86400) + "\n" + ended)
    assert caught.value.code == "KEY_EXPIRED"
    # A token it signed while certified keeps verifying (a retired key).
    assert rooted().start(token(old, iat=NOW - 20 * 86400) + "\n" + ended) == "active"


def test_offline_key_signs_licenses_but_not_lists(rooted, root, service, first):
    airgap = Ed25519PrivateKey.generate()
    offline_cert = certify(root, airgap, use="offline")
    engine = rooted()
    assert engine.start(token(airgap) + "\n" + offline_cert) == "active"
    service.key, service.certificates = airgap, [offline_cert]
    service.revoked = [("LIC-X", 0)]
    with pytest.raises(LicenseError) as caught:
        engine.sync(service.url, allow_http=True)
    assert caught.value.code in ("LIST_BAD_SIGNATURE", "RECEIPT_INVALID")


def test_rotation_reaches_the_device_through_sync(rooted, root, first, service, clock):
    """Key 2 is certified and deployed: the device learns its certificate from the list
    answer, accepts its pages and receipts, and the tokens of key 1 keep working."""
    second = Ed25519PrivateKey.generate()
    engine = rooted()
    engine.start(token(first[0]))
    engine.count(inferences=3)
    clock.now = NOW // 3600 * 3600 + 3600 + 1
    engine.count(frames=1)
    service.key, service.certificates = second, [first[1], certify(root, second)]
    service.revoked = [("LIC-X", 0)]
    summary = engine.sync(service.url, allow_http=True)
    assert (summary["list_seq"], summary["pending"]) == (1, 0)
    assert rooted().start(token(first[0])) == "active"
    assert rooted().start(token(second, lic=LICENSE)) == "active"


def test_revoked_key_stops_its_tokens_after_sync(rooted, root, first, service):
    second = Ed25519PrivateKey.generate()
    service.key, service.certificates = second, [first[1], certify(root, second)]
    service.keys_revoked = [key_id(first[0].public_key())]
    service.revoked = [("KEY-" + key_id(first[0].public_key()), 0)]
    engine = rooted()
    engine.sync(service.url, allow_http=True)
    with pytest.raises(KeyNotTrusted) as caught:
        rooted().start(token(first[0]))
    assert caught.value.code == "KEY_REVOKED"
    assert rooted().start(token(second)) == "active"


def test_certificates_in_answers_that_do_not_verify_add_no_trust(rooted, service, first):
    stranger = Ed25519PrivateKey.generate()
    service.certificates = [certify(Ed25519PrivateKey.generate(), stranger)]
    service.key = first[0]
    engine = rooted()
    engine.sync(service.url, allow_http=True)
    with pytest.raises(KeyNotTrusted):
        rooted().start(token(stranger))


def test_edited_keys_file_adds_no_trust(rooted, root, first):
    stranger = Ed25519PrivateKey.generate()
    forged = certify(Ed25519PrivateKey.generate(), stranger)
    path = rooted.state / "keys.json"
    path.write_text(json.dumps({"format": 1, "certificates": [first[1], forged]}))
    with pytest.raises(KeyNotTrusted):
        rooted().start(token(stranger))
    path.write_text("{garbage")
    with pytest.raises(LicenseError):  # no certificate: the held list cannot verify either
        rooted().start(token(first[0]))


def test_revoked_key_stops_the_running_engine_at_the_sync_that_learns_it(
    rooted, root, first, service, clock
):
    engine = rooted()
    assert engine.start(token(first[0])) == "active"
    engine.count(inferences=2)
    second = Ed25519PrivateKey.generate()
    service.key, service.certificates = second, [first[1], certify(root, second)]
    service.keys_revoked = [key_id(first[0].public_key())]
    with pytest.raises(KeyNotTrusted) as caught:
        engine.sync(service.url, allow_http=True)
    assert caught.value.code == "KEY_REVOKED" and caught.value.summary["revoked"] is False
    for analytics in (lambda: engine.require("detect"), lambda: engine.count(inferences=1)):
        with pytest.raises(KeyNotTrusted, match="revoked"):
            analytics()
    with engine.open_stream() as stream:  # video keeps running
        assert engine.admit_frame(stream)
    assert engine.usage["inferences"] == 2
