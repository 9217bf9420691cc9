"""The offline operator tools: mint an air-gapped licence, inspect a token or licence
file, create a signing key. Files only: no service, no database, no Django.

Tokens go through the one SVC1 codec (``devices.token``), keys through the one key-file
module (``svccore.keyfile``, also behind ``manage.py keygen``), claims through the one
builder (``svccore.claims``, SKU modules and caps from a catalogue file), licence files
through ``svccore.licensefile``, and certificates through ``svcctl.certs``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from devices import keys as devkeys
from devices import term
from devices import token as codec
from devices.errors import BadSignature, Code
from svccore import authority, licensefile
from svccore import claims as claimbuilder
from svccore.claims import DEFAULT_ISSUER
from svccore.keyfile import KeyFileError, write_private_key
from svcctl import OfflineError, files
from svcctl.certs import describe, read_signing_key


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """The shared modules' refusals as this tool's OfflineError (``manage.py mint``
    catches that one too)."""
    try:
        yield
    except (claimbuilder.ClaimsError, licensefile.LicenseFileError, KeyFileError) as exc:
        raise OfflineError(str(exc)) from None


# --- mint ------------------------------------------------------------------------------


def catalogue_entry(sku: str, catalogue_file: Path | str | None = None) -> dict[str, Any]:
    with _refusals():
        return claimbuilder.catalogue_entry(sku, catalogue_file)


def load_signing_key(path: Path | str):
    return read_signing_key(path)


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
    certificates: Sequence[str] = (),
) -> tuple[str, dict[str, Any]]:
    """Sign an air-gapped licence with the key in ``key_file`` and write it to ``out``
    (mode 600: the token is the camera's credential): the token, then ``certificates``
    (already checked to endorse this key, :func:`svcctl.certs.certificates_for_key`), one
    per line. Returns the token and its claims as signed (with ``kid``)."""
    key = load_signing_key(key_file)
    with _refusals():
        claims = claimbuilder.mint_claims(
            entry=entry,
            customer=customer,
            device_id=device_id,
            days=days,
            issuer=issuer,
            max_streams=max_streams,
            api_quota=api_quota,
            now=now,
        )
        claims = authority.with_kid(claims, key)  # as signed: naming the key
        token = authority.encode_token(claims, key)
    text = licensefile.LicenseFile(token, tuple(certificates)).text()
    files.write_secret(out, text, option="--out", force=force)
    return token, claims


# --- inspect ---------------------------------------------------------------------------


def read_license(path: Path | str) -> licensefile.LicenseFile:
    """A token file or a licence file (token, then certificate lines)."""
    with _refusals():
        return licensefile.read(path)


def parse_license(text: str, *, source: str = "stdin") -> licensefile.LicenseFile:
    with _refusals():
        return licensefile.parse(text, source=source)


# What inspect calls each state of devices.license_state (spec §3, nbf to the second).
STATE_WORDS = {
    term.NOT_YET_VALID: "not yet valid",
    term.ACTIVE: "active",
    term.GRACE: "grace",
    term.EXPIRED: "expired",
    term.REVOKED: "revoked",
}


def _certificate_report(text: str, roots: dict[str, Any]) -> dict[str, Any]:
    """One certificate line of a licence file: what it says and, with roots, whether a
    device trusting them would take it."""
    try:
        entry: dict[str, Any] = describe(text).as_dict()
    except OfflineError as exc:
        return {"readable": False, "verified": False, "error": str(exc), "code": ""}
    entry.update(readable=True, verified=None, error="", code="")
    if roots:
        try:
            devkeys.parse_certificate(text, roots)
            entry["verified"] = True
        except devkeys.KeyNotTrusted as exc:
            entry.update(verified=False, error=str(exc), code=exc.code)
    return entry


def _chain(
    claims: dict[str, Any], roots: dict[str, Any], certificates: Sequence[str]
) -> tuple[dict[str, Any], Any]:
    """Whether the key the token names chains to ``roots`` through the certificates the
    file carries, as a device with those roots compiled in decides it; and that key."""
    keyring = devkeys.Keyring(roots=roots.values())
    refused: dict[Any, devkeys.KeyNotTrusted] = {}
    for text in certificates:
        try:
            keyring.add(text)
        except devkeys.KeyNotTrusted as exc:
            refused[devkeys.unverified_payload(text).get("kid")] = exc
    result: dict[str, Any] = {"roots": sorted(roots), "trusted": False, "root": None, "use": None}
    try:
        key = keyring.resolve(claims)
    except devkeys.KeyNotTrusted as exc:
        if exc.code == Code.KEY_UNKNOWN and claims.get("kid") in refused:
            exc = refused[claims["kid"]]  # the file has its certificate, but it was refused
        return {**result, "code": exc.code, "error": str(exc)}, None
    cert = keyring.certificates[claims["kid"]]
    return {
        **result,
        "trusted": True,
        "root": cert.root,
        "use": cert.use,
        "code": "",
        "error": "",
    }, key


def inspect(
    token: str,
    public_key: Any = None,
    *,
    now: int | None = None,
    roots: Sequence[Any] = (),
    certificates: Sequence[str] = (),
) -> dict[str, Any]:
    """What a token says, whether it verifies, and its state at ``now``.

    The signature is checked with ``public_key`` when given, and with ``roots`` the
    token's ``kid`` is followed through ``certificates`` (the licence file's) to a root,
    then the signature is checked with the certified key. Raises :class:`OfflineError`
    only when the token cannot be decoded at all, or when neither key nor root is given.
    """
    if public_key is None and not roots:
        raise OfflineError("give the key to verify with: --pubkey, --root, or both")
    now = int(time.time()) if now is None else now
    try:
        claims = codec.decode_unverified(token)
    except BadSignature as exc:
        raise OfflineError(f"not a licence token: {exc}") from None
    root_keys = {codec.key_id(key): codec.load_public_key(key) for key in roots}
    chain, chained_key = _chain(claims, root_keys, certificates) if root_keys else (None, None)
    checked_with = public_key if public_key is not None else chained_key
    if checked_with is None:
        verified, problem = False, f"signing key not trusted: {chain['error']}"
    else:
        try:
            codec.verify_token(token, checked_with)
            verified, problem = True, ""
        except BadSignature as exc:
            verified, problem = False, str(exc)
    grace_end = term.grace_end(claims)
    return {
        "claims": claims,
        "kid": claims.get("kid"),
        "signature_valid": verified,
        "signature_error": problem,
        "key_fingerprint": codec.key_fingerprint(checked_with) if checked_with else "",
        "chain": chain,
        "certificates": [_certificate_report(text, root_keys) for text in certificates],
        "state": STATE_WORDS[term.license_state(claims, now)],
        "at": now,
        "not_before": claims["nbf"],
        "expires_at": claims["exp"],
        "grace_until": 0 if grace_end == math.inf else grace_end,
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
        try:
            licensefile.write_text(public_out, pem, force=True)  # mode 644, whatever the umask
        except licensefile.LicenseFileError as exc:
            raise OfflineError(str(exc)) from None
    return {
        "private_key": str(path),
        "public_key_file": str(public_out) if public_out else "",
        "public_key": codec.public_key_b64url(public),
        "public_key_pem": pem,
        "fingerprint": codec.key_fingerprint(public),
        "kid": codec.key_id(public),
    }
