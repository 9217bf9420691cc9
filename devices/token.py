"""The SVC1 licence token codec: the one implementation of the format.

A token is ``SVC1.<b64url(payload_json)>.<b64url(ed25519_signature)>``. The signature
covers the ASCII bytes of ``SVC1.<b64url(payload_json)>``, so verification never depends
on how the JSON was laid out. Decoding is strict: unpadded canonical base64url only, a
size cap, a JSON object with no duplicate keys, and typed claims. The server and devices
verify through this module, so there is no second parser whose quirks an attacker could
play against the first; signing is the authority's alone (``svccore.authority``, which
firmware never ships).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from . import jsonsafe
from .errors import BadSignature, Code, InvalidArgument

PREFIX = "SVC1"
# The iss of what the authority signs unless SVC_ISSUER says otherwise: the one default
# (the settings, svccore.claims and svcctl import it).
DEFAULT_ISSUER = "svc-licensing"
MAX_TOKEN_CHARS = 8192
SIGNATURE_BYTES = 64
PUBLIC_KEY_BYTES = 32
KID_CHARS = 16  # a key id is this many leading hex digits of the key's fingerprint

_B64URL_CHARS = re.compile(r"\A[A-Za-z0-9_-]*\Z")

# Claim name -> accepted Python types. bool is excluded from integers explicitly below.
_INT_CLAIMS = ("iat", "nbf", "exp", "grace_days")
_STR_CLAIMS = ("lic", "sku", "sub", "iss", "dev", "act")
REQUIRED_CLAIMS = _STR_CLAIMS + _INT_CLAIMS + ("ent", "lim")
LIMIT_NAMES = ("max_streams", "max_fps", "api_calls")


def b64url_encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Decode unpadded base64url, rejecting padding, stray characters and non-canonical
    forms (set trailing bits), so one byte string has exactly one textual encoding."""
    if not isinstance(text, str) or not _B64URL_CHARS.match(text) or len(text) % 4 == 1:
        raise ValueError("not unpadded base64url")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not unpadded base64url") from exc
    if b64url_encode(raw) != text:
        raise ValueError("non-canonical base64url")
    return raw


def load_public_key(value: Any) -> Ed25519PublicKey:
    """Accept a public key as an object, PEM (text or bytes), or unpadded base64url of
    the raw 32 bytes (contract §2)."""
    if isinstance(value, Ed25519PublicKey):
        return value
    if isinstance(value, bytes):
        value = value.decode("ascii", errors="strict")
    if not isinstance(value, str):
        raise ValueError("public key must be PEM or base64url text")
    text = value.strip()
    if text.startswith("-----BEGIN"):
        # Loaded here: cryptography's serialization package is some twenty modules
        # (SSH, ciphers) that a firmware given base64url keys never needs at start.
        from cryptography.hazmat.primitives import serialization

        try:
            key = serialization.load_pem_public_key(text.encode("ascii"))
        except UnsupportedAlgorithm as exc:  # e.g. an elliptic curve OpenSSL lacks
            raise ValueError(f"PEM public key of an unsupported kind: {exc}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError("PEM public key is not Ed25519")
        return key
    raw = b64url_decode(text)
    if len(raw) != PUBLIC_KEY_BYTES:
        raise ValueError(f"raw Ed25519 public key must be {PUBLIC_KEY_BYTES} bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def public_key_raw(public_key: Any) -> bytes:
    return load_public_key(public_key).public_bytes_raw()


def public_key_b64url(public_key: Any) -> str:
    return b64url_encode(public_key_raw(public_key))


def public_key_pem(public_key: Any) -> str:
    from cryptography.hazmat.primitives import serialization  # as in load_public_key

    return (
        load_public_key(public_key)
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode("ascii")
    )


def key_fingerprint(public_key: Any) -> str:
    """Lowercase hex SHA-256 of the raw 32-byte public key: what /healthz shows.
    Anything that is not an Ed25519 public key raises :class:`InvalidArgument` with code
    ``BAD_PUBLIC_KEY`` (a ValueError, as before)."""
    try:
        raw = public_key_raw(public_key)
    except ValueError as exc:  # UnicodeDecodeError of non-ASCII bytes included
        raise InvalidArgument(
            f"not an Ed25519 public key (PEM or base64url of 32 bytes): {exc}",
            code=Code.BAD_PUBLIC_KEY,
        ) from None
    return hashlib.sha256(raw).hexdigest()


def key_id(public_key: Any) -> str:
    """The key id (``kid``) a token or document names its signing key by."""
    return key_fingerprint(public_key)[:KID_CHARS]


def reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate claim {key!r}")
        result[key] = value
    return result


def _split(token: Any) -> tuple[str, bytes, bytes]:
    if not isinstance(token, str):
        raise BadSignature("token is not a string")
    if len(token) > MAX_TOKEN_CHARS:
        raise BadSignature(f"token is {len(token)} characters; at most {MAX_TOKEN_CHARS}")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise BadSignature(f"token is not of the form {PREFIX}.<payload>.<signature>")
    try:
        payload = b64url_decode(parts[1])
        signature = b64url_decode(parts[2])
    except ValueError as exc:
        raise BadSignature(f"token is not canonical unpadded base64url: {exc}") from None
    if len(signature) != SIGNATURE_BYTES:
        raise BadSignature("signature is not 64 bytes")
    return f"{parts[0]}.{parts[1]}", payload, signature


def _parse_claims(payload: bytes) -> dict[str, Any]:
    try:
        claims = jsonsafe.loads(
            payload,
            max_bytes=MAX_TOKEN_CHARS,
            what="token payload",
            object_pairs_hook=reject_duplicate_keys,
        )
    except ValueError as exc:  # JSONRefused, or a duplicate claim
        raise BadSignature(f"token refused: {exc}") from None
    if not isinstance(claims, dict):
        raise BadSignature("payload is not a JSON object")
    _check_claim_types(claims)
    return claims


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_claim_types(claims: dict[str, Any]) -> None:
    missing = [name for name in REQUIRED_CLAIMS if name not in claims]
    if missing:
        raise BadSignature(f"token lacks claims: {', '.join(missing)}")
    for name in _STR_CLAIMS:
        if not isinstance(claims[name], str):
            raise BadSignature(f"claim {name!r} must be a string")
    for name in _INT_CLAIMS:
        if not _is_int(claims[name]) or claims[name] < 0:
            raise BadSignature(f"claim {name!r} must be a non-negative integer")
    ent = claims["ent"]
    if not isinstance(ent, dict) or not all(isinstance(v, bool) for v in ent.values()):
        raise BadSignature("claim 'ent' must map module names to booleans")
    lim = claims["lim"]
    if not isinstance(lim, dict) or not all(
        _is_int(lim.get(name)) and lim[name] >= 0 for name in LIMIT_NAMES
    ):
        raise BadSignature("claim 'lim' must carry non-negative integer caps")
    if "kid" in claims and not isinstance(claims["kid"], str):
        raise BadSignature("claim 'kid' must be a string")
    batch = claims.get("batch")
    if batch is not None and not (
        isinstance(batch, dict) and isinstance(batch.get("id"), str) and _is_int(batch.get("units"))
    ):
        raise BadSignature("claim 'batch' must be {id: string, units: integer}")


def decode_unverified(token: str) -> dict[str, Any]:
    """Claims of a well-formed token WITHOUT checking the signature. For display only
    (``svcctl inspect`` shows what a token says before saying whether to trust it)."""
    _, payload, _ = _split(token)
    return _parse_claims(payload)


def resolve_key(public_key: Any, payload: bytes, *, use: str = "offline") -> Ed25519PublicKey:
    """The key to check a signature with: ``public_key`` itself, or, for a keyring
    (:class:`devices.keys.Keyring`), the certified key the payload's ``kid`` names."""
    if hasattr(public_key, "resolve"):
        try:
            # Bounded by the caller's size check; only read to find the key's id.
            unverified = jsonsafe.loads(payload, max_bytes=len(payload))
        except jsonsafe.JSONRefused:
            unverified = {}
        return public_key.resolve(unverified if isinstance(unverified, dict) else {}, use=use)
    try:
        return load_public_key(public_key)
    except ValueError as exc:
        raise BadSignature(f"unusable public key: {exc}") from None


def verify_token(token: str, public_key: Any) -> dict[str, Any]:
    """Return the claims of ``token`` if its Ed25519 signature verifies under
    ``public_key`` (a key, or a keyring that finds the certified key the token's ``kid``
    names); raise :class:`BadSignature` otherwise.

    The signature is checked before the payload is parsed, so untrusted JSON is never
    interpreted. Term, binding and revocation are the caller's checks.
    """
    signing_input, payload, signature = _split(token)
    key = resolve_key(public_key, payload)
    try:
        key.verify(signature, signing_input.encode("ascii"))
    except InvalidSignature:
        raise BadSignature("signature does not verify") from None
    return _parse_claims(payload)
