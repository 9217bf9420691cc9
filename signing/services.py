"""The writes of the authority's signing keys: install a certified key, retire it,
revoke it (``manage.py key_install``, ``key_retire``, ``key_revoke``; the console's key
pages). Each changes what the revocation list publishes (its key certificates,
``keys_revoked``); the list is licensing's, which registers the two writes a key's
change needs (:func:`revocation_list_register`)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from audit.services import audited
from config import clock
from config.errors import (
    Conflict,
    InvalidInput,
    NotFound,
)
from devices import token as codec
from devices.keys import CERT_PREFIX, KeyCertificate, KeyNotTrusted, parse_certificate
from events.models import Event
from events.services import event_emit
from signing import keyring
from signing.models import SigningKey
from svccore.timeunits import unix

log = logging.getLogger(__name__)


def _key_get(kid: str) -> SigningKey:
    try:
        return SigningKey.objects.select_for_update().get(pk=kid)
    except SigningKey.DoesNotExist:
        raise NotFound(
            f"no signing key {kid!r} is registered; `python manage.py key_list` shows them"
        ) from None


@dataclass(frozen=True)
class RevocationList:
    """What a key's change does to the revocation list. The list is licensing's, above
    signing (the layers in ``pyproject.toml``), so licensing registers it
    (:func:`revocation_list_register`, from ``licensing.services.keys``)."""

    keys_changed: Callable[[], None]  # its key certificates change: answers are rebuilt
    key_revoked: Callable[[str, dt.datetime], None]  # KEY-<kid> is appended, numbered


_revocation_list: list[RevocationList] = []


def revocation_list_register(
    *, keys_changed: Callable[[], None], key_revoked: Callable[[str, dt.datetime], None]
) -> None:
    """Name the revocation list's two writes a key's change calls (once: again replaces)."""
    _revocation_list[:] = [RevocationList(keys_changed=keys_changed, key_revoked=key_revoked)]


def _revocation() -> RevocationList:
    if not _revocation_list:
        raise ImproperlyConfigured(
            "no revocation list is registered: the licensing app registers it when it is "
            "ready (licensing.services.keys)"
        )
    return _revocation_list[0]


def _keys_changed() -> None:
    """Every answer that carries key certificates is rebuilt, and this process reads the
    keys again now (the others within ``keyring.REFRESH_SECONDS``)."""
    _revocation().keys_changed()
    keyring.keys_changed_on_commit()


def _certificate_parse(text: str, roots: dict[str, Any]) -> KeyCertificate:
    if not roots:
        raise InvalidInput(
            "SVC_ROOT_KEYS is not set: there is no root to verify a key certificate against; "
            "configure the root public keys the firmware trusts"
        )
    if not text.startswith(CERT_PREFIX + ".") or text.count(".") != 2:
        raise InvalidInput(
            f"not a key certificate: expected one line {CERT_PREFIX}.<payload>.<signature>"
        )
    try:
        return parse_certificate(text, roots)
    except KeyNotTrusted as exc:
        if exc.code == "KEY_UNTRUSTED_ROOT":
            raise InvalidInput(
                "key certificate is signed by a root that is not in SVC_ROOT_KEYS "
                f"(configured roots: {', '.join(roots)}); nothing installed"
            ) from None
        raise InvalidInput(f"{exc}; nothing installed") from None


@audited("signing_key.install", target=lambda result, arguments: result.kid)
@transaction.atomic
def signing_key_install(*, certificate: str, roots: list[str] | None = None) -> SigningKey:
    """Register a signing key from its key certificate (``SVCK1``, made offline by a
    root), or renew the certificate of a registered key. Online and offline (air-gap)
    keys alike.

    The certificate must verify under a root of ``SVC_ROOT_KEYS`` (``roots`` replaces
    them; only ``manage.py dev_setup`` passes its development root) and must not have
    expired; a revoked key cannot come back (409)."""
    try:
        trusted = {codec.key_id(key): codec.load_public_key(key) for key in roots or ()}
    except ValueError as exc:
        raise InvalidInput(f"unusable root key: {exc}") from None
    cert = _certificate_parse(certificate.strip(), trusted or keyring.root_keys())
    now = unix(clock.now())
    if cert.not_after and cert.not_after < now:
        raise InvalidInput(
            f"the certificate of key {cert.kid} expired at {cert.not_after} (now {now}); ask "
            "the root holder for a new one; nothing installed"
        )
    fields = {
        "public_key": codec.public_key_b64url(cert.key),
        "fingerprint": codec.key_fingerprint(cert.key),
        "certificate": cert.text,
        "use": cert.use,
        "not_before": cert.not_before,
        "not_after": cert.not_after,
    }
    key = SigningKey.objects.select_for_update().filter(pk=cert.kid).first()
    if key is None:
        key = SigningKey.objects.create(kid=cert.kid, **fields)
    else:
        if key.revoked_at is not None:
            raise Conflict(f"signing key {key.kid} is revoked; a revoked key never comes back")
        for name, value in fields.items():
            setattr(key, name, value)
        key.save(update_fields=list(fields))
    _keys_changed()
    return key


@audited("signing_key.retire", target=lambda result, arguments: result.kid)
@transaction.atomic
def signing_key_retire(*, kid: str) -> SigningKey:
    """Stop a key from signing. What it signed keeps verifying until it expires; a
    server configured with it as its active key refuses to sign. Idempotent."""
    key = _key_get(kid)
    if key.retired_at is None:
        key.retired_at = clock.now()
        key.save(update_fields=["retired_at"])
        _keys_changed()
    return key


@audited("signing_key.revoke", target=lambda result, arguments: result.kid)
@transaction.atomic
def signing_key_revoke(*, kid: str, reason: str = "") -> SigningKey:
    """Revoke a signing key (compromised, lost): nothing it signed verifies on the server
    any more (this process at once, others within ``keyring.REFRESH_SECONDS``), and the
    revocation list gains ``KEY-<kid>`` and names it in ``keys_revoked``, so devices
    refuse it at their next sync. Idempotent: the first time and reason are kept."""
    key = _key_get(kid)
    if key.revoked_at is None:
        key.revoked_at = clock.now()
        key.revoke_reason = reason[:500]
        key.save(update_fields=["revoked_at", "revoke_reason"])
        _revocation().key_revoked(key.kid, key.revoked_at)
        _keys_changed()
        event_emit(
            Event.Type.SIGNING_KEY_REVOKED, data={"kid": key.kid, "reason": key.revoke_reason}
        )
    return key
