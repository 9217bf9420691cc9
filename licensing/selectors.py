"""Reads of the licensing authority that are more than a primary-key lookup."""

from __future__ import annotations

import datetime as dt

from django.db.models import QuerySet

from config.errors import NotFound
from licensing.models import Activation, Batch, Sku

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
