"""Reads of the licensing authority that are more than a primary-key lookup."""

from __future__ import annotations

import datetime as dt

from django.db.models import QuerySet

from config.errors import NotFound
from licensing.models import Activation, Batch, SigningKey, Sku

FLEET_MAX = 1000


def batch_get(*, batch_id: str) -> Batch:
    try:
        return Batch.objects.get(pk=batch_id)
    except Batch.DoesNotExist:
        raise NotFound(f"batch {batch_id} does not exist") from None


def catalogue_list() -> QuerySet[Sku]:
    return Sku.objects.order_by("code")


def fleet_list(
    *,
    customer_id: str | None = None,
    batch_id: str | None = None,
    weak_binding: bool | None = None,
    before: int | None = None,
    limit: int = FLEET_MAX,
) -> QuerySet[Activation]:
    """Activation records, most recent first; ``before`` (Unix seconds) pages back to
    units activated strictly before that second."""
    records = Activation.objects.select_related("batch", "license").order_by("-activated_at", "-id")
    if customer_id:
        records = records.filter(batch__customer_id=customer_id)
    if batch_id:
        records = records.filter(batch_id=batch_id)
    if weak_binding is not None:
        records = records.filter(weak_binding=weak_binding)
    if before is not None:
        records = records.filter(activated_at__lt=dt.datetime.fromtimestamp(before, tz=dt.UTC))
    return records[: min(limit, FLEET_MAX)]


def signing_keys_list() -> QuerySet[SigningKey]:
    """Every registered signing key, oldest first."""
    return SigningKey.objects.order_by("created_at", "kid")


def signing_keys_published() -> tuple[list[str], list[str]]:
    """What the revocation list publishes about the signing keys, read fresh: the key
    certificates of every key not revoked (oldest first) and the revoked key ids
    (sorted)."""
    certificates, revoked = [], []
    for kid, certificate, revoked_at in signing_keys_list().values_list(
        "kid", "certificate", "revoked_at"
    ):
        if revoked_at is not None:
            revoked.append(kid)
        elif certificate:
            certificates.append(certificate)
    return certificates, sorted(revoked)
