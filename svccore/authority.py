"""The authority's half of the signed formats the device module reads: what only a
holder of a signing or root key writes (SVC1 licence tokens, key certificates,
revocation-list pages, usage receipts, licence statuses).

The device module parses and verifies each of them (``devices.token``, ``devices.keys``,
``devices.documents``: the one parser of each format); firmware never signs, so none of
this ships in it. The server (``signing.keyring``), ``svcctl`` (offline minting, root
certificates) and the tests sign here.
"""

from __future__ import annotations

import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from devices.documents import LIST_TYPE, RECEIPT_TYPE, STATUS_TYPE, canonical_json
from devices.keys import CERT_PREFIX, CERT_TYPE, ONLINE, USES
from devices.token import DEFAULT_ISSUER, PREFIX, b64url_encode, key_id, public_key_b64url


def with_kid(payload: dict[str, Any], private_key: Any) -> dict[str, Any]:
    """``payload`` naming its signer: ``kid`` is added unless the payload has one."""
    if "kid" in payload:
        return payload
    return {**payload, "kid": key_id(private_key.public_key())}


def encode_token(claims: dict[str, Any], private_key: Ed25519PrivateKey) -> str:
    """Sign ``claims`` into an SVC1 token that names its signing key (``kid``)."""
    claims = with_kid(claims, private_key)
    payload = json.dumps(claims, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    signing_input = f"{PREFIX}.{b64url_encode(payload.encode('ascii'))}"
    signature = private_key.sign(signing_input.encode("ascii"))
    return f"{signing_input}.{b64url_encode(signature)}"


def sign_document(prefix: str, payload: dict[str, Any], private_key: Any) -> str:
    """Sign ``payload``; it names its signing key (``kid``) unless it already has one
    (a key certificate's ``kid`` is the key it endorses; its signer is ``root``)."""
    payload = with_kid(payload, private_key)
    signing_input = f"{prefix}.{b64url_encode(canonical_json(payload))}"
    signature = private_key.sign(signing_input.encode("ascii"))
    return f"{signing_input}.{b64url_encode(signature)}"


def certificate_payload(
    *,
    public_key: Any,
    root_public_key: Any,
    issued_at: int,
    not_before: int,
    not_after: int = 0,
    use: str = ONLINE,
    issuer: str = DEFAULT_ISSUER,
) -> dict[str, Any]:
    if use not in USES:
        raise ValueError(f"use must be one of {', '.join(USES)}, not {use!r}")
    if not_after and not_after < not_before:
        raise ValueError("certificate ends before it starts")
    return {
        "typ": CERT_TYPE,
        "iss": issuer,
        "kid": key_id(public_key),
        "key": public_key_b64url(public_key),
        "root": key_id(root_public_key),
        "iat": issued_at,
        "nbf": not_before,
        "exp": not_after,
        "use": use,
    }


def sign_certificate(root_private_key: Any, public_key: Any, **fields: Any) -> str:
    """A key certificate for ``public_key``, signed by ``root_private_key`` (offline)."""
    payload = certificate_payload(
        public_key=public_key, root_public_key=root_private_key.public_key(), **fields
    )
    return sign_document(CERT_PREFIX, payload, root_private_key)


def revocation_page_payload(
    *,
    issuer: str,
    start: int,
    seq: int,
    issued_at: int,
    more: bool,
    revoked: list,
    keys_revoked: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "keys_revoked": sorted(keys_revoked or []),
        "typ": LIST_TYPE,
        "iss": issuer,
        "from": start,
        "seq": seq,
        "iat": issued_at,
        "more": more,
        "revoked": revoked,
    }


def receipt_payload(
    *,
    issuer: str,
    device_id: str,
    license_id: str,
    nonce: str,
    issued_at: int,
    records: list[tuple[int, ...]],
    refused: list[tuple[int, int]] = (),
    inferences: int,
) -> dict[str, Any]:
    """``records``: (period_start, period_end, inferences, frames, stream_seconds,
    events) as the authority holds them."""
    return {
        "typ": RECEIPT_TYPE,
        "iss": issuer,
        "dev": device_id,
        "lic": license_id,
        "nonce": nonce,
        "iat": issued_at,
        "records": [list(record) for record in records],
        "refused": [list(key) for key in refused],
        "inferences": inferences,
    }


def status_payload(
    *,
    issuer: str,
    license_id: str,
    device_id: str,
    revoked_at: int,
    seq: int,
    issued_at: int,
    keys_revoked: list[str] | None = None,
    lease_end: int = 0,
    suspended: bool = False,
) -> dict[str, Any]:
    """``revoked_at`` 0: not revoked as of ``seq``. ``lease_end`` (0: no check-in lease)
    and ``suspended`` are written only when set, so a status without them is the one an
    older authority signed (issue 42 adds them)."""
    extra: dict[str, Any] = {}
    if lease_end:
        extra["lease_end"] = lease_end
    if suspended:
        extra["suspended"] = True
    return extra | {
        "typ": STATUS_TYPE,
        "iss": issuer,
        "lic": license_id,
        "dev": device_id,
        "revoked": bool(revoked_at),
        "revoked_at": revoked_at,
        "seq": seq,
        "iat": issued_at,
        "keys_revoked": sorted(keys_revoked or []),
    }
