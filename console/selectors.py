"""Reads behind the operator dashboard (licensing data; billing reads come from
``billing.selectors``)."""

from __future__ import annotations

import datetime as dt

from django.db.models import Count, F, Max, QuerySet, Sum

from config import clock
from licensing.models import (
    Activation,
    ActivationDaily,
    Batch,
    SeatRelease,
    near_exhaustion_condition,
)
from licensing.services.seats import ReleasePolicy


def batches_near_exhaustion(*, limit: int = 20) -> QuerySet[Batch]:
    """Batches near exhaustion (``licensing.models.NEAR_EXHAUSTION_PERCENT`` or more of
    their units activated), fullest first (exhausted included)."""
    return (
        Batch.objects.select_related("customer")
        .filter(near_exhaustion_condition())
        .order_by(F("units_purchased") - F("units_activated"), "-issued_at")[:limit]
    )


def _days(days: int, now: dt.datetime | None) -> list[dt.date]:
    today = (now or clock.now()).date()
    return [today - dt.timedelta(days=offset) for offset in range(days - 1, -1, -1)]


def activations_per_day(*, days: int = 30, now: dt.datetime | None = None) -> list[tuple]:
    """(date, new activations, transfers and trials included) for each of the last ``days`` days
    (UTC), oldest first, zero-filled: summed from the daily rollups (a row per batch and
    day), never by counting activations."""
    dates = _days(days, now)
    counts = dict(
        ActivationDaily.objects.filter(day__gte=dates[0])
        .values_list("day")
        .annotate(n=Sum(F("activations") + F("transfers") + F("trials")))
        .order_by()
        .values_list("day", "n")
    )
    return [(day, counts.get(day, 0)) for day in dates]


def weak_binding_devices(*, limit: int = 20) -> QuerySet[Activation]:
    """Most recent activations whose fingerprint came from a spoofable source."""
    return (
        Activation.objects.select_related(
            "batch", "batch__customer", "license", "license__seat_release"
        )
        .filter(weak_binding=True)
        .order_by("-activated_at", "-id")[:limit]
    )


def weak_binding_count() -> int:
    return Activation.objects.filter(weak_binding=True).count()


def seat_releases(*, limit: int = 20, now: dt.datetime | None = None) -> dict:
    """Seats released within the release policy's window: the total, and per batch (most
    recent first) how many, how many replacements took them, and the policy's limit."""
    policy = ReleasePolicy.configured()
    since = (now or clock.now()) - dt.timedelta(days=policy.days)
    window = SeatRelease.objects.filter(released_at__gt=since)
    rows = list(
        window.values(
            "batch_id", "batch__customer_id", "batch__customer__name", "batch__units_purchased"
        )
        .annotate(released=Count("id"), taken=Count("replacement"), last=Max("released_at"))
        .order_by("-last", "batch_id")[:limit]
    )
    for row in rows:
        row["limit"] = policy.limit(row["batch__units_purchased"])
        row["at_limit"] = row["released"] >= row["limit"]
    return {"days": policy.days, "total": window.count(), "batches": rows}
