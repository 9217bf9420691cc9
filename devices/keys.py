"""Signing keys under a root of trust: key ids, key certificates and the keyring.

Firmware compiles in one or a few *root* public keys. The roots never sign licences;
they endorse the authority's signing keys (the server's, an HSM's, ``svcctl``'s air-gap
key) with a key certificate made offline, so a signing key can be replaced without a
firmware update and nothing on a device can add a key a root did not endorse.

Key id (``kid``): the first 16 hex digits of the key's fingerprint (lowercase hex SHA-256
of the raw 32-byte key, as ``/healthz`` shows). Every token and signed document names
the key that signed it in its payload (``kid``).

Key certificate (``SVCK1``), signed by a root::

    {"typ": "svc-key-cert", "iss": str, "kid": kid, "key": b64url(raw public key),
     "root": kid of the root, "iat": T, "nbf": T, "exp": T or 0, "use": "online"|"offline"}

A signing key is trusted for a token or document whose ``iat`` lies in ``[nbf, exp]``
(``exp`` 0: no end), so tokens signed by a retired key keep verifying until they expire;
a key listed in the signed revocation list (``keys_revoked``) is trusted for nothing.
``use`` "online" keys sign licences, list pages and receipts; "offline" keys (air-gapped
minting) sign licences only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from . import jsonsafe, pubkey
from .errors import BadSignature, Code, InvalidArgument, LicenseError
from .token import b64url_decode, key_id, load_public_key

CERT_PREFIX = "SVCK1"
MAX_UNVERIFIED_BYTES = 1 << 20  # as devices.documents.MAX_DOCUMENT_CHARS
CERT_TYPE = "svc-key-cert"
ONLINE, OFFLINE = "online", "offline"
USES = (ONLINE, OFFLINE)


class KeyNotTrusted(BadSignature):
    """A signature by a key that does not chain to a trusted root at that time."""

    code = Code.KEY_NOT_TRUSTED


@dataclass(frozen=True)
class KeyCertificate:
    kid: str
    key: Ed25519PublicKey
    root: str
    not_before: int
    not_after: int  # 0: no end
    use: str
    text: str

    def covers(self, moment: int) -> bool:
        return self.not_before <= moment and (not self.not_after or moment <= self.not_after)


def split_license_file(text: str) -> tuple[str, list[str]]:
    """A licence file is the token on its first line, then the key certificates that
    let a device chain its signing key to a root (``svcctl mint`` writes them). Blank
    lines and surrounding white space are ignored; nothing is verified here."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return (lines[0] if lines else ""), lines[1:]


def unverified_payload(text: Any) -> dict[str, Any]:
    """The payload of a signed document or token, NOT checked: only to find which key to
    check it with. Anything unreadable is an empty dict (verification then fails)."""
    # Base64url is 4 characters per 3 bytes: no payload within the bound is longer.
    if not isinstance(text, str) or len(text) > 2 * MAX_UNVERIFIED_BYTES:
        return {}
    parts = text.split(".")
    if len(parts) != 3:
        return {}
    try:
        value = jsonsafe.loads(b64url_decode(parts[1]), max_bytes=MAX_UNVERIFIED_BYTES)
    except ValueError:  # not base64url, or JSONRefused
        return {}
    return value if isinstance(value, dict) else {}


def parse_certificate(text: Any, roots: dict[str, Ed25519PublicKey]) -> KeyCertificate:
    """A key certificate verified under one of ``roots`` (kid -> key); KeyNotTrusted
    with code KEY_UNTRUSTED_ROOT or KEY_CERT_INVALID otherwise."""
    from .documents import verify_document

    root = unverified_payload(text).get("root")
    if not isinstance(root, str) or root not in roots:
        raise KeyNotTrusted(
            f"key certificate is endorsed by root {root!r}, which this device does not trust",
            code=Code.KEY_UNTRUSTED_ROOT,
        )
    try:
        doc = verify_document(CERT_PREFIX, text, roots[root])
    except BadSignature as exc:
        raise KeyNotTrusted(f"key certificate refused: {exc}", code=Code.KEY_CERT_INVALID) from None
    try:
        key = load_public_key(doc.get("key"))
        valid = (
            doc.get("typ") == CERT_TYPE
            and doc.get("kid") == key_id(key)
            and doc.get("use") in USES
            and all(type(doc.get(n)) is int and doc[n] >= 0 for n in ("iat", "nbf", "exp"))
        )
    except ValueError:
        valid = False
    if not valid:
        raise KeyNotTrusted("key certificate has an unexpected shape", code=Code.KEY_CERT_INVALID)
    return KeyCertificate(
        kid=doc["kid"],
        key=key,
        root=root,
        not_before=doc["nbf"],
        not_after=doc["exp"],
        use=doc["use"],
        text=text,
    )


class Keyring:
    """The keys a verifier trusts: root keys and the certificates they endorse, or (in a
    build without a root, and for tests) one pinned key trusted directly."""

    def __init__(self, roots: Iterable[Any] = (), *, pinned: Any = None) -> None:
        self.roots = {key_id(key): load_public_key(key) for key in roots}
        self.pinned = load_public_key(pinned) if pinned is not None else None
        self._pinned_kid = key_id(self.pinned) if self.pinned is not None else None
        self.certificates: dict[str, KeyCertificate] = {}
        self.revoked: frozenset[str] = frozenset()

    def add(self, text: Any) -> KeyCertificate:
        """Verify a key certificate against the roots and keep it; KeyNotTrusted else."""
        cert = parse_certificate(text, self.roots)
        self.certificates[cert.kid] = cert
        return cert

    def add_valid(self, texts: Any) -> int:
        """Keep the certificates among ``texts`` that verify; the others are ignored (an
        unverifiable certificate can add no trust). Returns how many were new."""
        before = set(self.certificates)
        for text in texts if isinstance(texts, list) else []:
            try:
                self.add(text)
            except KeyNotTrusted:
                continue
        return len(set(self.certificates) - before)

    def key_for(self, kid: Any, *, at: int, use: str = OFFLINE) -> Ed25519PublicKey:
        """The public key ``kid`` names, if trusted for a signature made at ``at``; ``use``
        ONLINE accepts only online keys, OFFLINE accepts both kinds."""
        if self.pinned is not None and (not self.roots or kid in (None, self._pinned_kid)):
            return self.pinned  # a build without roots trusts its one key, whatever kid
        if not isinstance(kid, str) or not kid:
            raise KeyNotTrusted("signature names no signing key (kid)", code=Code.KEY_UNKNOWN)
        if kid in self.revoked:
            raise KeyNotTrusted(
                f"signing key {kid} is revoked (signed revocation list)", code=Code.KEY_REVOKED
            )
        cert = self.certificates.get(kid)
        if cert is None:
            raise KeyNotTrusted(
                f"no certificate for signing key {kid}: sync, or install the licence file "
                "with its certificate",
                code=Code.KEY_UNKNOWN,
            )
        if not cert.covers(at):
            raise KeyNotTrusted(
                f"signing key {kid} was certified for {cert.not_before}.."
                f"{cert.not_after or 'no end'}, not for a signature made at {at}",
                code=Code.KEY_EXPIRED,
            )
        if use == ONLINE and cert.use != ONLINE:
            raise KeyNotTrusted(
                f"signing key {kid} is an offline minting key; it signs licences only",
                code=Code.KEY_WRONG_USE,
            )
        return cert.key

    def resolve(self, payload: dict[str, Any], *, use: str = OFFLINE) -> Ed25519PublicKey:
        """The key to check a payload's signature with (its ``kid`` at its ``iat``)."""
        at = payload.get("iat")
        return self.key_for(payload.get("kid"), at=at if type(at) is int else -1, use=use)


def trust_anchors(public_key: Any, root_keys: Any) -> Keyring:
    """The keyring of an engine: the root keyring of the build (or ``root_keys``), or
    in a build without roots the one pinned ``public_key`` / compiled-in key."""
    compiled = getattr(pubkey, "ROOT_KEYS", ())  # a pubkey.py written before root keyrings
    try:
        roots = tuple(root_keys) if root_keys is not None else tuple(compiled)
    except TypeError:
        raise InvalidArgument("root_keys must be a list of public keys") from None
    if roots and public_key is not None:
        raise LicenseError(
            "this build trusts its root keyring; license_pubkey cannot add a key (signing "
            "keys are certified by the root and their certificates arrive with activation "
            "and sync)",
            code=Code.BAD_PUBLIC_KEY,
        )
    pinned = public_key if public_key is not None else pubkey.PUBLIC_KEY
    if not roots and pinned is None:
        raise LicenseError(
            "no licence public key: this build has no root keyring or key compiled in "
            "(python -m devices vendor --root FILE) and no license_pubkey was configured",
            code=Code.NO_PUBLIC_KEY,
        )
    try:
        return Keyring(roots, pinned=None if roots else pinned)
    except ValueError as exc:
        raise LicenseError(
            f"unusable licence public key: {exc}", code=Code.BAD_PUBLIC_KEY
        ) from None
