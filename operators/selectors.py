"""Reads of operator access: which key a presented ``X-Admin-Key`` is."""

from __future__ import annotations

import hashlib
import hmac
import re

from django.conf import settings

from operators.models import OperatorKey

KEY_SCHEME = "svcop"
BOOTSTRAP_KEY_NAME = "bootstrap"
PRESENTED = re.compile(r"\Asvcop_([0-9a-f]{12})_([A-Za-z0-9_-]{20,100})\Z")


def key_digest(key: str) -> str:
    """HMAC-SHA256 of a presented key under the service secret (``SVC_SECRET_KEY``): a
    copy of the table alone does not let anyone test guesses offline."""
    return hmac.new(
        settings.SECRET_KEY.encode(), b"operator-key:" + key.encode(), hashlib.sha256
    ).hexdigest()


def operator_key_match(presented: str) -> str | None:
    """Name of the active operator key ``presented`` is, or None."""
    match = PRESENTED.match(presented)
    if not match:
        return None
    row = OperatorKey.objects.filter(prefix=match.group(1), revoked_at__isnull=True).first()
    if row is None:
        return None
    if hmac.compare_digest(row.digest, key_digest(presented)):
        return row.name
    return None


def operator_keys_exist() -> bool:
    return OperatorKey.objects.filter(revoked_at__isnull=True).exists()


def admin_key_name(presented: str) -> str | None:
    """Name of the key ``presented`` is: ``bootstrap`` for ``SVC_ADMIN_KEY``, else a named
    operator key's; None for neither. Compared in constant time."""
    configured = settings.SVC_ADMIN_KEY
    if configured and hmac.compare_digest(presented.encode(), configured.encode()):
        return BOOTSTRAP_KEY_NAME
    return operator_key_match(presented)


def admin_api_enabled() -> bool:
    """Whether any key can open the admin API: the bootstrap key or an active named one."""
    return bool(settings.SVC_ADMIN_KEY) or operator_keys_exist()
