"""Signed documents of the authority other than licences: revocation-list pages and
usage receipts. One envelope, the token's: ``<PREFIX>.<b64url(payload)>.<b64url(sig)>``,
Ed25519 over the ASCII bytes of ``<PREFIX>.<b64url(payload)>``. Each kind has its own
prefix, so a document of one kind can never be passed off as another (or as a licence).

Revocation-list page (``SVCR1``), the answer to ``GET /v1/revocations?since=N``::

    {"typ": "svc-revocations", "iss": str, "from": N, "seq": S, "iat": T,
     "more": bool, "revoked": [[licence_id, usable_until], ...], "keys_revoked": [kid, ...],
     "kid": signing key}

Every revocation gets the next number of one strictly increasing sequence. A page lists
the revocations numbered in ``(from, seq]`` that still matter at ``iat`` (the signing
time), in sequence order; ``more`` says the authority already holds revocations past
``seq`` (fetch again with ``since=seq``). ``usable_until`` is the Unix second after which
the licence could not run anyway (``exp`` + grace; ``0`` = perpetual, never drops out).

Usage receipt (``SVCU1``), in the answer to ``POST /v1/usage``::

    {"typ": "svc-usage-receipt", "iss": str, "dev": device_id, "lic": licence_id,
     "nonce": str, "iat": T,
     "records": [[period_start, period_end, inferences, frames, stream_seconds, events], ...],
     "refused": [[period_start, period_end], ...], "inferences": total}

``records`` are exactly the uploaded records the authority stored or already held (never
the deferred ones), each with the counts the authority holds for it: the counts sent
when it was stored or held with the same counts, other counts when it is a conflict
(contract §7). A device deletes a spooled record only when the receipt holds exactly the
counts it sent. ``refused`` names the records refused for good because they lie before
the licence's life (a record ending in the future is not named: it is sent again later).
``nonce`` echoes the request's, binding the receipt to one upload; ``inferences`` is the
licence's total stored usage after this upload. A receipt of an older authority names
its records as ``[period_start, period_end]`` alone: such an entry confirms no counts.

Licence status (``SVCS1``), the answer to ``GET /v1/revocations/status`` and part of the
activation answer: the revocation list's word on one licence, in O(1) bytes whatever
the list holds (like OCSP stapling)::

    {"typ": "svc-license-status", "iss": str, "lic": licence_id, "dev": device_id,
     "revoked": bool, "revoked_at": T or 0, "seq": S, "iat": T,
     "keys_revoked": [kid, ...], "kid": signing key,
     "lease_end": T, "suspended": bool}

``lease_end`` and ``suspended`` are additions (issue 42), absent from the statuses of an
older authority and of a licence without a lease or hold (absent = 0 and false, the
behaviour before them). ``lease_end`` is the Unix second after which the device refuses
analytics (``LEASE_EXPIRED``) unless it holds a newer status: the check-in lease of
a licence whose SKU, batch or own ``max_offline_days`` is set. ``suspended`` says an
operator holds the licence (its own hold, its batch key's or its customer's):
analytics refuse with ``SUSPENDED`` until a newer status says otherwise (reversible,
unlike a revocation).

``seq`` is the list's sequence number the status was read at: ``revoked`` is true when
a revocation numbered at most ``seq`` names the licence (pruned entries included), and
``keys_revoked`` lists every signing key revoked as of ``seq``. A device keeps the
newest status of each licence it holds and decides from it, verified again at every
load; only a newer status (a later ``seq`` or a later signing time) replaces it, and
never one that does not say revoked a status that does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature

from . import jsonsafe
from .errors import BadSignature, Code, LicenseError
from .token import b64url_decode, reject_duplicate_keys, resolve_key

LIST_PREFIX = "SVCR1"
RECEIPT_PREFIX = "SVCU1"
STATUS_PREFIX = "SVCS1"
LIST_TYPE = "svc-revocations"
RECEIPT_TYPE = "svc-usage-receipt"
STATUS_TYPE = "svc-license-status"
# A page holds at most this many entries, so it stays well under the device's read limit.
LIST_PAGE_ENTRIES = 10_000
MAX_DOCUMENT_CHARS = 1 << 20
NONCE_MAX_CHARS = 64


def status_etag(text: str) -> str:
    """The HTTP entity tag of a signed status ``text``: a hash of its bytes, so a device
    that holds a status names it in ``If-None-Match`` without having stored the header,
    and every cache between it and the authority keys the same document the same way."""
    return '"' + hashlib.sha256(text.encode()).hexdigest()[:32] + '"'


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def verify_document(
    prefix: str, text: Any, public_key: Any, *, use: str = "online"
) -> dict[str, Any]:
    """The payload of a ``prefix`` document whose signature verifies under
    ``public_key`` (a key, or a keyring that finds the online key the payload's ``kid``
    names); :class:`BadSignature` for anything unsigned, tampered, of another kind or
    signed by another key. The signature is checked before the JSON is interpreted."""
    if not isinstance(text, str) or len(text) > MAX_DOCUMENT_CHARS:
        raise BadSignature(f"not a signed {prefix} document")
    parts = text.split(".")
    if len(parts) != 3 or parts[0] != prefix:
        raise BadSignature(f"not a signed {prefix} document")
    try:
        payload, signature = b64url_decode(parts[1]), b64url_decode(parts[2])
    except ValueError:
        raise BadSignature(f"{prefix} document is not canonical base64url") from None
    key = resolve_key(public_key, payload, use=use)
    try:
        key.verify(signature, f"{parts[0]}.{parts[1]}".encode("ascii"))
    except InvalidSignature:
        raise BadSignature(f"{prefix} document signature does not verify") from None
    try:
        value = jsonsafe.loads(
            payload,
            max_bytes=MAX_DOCUMENT_CHARS,
            what=f"{prefix} document",
            object_pairs_hook=reject_duplicate_keys,
        )
    except ValueError as exc:  # JSONRefused, or a duplicate key
        raise BadSignature(f"signed but refused: {exc}") from None
    if not isinstance(value, dict):
        raise BadSignature(f"{prefix} document is not a JSON object")
    return value


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _malformed(what: str) -> LicenseError:
    return LicenseError(f"signed {what} has an unexpected shape", code=Code.BAD_RESPONSE)


@dataclass(frozen=True)
class RevocationPage:
    start: int  # "from": the page continues a list held at this sequence number
    seq: int
    issued_at: int
    more: bool
    revoked: tuple[tuple[str, int], ...]
    revoked_keys: frozenset[str]  # every signing key revoked as of ``seq``
    text: str  # the signed document as received, kept as proof of the signing time


def parse_revocation_page(text: Any, public_key: Any) -> RevocationPage:
    """A verified revocation-list page; BadSignature or BAD_RESPONSE otherwise."""
    doc = verify_document(LIST_PREFIX, text, public_key)
    revoked = doc.get("revoked")
    if not (
        doc.get("typ") == LIST_TYPE
        and _is_count(doc.get("from"))
        and _is_count(doc.get("seq"))
        and doc["from"] <= doc["seq"]
        and _is_count(doc.get("iat"))
        and type(doc.get("more")) is bool
        and isinstance(revoked, list)
        and all(
            isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and _is_count(e[1])
            for e in revoked
        )
        and isinstance(doc.get("keys_revoked", []), list)
        and all(isinstance(kid, str) for kid in doc.get("keys_revoked", []))
    ):
        raise _malformed("revocation list")
    return RevocationPage(
        start=doc["from"],
        seq=doc["seq"],
        issued_at=doc["iat"],
        more=doc["more"],
        revoked=tuple((e[0], e[1]) for e in revoked),
        revoked_keys=frozenset(doc.get("keys_revoked", [])),
        text=text,
    )


Counts = tuple[int, int, int, int]  # inferences, frames, stream_seconds, events


@dataclass(frozen=True)
class UsageReceipt:
    device_id: str
    license_id: str
    nonce: str
    issued_at: int
    # (period_start, period_end) -> the counts the authority holds, or None when an
    # older authority named the period alone (it confirms no counts).
    records: dict[tuple[int, int], Counts | None]
    refused: frozenset[tuple[int, int]]
    inferences: int
    text: str

    def holds(self, key: tuple[int, int], counts: Counts) -> bool:
        """Whether the authority holds exactly ``counts`` for the period ``key``."""
        return self.records.get(key) == counts


def _is_entry(entry: Any, sizes: tuple[int, ...]) -> bool:
    return isinstance(entry, list) and len(entry) in sizes and all(map(_is_count, entry))


def parse_receipt(text: Any, public_key: Any) -> UsageReceipt:
    """A verified usage receipt; BadSignature or BAD_RESPONSE otherwise."""
    doc = verify_document(RECEIPT_PREFIX, text, public_key)
    records = doc.get("records")
    refused = doc.get("refused", [])
    if not (
        doc.get("typ") == RECEIPT_TYPE
        and isinstance(doc.get("dev"), str)
        and isinstance(doc.get("lic"), str)
        and isinstance(doc.get("nonce"), str)
        and _is_count(doc.get("iat"))
        and _is_count(doc.get("inferences"))
        and isinstance(records, list)
        and all(_is_entry(entry, (2, 6)) for entry in records)
        and isinstance(refused, list)
        and all(_is_entry(entry, (2,)) for entry in refused)
    ):
        raise _malformed("usage receipt")
    held: dict[tuple[int, int], Counts | None] = {}
    for entry in records:
        held[entry[0], entry[1]] = tuple(entry[2:]) if len(entry) == 6 else None  # type: ignore[assignment]
    return UsageReceipt(
        device_id=doc["dev"],
        license_id=doc["lic"],
        nonce=doc["nonce"],
        issued_at=doc["iat"],
        records=held,
        refused=frozenset((k[0], k[1]) for k in refused),
        inferences=doc["inferences"],
        text=text,
    )


@dataclass(frozen=True)
class LicenseStatus:
    license_id: str
    device_id: str
    revoked: bool
    revoked_at: int  # 0 when not revoked
    seq: int
    issued_at: int
    revoked_keys: frozenset[str]
    text: str
    lease_end: int = 0  # 0: no check-in lease
    suspended: bool = False

    def newer_than(self, other: LicenseStatus | None) -> bool:
        """Whether this status supersedes ``other``: a later list position or a later
        signing time (a replayed status is older on both; a list rebuilt after a
        restore starts its numbers again but signs later). A revocation is never
        superseded by a status that does not say revoked."""
        if other is None:
            return True
        if other.revoked and not self.revoked:
            return False
        return self.seq > other.seq or self.issued_at > other.issued_at


def parse_status(text: Any, public_key: Any) -> LicenseStatus:
    """A verified licence status; BadSignature or BAD_RESPONSE otherwise."""
    doc = verify_document(STATUS_PREFIX, text, public_key)
    keys_revoked = doc.get("keys_revoked")
    if not (
        doc.get("typ") == STATUS_TYPE
        and isinstance(doc.get("lic"), str)
        and isinstance(doc.get("dev"), str)
        and type(doc.get("revoked")) is bool
        and _is_count(doc.get("revoked_at"))
        and doc["revoked"] == bool(doc["revoked_at"])
        and _is_count(doc.get("seq"))
        and _is_count(doc.get("iat"))
        and isinstance(keys_revoked, list)
        and all(isinstance(kid, str) for kid in keys_revoked)
        and _is_count(doc.get("lease_end", 0))
        and type(doc.get("suspended", False)) is bool
    ):
        raise _malformed("licence status")
    return LicenseStatus(
        license_id=doc["lic"],
        device_id=doc["dev"],
        revoked=doc["revoked"],
        revoked_at=doc["revoked_at"],
        seq=doc["seq"],
        issued_at=doc["iat"],
        revoked_keys=frozenset(keys_revoked),
        text=text,
        lease_end=doc.get("lease_end", 0),
        suspended=doc.get("suspended", False),
    )
