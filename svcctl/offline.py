"""The offline operator tools: mint an air-gapped licence, inspect a token, create a
signing key. Files only: no service, no database, no Django.

Tokens go through the one SVC1 codec (``devices.token``), keys through the one key-file
module (``svccore.keyfile``, also behind ``manage.py keygen``), and SKU modules and
caps come from a catalogue file (``svccore.catalogue``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from devices import token as codec
from devices.errors import BadSignature
from svccore import catalogue, ids
from svccore.keyfile import KeyFileError, read_private_key, write_private_key

DAY = 86400
DEFAULT_ISSUER = "svc-licensing"


class OfflineError(Exception):
    """A mint, inspect or keygen that cannot be done; the message says why."""


# --- mint ------------------------------------------------------------------------------


def catalogue_entry(sku: str, catalogue_file: Path | str | None = None) -> dict[str, Any]:
    path = catalogue_file or catalogue.SEED_FILE
    try:
        entries = catalogue.load_entries(path)
    except FileNotFoundError:
        raise OfflineError(f"catalogue file {path} does not exist") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise OfflineError(f"catalogue file {path} is not a catalogue: {exc}") from None
    for entry in entries:
        if entry["sku"] == sku:
            return entry
    known = ", ".join(e["sku"] for e in entries)
    raise OfflineError(f"unknown SKU {sku!r}; the catalogue {path} has {known}")


def customer_id(value: str) -> str:
    chosen = value.strip().upper()
    return chosen if chosen.startswith("CUST-") else f"CUST-{chosen}"


def mint_claims(
    *,
    entry: dict[str, Any],
    customer: str,
    device_id: str,
    days: int | None = None,
    issuer: str = DEFAULT_ISSUER,
    max_streams: int | None = None,
    api_quota: int | None = None,
    now: int | None = None,
) -> dict[str, Any]:
    """Claims of an air-gapped licence: bound to ``device_id``, ``act`` = ``optional``,
    entitlements and caps from the catalogue ``entry``; ``days`` 0 is perpetual."""
    if not device_id or device_id == "*" or len(device_id) > 128:
        raise OfflineError(
            "an air-gapped licence must be bound to one device: give its fingerprint "
            "(1-128 characters, not '*')"
        )
    term = entry["term_days"] if days is None else days
    for name, value in (("days", term), ("quota", api_quota), ("streams", max_streams)):
        if value is not None and value < (1 if name == "streams" else 0):
            raise OfflineError(f"{name} must be >= {1 if name == 'streams' else 0}, not {value}")
    issued = int(time.time()) if now is None else now
    return {
        "lic": ids.license_id(),
        "sku": entry["sku"],
        "sub": customer_id(customer),
        "iss": issuer,
        "dev": device_id,
        "ent": catalogue.entitlements(entry["modules"]),
        "lim": {
            "max_streams": entry["max_streams"] if max_streams is None else max_streams,
            "max_fps": entry["max_fps"],
            "api_calls": entry["api_calls"] if api_quota is None else api_quota,
        },
        "iat": issued,
        "nbf": issued,
        "exp": 0 if term == 0 else issued + term * DAY,
        "grace_days": entry["grace_days"],
        "act": "optional",
    }


def load_signing_key(path: Path | str):
    try:
        return read_private_key(path)
    except KeyFileError as exc:
        raise OfflineError(str(exc)) from None


def write_token(path: Path | str, token: str, *, force: bool = False) -> None:
    """Write a token file; an existing file is replaced only with ``force``."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        raise OfflineError(f"{path} already exists; pass --force to replace it") from None
    except OSError as exc:
        raise OfflineError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(token + "\n")


def mint(
    *,
    entry: dict[str, Any],
    customer: str,
    device_id: str,
    key_file: Path | str,
    out: Path | str,
    days: int | None = None,
    issuer: str = DEFAULT_ISSUER,
    max_streams: int | None = None,
    api_quota: int | None = None,
    force: bool = False,
    now: int | None = None,
) -> tuple[str, dict[str, Any]]:
    """Sign an air-gapped licence with the key in ``key_file`` and write it to ``out``."""
    key = load_signing_key(key_file)
    claims = mint_claims(
        entry=entry,
        customer=customer,
        device_id=device_id,
        days=days,
        issuer=issuer,
        max_streams=max_streams,
        api_quota=api_quota,
        now=now,
    )
    token = codec.encode_token(claims, key)
    write_token(out, token, force=force)
    return token, claims


# --- inspect ---------------------------------------------------------------------------


def read_token(path: Path | str) -> str:
    try:
        text = Path(path).read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise OfflineError(f"token file {path} does not exist") from None
    except (UnicodeDecodeError, OSError) as exc:
        raise OfflineError(f"cannot read token file {path}: {exc}") from None
    return text


def read_public_key(value: str):
    """A public key from a file (PEM or base64url), or given inline as base64url."""
    path = Path(value)
    if path.is_file():
        text = path.read_text(encoding="ascii", errors="replace")
        if "PRIVATE KEY" in text:
            raise OfflineError(f"{value} is a private key; give the public key (keygen prints it)")
    else:
        text = value
    try:
        return codec.load_public_key(text)
    except ValueError as exc:
        if not path.exists() and not text.startswith("-----"):
            raise OfflineError(f"public key file {value} does not exist") from None
        raise OfflineError(
            f"{value} is not an Ed25519 public key (PEM or base64url): {exc}"
        ) from None


def licence_state(claims: dict[str, Any], now: int) -> str:
    """Spec §3 as a device evaluates it: not yet valid, active, grace or expired."""
    if now < claims["nbf"]:
        return "not yet valid"
    if claims["exp"] == 0 or now <= claims["exp"]:
        return "active"
    if now <= claims["exp"] + claims["grace_days"] * DAY:
        return "grace"
    return "expired"


def inspect(token: str, public_key: Any, *, now: int | None = None) -> dict[str, Any]:
    """What a token says, whether ``public_key`` signed it, and its state at ``now``.
    Raises :class:`OfflineError` only when the token cannot be decoded at all."""
    now = int(time.time()) if now is None else now
    try:
        claims = codec.decode_unverified(token)
    except BadSignature as exc:
        raise OfflineError(f"not a licence token: {exc}") from None
    try:
        codec.verify_token(token, public_key)
        verified, problem = True, ""
    except BadSignature as exc:
        verified, problem = False, str(exc)
    grace_until = claims["exp"] + claims["grace_days"] * DAY if claims["exp"] else 0
    return {
        "claims": claims,
        "signature_valid": verified,
        "signature_error": problem,
        "key_fingerprint": codec.key_fingerprint(public_key),
        "state": licence_state(claims, now),
        "at": now,
        "not_before": claims["nbf"],
        "expires_at": claims["exp"],
        "grace_until": grace_until,
        "kind": "batch key" if claims["dev"] == "*" else "device-bound licence",
    }


# --- keygen ----------------------------------------------------------------------------


def keygen(
    path: Path | str, *, force: bool = False, public_out: Path | str | None = None
) -> dict[str, str]:
    """Create a signing key (mode 600, never silently overwritten) and optionally a
    public key file for ``inspect --pubkey`` and devices' ``license_pubkey``."""
    if public_out is not None and Path(public_out).exists() and not force:
        raise OfflineError(f"{public_out} already exists; pass --force to replace it")
    try:
        key = write_private_key(path, force=force)
    except KeyFileError as exc:
        raise OfflineError(str(exc)) from None
    public = key.public_key()
    pem = codec.public_key_pem(public)
    if public_out is not None:
        Path(public_out).write_text(pem, encoding="ascii")
    return {
        "private_key": str(path),
        "public_key_file": str(public_out) if public_out else "",
        "public_key": codec.public_key_b64url(public),
        "public_key_pem": pem,
        "fingerprint": codec.key_fingerprint(public),
    }
