"""Reads of the registered signing keys."""

from __future__ import annotations

from django.db.models import QuerySet

from signing.models import SigningKey


def signing_keys_list() -> QuerySet[SigningKey]:
    """Every registered signing key, oldest first."""
    return SigningKey.objects.order_by("created_at", "kid")
