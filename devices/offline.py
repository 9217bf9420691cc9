"""Air-gapped file exchange (issue 44): the files a camera that never reaches the service
carries to it, on a USB stick or as text on a phone, and the answers it carries back.

Three files go from the device to the service, sealed (``<PREFIX>.<b64url(payload)>.
<b64url(check)>``, ``check`` the first 12 bytes of the SHA-256 of the first two parts):
the seal makes a truncated or edited file a coded refusal; it is no signature, as a
device holds no key. What a request may do is decided by what it carries: a batch key
(activation request) or the unit licence (usage export), verified by the service as on
the online path.

Activation request (``SVCQ1``, ``python -m devices offline-request``)::

    {"typ": "svc-offline-request", "bat": batch key, "dev": device_id,
     "src": fingerprint source, "weak": bool, "nonce": str, "ver": module version,
     "iat": device clock}

Usage export (``SVCE1``, ``python -m devices usage-export``): the closed periods of the
spool with the licence as its authentication::

    {"typ": "svc-usage-export", "tok": unit token, "dev": device_id, "lic": licence_id,
     "nonce": str, "ver": module version, "iat": device clock,
     "records": [[period_start, period_end, inferences, frames, stream_seconds, events], ...]}

The service answers either with one signed document (``SVCA1``, signed by the online key
like a usage receipt), the answer file (``.svcresp`` for an activation, ``.svcrcpt``
for usage)::

    {"typ": "svc-offline-answer", "kind": "activation" | "usage", "iss": str,
     "dev": device_id, "lic": licence_id, "nonce": the request's, "iat": T,
     "status": SVCS1 licence status, "certificates": [SVCK1, ...], "kid": signing key,
     "token": unit token, "reactivated": bool,        (activation)
     "receipt": SVCU1 usage receipt or absent}        (usage: absent when revoked)

Each text is one line of base64url and dots (a QR code in byte mode holds it); white
space inside is ignored when read, so a text form wrapped at any width reads back.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import jsonsafe
from ._version import __version__
from .documents import NONCE_MAX_CHARS, canonical_json, verify_document
from .errors import BadSignature, Code, LicenseError
from .keys import unverified_payload
from .state import read_json, write_json
from .token import MAX_TOKEN_CHARS, b64url_decode, b64url_encode, reject_duplicate_keys

REQUEST_PREFIX = "SVCQ1"
EXPORT_PREFIX = "SVCE1"
ANSWER_PREFIX = "SVCA1"
REQUEST_TYPE = "svc-offline-request"
EXPORT_TYPE = "svc-usage-export"
ANSWER_TYPE = "svc-offline-answer"
ACTIVATION = "activation"
USAGE = "usage"
MAX_REQUEST_CHARS = 16 << 10
MAX_FILE_CHARS = 1 << 20
CHECK_BYTES = 12
# Requests and exports whose answer is awaited (state_dir/offline.json): an answer must
# name one of them, and installing it ends the wait (a replayed answer is refused).
OFFLINE_FILE = "offline.json"
MAX_OUTSTANDING = 16
_NONCE = re.compile(rf"[A-Za-z0-9_-]{{1,{NONCE_MAX_CHARS}}}")
_SPACE = re.compile(r"\s+")


def _damaged(what: str, why: str) -> LicenseError:
    return LicenseError(f"{what} is damaged or not one: {why}", code=Code.BAD_REQUEST)


def seal(prefix: str, payload: dict[str, Any]) -> str:
    """``payload`` as a sealed one-line text (see the module docstring)."""
    body = f"{prefix}.{b64url_encode(canonical_json(payload))}"
    check = hashlib.sha256(body.encode("ascii")).digest()[:CHECK_BYTES]
    return f"{body}.{b64url_encode(check)}"


def unseal(prefix: str, text: Any, *, what: str, max_chars: int = MAX_FILE_CHARS) -> dict:
    """The payload of a sealed ``prefix`` text; ``BAD_REQUEST`` for anything truncated,
    edited, of another kind or too large (bounded before it is parsed)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            raise _damaged(what, "not ASCII text") from None
    if not isinstance(text, str):
        raise _damaged(what, f"not text but {type(text).__name__}")
    if len(text) > max_chars + 4096:
        raise _damaged(what, f"larger than {max_chars} characters")
    text = _SPACE.sub("", text)
    parts = text.split(".")
    if len(parts) != 3 or parts[0] != prefix:
        raise _damaged(what, f"it does not start with {prefix}. or lacks a part (truncated?)")
    body = f"{parts[0]}.{parts[1]}"
    check = b64url_encode(hashlib.sha256(body.encode("ascii")).digest()[:CHECK_BYTES])
    if not hmac.compare_digest(check, parts[2]):
        raise _damaged(what, "its check does not match (truncated or edited)")
    try:
        value = jsonsafe.loads(
            b64url_decode(parts[1]),
            max_bytes=max_chars,
            what=what,
            object_pairs_hook=reject_duplicate_keys,
        )
    except ValueError as exc:
        raise _damaged(what, str(exc)) from None
    if not isinstance(value, dict):
        raise _damaged(what, "not a JSON object")
    return value


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _nonce_ok(value: Any) -> bool:
    return isinstance(value, str) and bool(_NONCE.fullmatch(value))


# --- device -> service ------------------------------------------------------------------


@dataclass(frozen=True)
class OfflineRequest:
    batch_token: str
    device_id: str
    fingerprint_source: str
    weak_binding: bool
    nonce: str
    sdk_version: str
    text: str


def request_text(
    *, batch_token: str, device_id: str, source: str, weak: bool, nonce: str, now: int
) -> str:
    payload = {
        "typ": REQUEST_TYPE,
        "bat": batch_token,
        "dev": device_id,
        "src": source,
        "weak": weak,
        "nonce": nonce,
        "ver": __version__,
        "iat": now,
    }
    return seal(REQUEST_PREFIX, payload)


def parse_request(text: Any) -> OfflineRequest:
    """An activation request as the service reads it; ``BAD_REQUEST`` otherwise."""
    doc = unseal(REQUEST_PREFIX, text, what="activation request", max_chars=MAX_REQUEST_CHARS)
    if not (
        doc.get("typ") == REQUEST_TYPE
        and isinstance(doc.get("bat"), str)
        and 0 < len(doc["bat"]) <= MAX_TOKEN_CHARS
        and isinstance(doc.get("dev"), str)
        and isinstance(doc.get("src"), str)
        and len(doc["src"]) <= 32
        and type(doc.get("weak")) is bool
        and _nonce_ok(doc.get("nonce"))
        and isinstance(doc.get("ver"), str)
        and len(doc["ver"]) <= 32
    ):
        raise _damaged("activation request", "unexpected fields")
    return OfflineRequest(
        batch_token=doc["bat"],
        device_id=doc["dev"],
        fingerprint_source=doc["src"],
        weak_binding=doc["weak"],
        nonce=doc["nonce"],
        sdk_version=doc["ver"],
        text=_SPACE.sub("", text if isinstance(text, str) else text.decode("ascii")),
    )


RECORD_FIELDS = ("period_start", "period_end", "inferences", "frames", "stream_seconds", "events")


@dataclass(frozen=True)
class UsageExport:
    token: str
    device_id: str
    license_id: str
    nonce: str
    records: list[dict[str, int]]


def export_text(
    *, token: str, device_id: str, license_id: str, nonce: str, records: list, now: int
) -> str:
    payload = {
        "typ": EXPORT_TYPE,
        "tok": token,
        "dev": device_id,
        "lic": license_id,
        "nonce": nonce,
        "ver": __version__,
        "iat": now,
        "records": [[int(record[name]) for name in RECORD_FIELDS] for record in records],
    }
    return seal(EXPORT_PREFIX, payload)


def parse_export(text: Any) -> UsageExport:
    """A usage export as the service reads it; ``BAD_REQUEST`` otherwise. The records
    are checked by the service's own rules (those of ``POST /v1/usage``)."""
    doc = unseal(EXPORT_PREFIX, text, what="usage export")
    records = doc.get("records")
    if not (
        doc.get("typ") == EXPORT_TYPE
        and isinstance(doc.get("tok"), str)
        and isinstance(doc.get("dev"), str)
        and isinstance(doc.get("lic"), str)
        and _nonce_ok(doc.get("nonce"))
        and isinstance(records, list)
        and all(isinstance(r, list) and len(r) == len(RECORD_FIELDS) for r in records)
    ):
        raise _damaged("usage export", "unexpected fields")
    return UsageExport(
        token=doc["tok"],
        device_id=doc["dev"],
        license_id=doc["lic"],
        nonce=doc["nonce"],
        records=[dict(zip(RECORD_FIELDS, r, strict=True)) for r in records],
    )


# --- service -> device ------------------------------------------------------------------


@dataclass(frozen=True)
class OfflineAnswer:
    kind: str
    device_id: str
    license_id: str
    nonce: str
    issued_at: int
    status: str
    certificates: list[str]
    token: str = ""
    reactivated: bool = False
    receipt: str = ""


def answer_certificates(text: Any) -> list[str]:
    """The certificates an answer carries, read before it is verified (they are verified
    each against the roots; they only say which key to check the answer with)."""
    found = unverified_payload(_SPACE.sub("", text) if isinstance(text, str) else text)
    certificates = found.get("certificates")
    if isinstance(certificates, list) and all(isinstance(c, str) for c in certificates):
        return certificates
    return []


def parse_answer(text: Any, keyring: Any) -> OfflineAnswer:
    """A verified answer file: :class:`BadSignature` for anything unsigned, truncated,
    edited or signed by an untrusted key, ``BAD_RESPONSE`` for a signed one of an
    unexpected shape."""
    if isinstance(text, str):
        text = _SPACE.sub("", text)
    doc = verify_document(ANSWER_PREFIX, text, keyring)
    certificates = doc.get("certificates", [])
    kind = doc.get("kind")
    if not (
        doc.get("typ") == ANSWER_TYPE
        and kind in (ACTIVATION, USAGE)
        and isinstance(doc.get("dev"), str)
        and isinstance(doc.get("lic"), str)
        and _nonce_ok(doc.get("nonce"))
        and _is_count(doc.get("iat"))
        and isinstance(doc.get("status"), str)
        and isinstance(certificates, list)
        and all(isinstance(c, str) for c in certificates)
        and (kind != ACTIVATION or isinstance(doc.get("token"), str))
        and type(doc.get("reactivated", False)) is bool
        and isinstance(doc.get("receipt", ""), str)
    ):
        raise LicenseError("signed answer file has an unexpected shape", code=Code.BAD_RESPONSE)
    return OfflineAnswer(
        kind=kind,
        device_id=doc["dev"],
        license_id=doc["lic"],
        nonce=doc["nonce"],
        issued_at=doc["iat"],
        status=doc["status"],
        certificates=certificates,
        token=doc.get("token", ""),
        reactivated=doc.get("reactivated", False),
        receipt=doc.get("receipt", ""),
    )


# --- what the device awaits -------------------------------------------------------------


def new_nonce() -> str:
    import secrets  # on first use, as the networking modules: `import devices` loads neither

    return secrets.token_urlsafe(16)


def outstanding(directory: Path) -> list[dict[str, Any]]:
    """The requests and exports of this state directory whose answer is awaited."""
    try:
        data = read_json(directory / OFFLINE_FILE, {})
    except LicenseError:
        return []  # a damaged file awaits nothing: write a new request
    entries = data.get("awaiting") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return []
    kinds = (ACTIVATION, USAGE)
    return [
        entry
        for entry in entries
        if isinstance(entry, dict) and _nonce_ok(entry.get("nonce")) and entry.get("kind") in kinds
    ]


def await_answer(directory: Path, *, kind: str, nonce: str, license_id: str = "") -> None:
    entries = outstanding(directory)
    entries.append({"kind": kind, "nonce": nonce, "lic": license_id})
    write_json(directory / OFFLINE_FILE, {"format": 1, "awaiting": entries[-MAX_OUTSTANDING:]})


def answered(directory: Path, nonce: str) -> None:
    entries = [e for e in outstanding(directory) if e["nonce"] != nonce]
    write_json(directory / OFFLINE_FILE, {"format": 1, "awaiting": entries})


def awaited(directory: Path, answer: OfflineAnswer) -> bool:
    return any(
        e["nonce"] == answer.nonce and e["kind"] == answer.kind for e in outstanding(directory)
    )


def not_awaited(answer: OfflineAnswer) -> LicenseError:
    return LicenseError(
        f"this {answer.kind} answer (nonce {answer.nonce}) answers no request or export of "
        "this device that awaits one: it was installed already, or it answers another "
        "device's or state directory's file; nothing was changed",
        code=Code.RECEIPT_INVALID,
    )


def read_file(path: str | Path, what: str) -> str:
    """The text of a file the technician carried; ``BAD_ARGUMENT`` when unreadable."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_CHARS + 4097)
    except OSError as exc:
        raise LicenseError(
            f"cannot read the {what} {path}: {exc.strerror or exc}", code=Code.BAD_ARGUMENT
        ) from None
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise BadSignature(f"{path} is not a {what}: not ASCII text") from None
