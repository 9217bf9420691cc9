"""The authority's signing keys on the server: the one that signs here, and the registry
of every key whose signatures the authority accepts.

The private key is held by the configured signer (:mod:`signing.signers`): the file
``SVC_SIGNING_KEY_FILE`` read into this process only (never logged, returned or written
anywhere else), or a PKCS#11 token that signs without ever handing the key out
(``SVC_SIGNER=pkcs11``). Key ids, the registry, certificates and rotation are the same
with either: a key is known by its public half. That public half is registered
(:class:`licensing.models.SigningKey`) the first time this process reads the registry,
beside the other keys of the authority (standby keys, retired keys, air-gap minting
keys) and their root-signed key certificates (``devices.keys``).

Signing: only the active key signs, and only while it may. When ``SVC_ROOT_KEYS`` is set
it needs a certificate from one of those roots that covers now (devices refuse anything
else); a retired or revoked key never signs. Otherwise every signature, and every
verification, is refused with :class:`SigningKeyUnusable` (503) naming the key and
the fix, and ``/healthz`` answers 503 with the same words.

Verifying: a token names its key (``kid``). It verifies under a registered key that is
not revoked, that chains to a configured root (when roots are configured) and whose
certificate window covered the token's ``iat``. Online and offline (air-gap) keys both
sign licences. A token without ``kid`` (issued before key ids) is checked against the
active key, then the other registered keys.

The registry is read once per process and kept for :data:`REFRESH_SECONDS`: a key
change made through this process (install, retire, revoke) applies here at once, and
in every other process within 5 seconds, so a key revocation stops verification
everywhere within 5 s without a query per request.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from config import clock
from config.errors import SigningKeyUnusable
from config.metrics import timed_signing
from devices import token as codec
from devices.errors import BadSignature
from devices.keys import ONLINE, KeyNotTrusted, Keyring, unverified_payload
from signing import signers
from signing.models import SigningKey
from svccore import authority
from svccore.timeunits import unix

REFRESH_SECONDS = 5.0
MISS_RELOAD_SECONDS = 0.2  # an unknown kid re-reads the registry at most this often
INSTALL_COMMAND = "python manage.py key_install CERT"

_lock = threading.Lock()
_loaded: dict[tuple[str, Any], ActiveKey] = {}
_roots: dict[tuple[str, ...], dict[str, Ed25519PublicKey]] = {}
_registry: list[Registry] = []  # zero or one: the registry this process holds


@dataclass(frozen=True)
class ActiveKey:
    """The key the configured signer holds (``SVC_SIGNING_KEY_FILE`` or a token's)."""

    path: str  # the key file, or "pkcs11:<token label>/<key label>"
    signer: signers.Signer
    public: Ed25519PublicKey
    kid: str
    fingerprint: str


@dataclass(frozen=True)
class TrustedKey:
    """A registered key whose signatures are accepted, within its certificate window."""

    key: Ed25519PublicKey
    use: str
    not_before: int
    not_after: int  # 0: no end

    def covers(self, moment: int) -> bool:
        return self.not_before <= moment and (not self.not_after or moment <= self.not_after)


@dataclass(frozen=True)
class Registry:
    config: tuple[str, str, tuple[str, ...]]  # key file, active kid, roots
    loaded_at: float
    active: ActiveKey
    problem: str  # why the active key may not sign; "" when it may
    trusted: dict[str, TrustedKey]
    revoked: dict[str, str]  # kid -> "revoked at T (reason)"
    certificates: tuple[str, ...]  # of every registered key not revoked, oldest first
    active_certificate: str
    # Keys whose tokens are re-signed when their device comes back (re-activation,
    # licence refresh); a revoked key's public key proves only that a token presented
    # is the very one issued (licensing.held and the activation's batch-key check
    # compare it byte for byte).
    retired: frozenset[str] = frozenset()
    revoked_keys: dict[str, Ed25519PublicKey] = field(default_factory=dict)


# --- the active key --------------------------------------------------------------------


def _active() -> ActiveKey:
    config = signers.configured()
    with _lock:
        active = _loaded.get(config)
        if active is None:
            signer = signers.load(*config)  # ImproperlyConfigured when unusable
            public = signer.public_key()
            kind, where = config
            if kind == signers.PKCS11:
                path = f"pkcs11:{where.token_label}/{where.key_label}"
            else:
                path = where
            active = ActiveKey(
                path=path,
                signer=signer,
                public=public,
                kid=codec.key_id(public),
                fingerprint=codec.key_fingerprint(public),
            )
            for old in _loaded.values():
                old.signer.close()
            _loaded.clear()
            _loaded[config] = active
        return active


def signing_key() -> Ed25519PrivateKey | signers.Signer:
    """What signs: the ``Ed25519PrivateKey`` of ``SVC_SIGNING_KEY_FILE``, or the PKCS#11
    signer, which has the surface the device codec uses of one (``sign``,
    ``public_key``); ImproperlyConfigured when unusable."""
    signer = _active().signer
    return signer.key if isinstance(signer, signers.FileSigner) else signer


def active_key() -> ActiveKey:
    """The key the configured signer holds, as loaded: several of its facts from one
    lookup (/healthz reports its fingerprint, kid and signer kind, and probes
    ``signer.check()``). ImproperlyConfigured when unusable."""
    return _active()


def public_key() -> Ed25519PublicKey:
    return _active().public


def public_key_fingerprint() -> str:
    return _active().fingerprint


def active_kid() -> str:
    """Key id of the key the configured signer holds."""
    return _active().kid


def key_state(key: SigningKey) -> str:
    """Where ``key`` stands (``SigningKey.State``), most decisive first: revoked, retired,
    active (the key the configured signer holds: configuration, read here, which is why
    this is not a property of the row), standby."""
    if key.revoked_at is not None:
        return SigningKey.State.REVOKED
    if key.retired_at is not None:
        return SigningKey.State.RETIRED
    try:
        active = active_kid()
    except ImproperlyConfigured:
        active = ""
    return SigningKey.State.ACTIVE if key.kid == active else SigningKey.State.STANDBY


def root_keys() -> dict[str, Ed25519PublicKey]:
    """The roots of ``SVC_ROOT_KEYS`` by key id; empty when none is configured."""
    configured = tuple(settings.SVC_ROOT_KEYS)
    roots = _roots.get(configured)
    if roots is None:
        try:
            roots = {codec.key_id(key): codec.load_public_key(key) for key in configured}
        except ValueError as exc:
            raise ImproperlyConfigured(f"SVC_ROOT_KEYS: {exc}") from None
        _roots.clear()
        _roots[configured] = roots
    return roots


# --- the registry ----------------------------------------------------------------------


def keys_changed() -> None:
    """Forget this process's registry: the next signature or verification reads the keys
    again. The key services call it when they change a key, and again on commit."""
    _registry.clear()


def keys_changed_on_commit() -> None:
    keys_changed()
    transaction.on_commit(keys_changed)


def _problem(
    active: ActiveKey,
    row: SigningKey,
    trusted: dict[str, TrustedKey],
    roots: dict[str, Ed25519PublicKey],
) -> str:
    setting = (
        "SVC_PKCS11_KEY_LABEL" if active.signer.kind == signers.PKCS11 else "SVC_SIGNING_KEY_FILE"
    )
    where = f"signing key {active.kid} ({setting})"
    switch = (
        f"point {setting} at a key that is certified and neither retired nor "
        f"revoked (`{INSTALL_COMMAND}` installs a key's certificate)"
    )
    if row.revoked_at is not None:
        return f"{where} was revoked at {unix(row.revoked_at)}; it signs nothing: {switch}"
    if row.retired_at is not None:
        return f"{where} was retired at {unix(row.retired_at)}; it signs nothing more: {switch}"
    if not roots:
        return ""
    key = trusted.get(active.kid)
    if key is None:
        if row.certificate:
            return (
                f"the certificate of {where} does not verify under SVC_ROOT_KEYS; install "
                f"one from a configured root with `{INSTALL_COMMAND}`"
            )
        return (
            f"{where} has no certificate from a root in SVC_ROOT_KEYS, so devices would "
            f"refuse what it signs; certify it offline and install it with `{INSTALL_COMMAND}`"
        )
    now = unix(clock.now())
    if not key.covers(now):
        return (
            f"the certificate of {where} is valid for {key.not_before}.."
            f"{key.not_after or 'no end'}, not now ({now}); install a current one with "
            f"`{INSTALL_COMMAND}`"
        )
    if key.use != ONLINE:
        return (
            f"{where} is certified for offline minting only; it may not sign list pages or "
            f"receipts: install an online certificate with `{INSTALL_COMMAND}` or {switch}"
        )
    return ""


def _load(config: tuple[str, str, tuple[str, ...]], active: ActiveKey) -> Registry:
    rows = {row.kid: row for row in SigningKey.objects.all()}
    if active.kid not in rows:
        rows[active.kid], _ = SigningKey.objects.get_or_create(
            kid=active.kid,
            defaults={
                "public_key": codec.public_key_b64url(active.public),
                "fingerprint": active.fingerprint,
                "use": SigningKey.Use.ONLINE,
            },
        )
    roots = root_keys()
    ring = Keyring(roots.values())
    trusted: dict[str, TrustedKey] = {}
    revoked: dict[str, str] = {}
    revoked_keys: dict[str, Ed25519PublicKey] = {}
    certificates = []
    for kid, row in rows.items():
        if row.revoked_at is not None:
            reason = row.revoke_reason or "no reason given"
            revoked[kid] = f"revoked at {unix(row.revoked_at)} ({reason})"
            if row.public_key:
                revoked_keys[kid] = codec.load_public_key(row.public_key)
            continue
        if row.certificate:
            certificates.append(row.certificate)
        if roots:
            try:
                cert = ring.add(row.certificate)
            except KeyNotTrusted:
                continue  # not chained to a configured root: trusted for nothing
            if cert.kid == kid:
                trusted[kid] = TrustedKey(cert.key, cert.use, cert.not_before, cert.not_after)
        else:
            key = codec.load_public_key(row.public_key)
            trusted[kid] = TrustedKey(key, row.use, row.not_before, row.not_after)
    return Registry(
        config=config,
        loaded_at=time.monotonic(),
        active=active,
        problem=_problem(active, rows[active.kid], trusted, roots),
        trusted=trusted,
        revoked=revoked,
        certificates=tuple(certificates),
        active_certificate=rows[active.kid].certificate if active.kid not in revoked else "",
        retired=frozenset(kid for kid, row in rows.items() if row.retired_at is not None),
        revoked_keys=revoked_keys,
    )


def _current() -> Registry:
    active = _active()
    config = (active.path, active.kid, tuple(settings.SVC_ROOT_KEYS))
    held = _registry[0] if _registry else None
    if (
        held is not None
        and held.config == config
        and time.monotonic() - held.loaded_at < REFRESH_SECONDS
    ):
        return held
    registry = _load(config, active)
    _registry[:] = [registry]
    return registry


def registry() -> Registry:
    """This process's signing-key registry: the same object until the keys are read again
    (every :data:`REFRESH_SECONDS`, and at once after a key change made here). What is
    derived from it, such as a verified batch key, may be kept while it is current."""
    return _current()


def _usable() -> Registry:
    registry = _current()
    if registry.problem:
        raise SigningKeyUnusable(registry.problem)
    return registry


def active_key_problem() -> str:
    """Why the active key may not sign now ("" when it may): what /healthz reports."""
    return _current().problem


def certificates() -> list[str]:
    """Key certificates of every registered key that is not revoked, oldest first: what
    devices need to chain the authority's keys to their compiled-in roots."""
    return list(_current().certificates)


def active_certificate() -> str:
    """The active key's certificate (``SVCK1``), or "" when it has none: shipped beside
    what this key signs (usage receipts, licence files)."""
    return _current().active_certificate


# --- signing and verifying ---------------------------------------------------------------


def sign_claims(claims: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Sign ``claims`` with the active key: the token and the claims as signed (naming
    the key, ``kid``). SigningKeyUnusable (503) when the active key may not sign."""
    active = _usable().active
    key = active.signer
    # The kid this key was loaded with: deriving it per token (public key, SHA-256) cost
    # as much as a tenth of an activation's Python time.
    signed = claims if "kid" in claims else {**claims, "kid": active.kid}
    with timed_signing(key.kind):
        token = authority.encode_token(signed, key)
    return token, signed


def sign(claims: dict[str, Any]) -> str:
    return sign_claims(claims)[0]


def sign_document(prefix: str, payload: dict[str, Any]) -> str:
    """Sign a revocation-list page or usage receipt (``devices.documents``)."""
    active = _usable().active
    signer = active.signer
    if "kid" not in payload:
        payload = {**payload, "kid": active.kid}
    with timed_signing(signer.kind):
        return authority.sign_document(prefix, payload, signer)


def verify(token: str) -> dict[str, Any]:
    """Claims of a token one of the authority's keys signed; ``devices.BadSignature``
    naming the key otherwise (unknown, revoked, outside its certificate's window)."""
    registry = _usable()
    if not isinstance(token, str) or len(token) > codec.MAX_TOKEN_CHARS:
        return codec.verify_token(token, registry.active.public)  # raises: shape, size
    kid = unverified_payload(token).get("kid")
    if kid is None:
        return _verify_without_kid(token, registry)
    if not isinstance(kid, str):
        raise BadSignature("claim 'kid' must be a string")
    if kid not in registry.trusted and kid not in registry.revoked:
        registry = _reload_after_miss(registry)
    if kid in registry.revoked:
        raise BadSignature(
            f"token is signed by key {kid}, which was {registry.revoked[kid]}: nothing it "
            "signed is accepted"
        )
    trusted = registry.trusted.get(kid)
    if trusted is None:
        chained = " chained to a root in SVC_ROOT_KEYS" if root_keys() else ""
        raise BadSignature(
            f"token is signed by key {kid}, which is not a registered signing key{chained} "
            "of this authority"
        )
    claims = codec.verify_token(token, trusted.key)
    if not trusted.covers(claims["iat"]):
        raise BadSignature(
            f"token was signed by key {kid} at {claims['iat']}, outside its certificate's "
            f"validity {trusted.not_before}..{trusted.not_after or 'no end'}"
        )
    return claims


def key_stale(token: str) -> bool:
    """Whether ``token`` (one this authority issued) names a key that is retired or
    revoked: its device is answered the licence re-signed by the active key. Costs
    nothing while no key is retired or revoked."""
    registry = _current()
    if not registry.revoked and not registry.retired:
        return False
    kid = unverified_payload(token).get("kid")
    return kid in registry.revoked or kid in registry.retired


def verify_under_revoked_key(token: str) -> dict[str, Any]:
    """Claims of a token a revoked key of this authority signed, the signature checked
    with that key; BadSignature otherwise. It proves nothing by itself (the key may have
    leaked): only a caller that then finds the token byte for byte among those issued
    may answer it: a licence refresh (``licensing.held.license_held``), with the licence
    re-signed, and an activation with a batch key from firmware
    (``licensing.services.activation``), with a unit licence signed by the active key."""
    registry = _usable()
    kid = unverified_payload(token).get("kid") if isinstance(token, str) else None
    key = registry.revoked_keys.get(kid) if isinstance(kid, str) else None
    if key is None:
        raise BadSignature("token is not signed by a revoked key of this authority")
    return codec.verify_token(token, key)


def _reload_after_miss(registry: Registry) -> Registry:
    """A key this process does not know may have been installed a moment ago (an
    operator installs a certificate, then registers a licence it signed): read the
    registry again instead of refusing for up to REFRESH_SECONDS. At most one reload per
    MISS_RELOAD_SECONDS, so tokens naming made-up keys cannot turn into a query each."""
    if time.monotonic() - registry.loaded_at < MISS_RELOAD_SECONDS:
        return registry
    keys_changed()
    return _usable()


def _verify_without_kid(token: str, registry: Registry) -> dict[str, Any]:
    """A token from before key ids: the active key first (nearly always the signer), then
    every other registered key that is not revoked."""
    try:
        return codec.verify_token(token, registry.active.public)
    except BadSignature as exc:
        refusal = exc
    for kid, trusted in registry.trusted.items():
        if kid != registry.active.kid:
            try:
                return codec.verify_token(token, trusted.key)
            except BadSignature:
                continue
    raise refusal
