"""Reads of the registered signing keys, and what a signed key or token names."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from signing import keyring
from signing.models import SigningKey


def signing_keys_list() -> QuerySet[SigningKey]:
    """Every registered signing key, oldest first."""
    return SigningKey.objects.order_by("created_at", "kid")


def signed_key_name(token: Any) -> str:
    """The licence (and batch) a camera's signed key or token names, for the log of its
    refusal: only when the authority's signature verifies (a revoked signing key's
    too), so a forged token names nothing; "" otherwise."""
    if not isinstance(token, str) or not token:
        return ""
    try:
        try:
            claims = keyring.verify(token)
        except Exception:
            claims = keyring.verify_under_revoked_key(token)
    except Exception:
        return ""
    license_id = str(claims.get("lic", ""))
    batch = claims.get("batch")
    if isinstance(batch, dict) and batch.get("id"):
        return f"{license_id} (batch {batch['id']})"[:150]
    return license_id[:150]
