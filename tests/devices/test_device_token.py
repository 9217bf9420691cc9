"""Offline verification of the SVC1 format on the device (spec §1 outcomes table, §2.1)
and the strict decoding that keeps one token from having two readings."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import devices
from devices import BadSignature, key_fingerprint, verify_token
from devices.token import MAX_TOKEN_CHARS, b64url_decode, b64url_encode
from tests.devices.device_support import claims_for


def sign_raw(payload: bytes, key: Ed25519PrivateKey) -> str:
    """A token over arbitrary payload bytes, correctly signed (to reach the parser)."""
    signing_input = f"SVC1.{b64url_encode(payload)}"
    return f"{signing_input}.{b64url_encode(key.sign(signing_input.encode()))}"


def test_valid_token_returns_its_claims(make_token, public_key):
    claims = verify_token(make_token(), public_key)
    assert claims.pop("kid") == devices.token.key_id(public_key)  # names its signing key
    assert claims == claims_for()


def test_payload_byte_altered_is_bad_signature(make_token, public_key):
    head, payload, signature = make_token().split(".")
    raw = bytearray(b64url_decode(payload))
    raw[raw.index(b"VISION")] ^= 0x01  # "VISION" -> "WISION", still valid JSON
    altered = f"{head}.{b64url_encode(bytes(raw))}.{signature}"
    with pytest.raises(BadSignature):
        verify_token(altered, public_key)


def test_reencoded_payload_with_widened_entitlement_keeps_no_signature(make_token, public_key):
    head, payload, signature = make_token().split(".")
    claims = json.loads(b64url_decode(payload))
    claims["ent"]["anpr"] = True
    claims["lim"]["max_streams"] = 64
    widened = b64url_encode(json.dumps(claims, indent=1).encode())
    with pytest.raises(BadSignature):
        verify_token(f"{head}.{widened}.{signature}", public_key)


def test_token_signed_by_another_key_is_bad_signature(make_token, public_key):
    forged = make_token(key=Ed25519PrivateKey.generate())
    with pytest.raises(BadSignature):
        verify_token(forged, public_key)


def test_signature_covers_encoded_text_not_json_layout(signing_key, public_key):
    pretty = json.dumps(claims_for(), indent=2, sort_keys=False).encode()
    assert verify_token(sign_raw(pretty, signing_key), public_key) == claims_for()


@pytest.mark.parametrize("pad", ["=", "=="])
def test_padded_payload_is_rejected(make_token, public_key, pad):
    head, payload, signature = make_token().split(".")
    with pytest.raises(BadSignature, match="base64url"):
        verify_token(f"{head}.{payload}{pad}.{signature}", public_key)


def test_non_canonical_base64_is_rejected(signing_key, public_key):
    # A 2-byte tail leaves 2 spare bits; setting them decodes to the same bytes.
    payload = json.dumps(claims_for(sku="VISION-PROX")).encode()
    while len(payload) % 3 != 2:
        payload += b" "
    text = b64url_encode(payload)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    twin = text[:-1] + alphabet[alphabet.index(text[-1]) | 1]
    assert twin != text and b64url_decode(text) == payload
    signing_input = f"SVC1.{twin}"
    token = f"{signing_input}.{b64url_encode(signing_key.sign(signing_input.encode()))}"
    with pytest.raises(BadSignature, match="canonical"):
        verify_token(token, public_key)


def test_standard_base64_alphabet_is_rejected(make_token, public_key):
    head, payload, signature = make_token().split(".")
    with pytest.raises(BadSignature):
        verify_token(
            f"{head}.{payload}.{signature.replace('-', '+').replace('_', '/')}+", public_key
        )


def test_oversized_token_is_rejected_before_verification(signing_key, public_key):
    token = sign_raw(json.dumps(claims_for(sku="X" * MAX_TOKEN_CHARS)).encode(), signing_key)
    with pytest.raises(BadSignature, match="at most"):
        verify_token(token, public_key)


@pytest.mark.parametrize("payload", [b"[1, 2]", b'"text"', b"42", b"null"])
def test_non_object_json_is_rejected_even_when_signed(signing_key, public_key, payload):
    with pytest.raises(BadSignature, match="not a JSON object"):
        verify_token(sign_raw(payload, signing_key), public_key)


def test_duplicate_claim_keys_are_rejected_even_when_signed(signing_key, public_key):
    text = json.dumps(claims_for())[:-1] + ', "dev": "*"}'
    with pytest.raises(BadSignature, match="duplicate"):
        verify_token(sign_raw(text.encode(), signing_key), public_key)


def test_wrong_prefix_and_part_count_are_rejected(make_token, public_key):
    token = make_token()
    for bad in ("SVC2" + token[4:], token + ".x", token.rsplit(".", 1)[0], ""):
        with pytest.raises(BadSignature):
            verify_token(bad, public_key)


def test_public_key_accepted_as_pem_or_b64url(make_token, signing_key, public_key):
    pem = signing_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert verify_token(make_token(), pem.decode())["lic"] == "LIC-0123456789"
    assert key_fingerprint(pem.decode()) == key_fingerprint(public_key)


def test_key_fingerprint_is_sha256_hex_of_raw_key(public_key):
    import hashlib

    assert key_fingerprint(public_key) == hashlib.sha256(b64url_decode(public_key)).hexdigest()
    assert devices.key_fingerprint is key_fingerprint
