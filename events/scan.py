"""The scheduled pass (``manage.py events_scan``; the webhook worker runs it every
minute): the events no request causes - a term about to end, a grace period begun, a
batch or a device quota filling up. Each is written once, whatever the number of passes
and of nodes running them at the same time: its ``once_key`` is unique, and a second
write of it writes nothing.

Terms are those of batch keys and direct licences (a batch's units end with it: one
event for the batch, not one per camera). A renewal moves the end, and the keys carry
the end, so the new term is announced again."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import F, Sum

from billing.models import UsageDaily
from config import clock
from devices.term import GRACE
from events.models import Event
from events.services import event_emit
from licensing.models import Batch, License
from svccore.timeunits import DAY, term_state_at, unix

EXPIRING_DAYS = (30, 7, 1)
BATCH_PERCENTS = (80, 95, 100)
QUOTA_PERCENTS = (80, 100)


@dataclass
class ScanResult:
    written: dict[str, int] = field(default_factory=dict)

    def count(self, type: str) -> None:
        self.written[type] = self.written.get(type, 0) + 1


def _data(lic: License) -> dict:
    data = {
        "license_id": lic.id,
        "customer_id": lic.customer_id,
        "sku": lic.sku,
        "device_id": lic.device_id,
        "expires_at": unix(lic.expires_at),
    }
    if lic.kind == License.Kind.BATCH_KEY:
        data["batch_id"] = (
            Batch.objects.filter(license_id=lic.id).values_list("id", flat=True).first()
        )
    return data


def _emit(result: ScanResult, type: str, *, customer_id: str, data: dict, once_key: str) -> None:
    before = Event.objects.filter(once_key=once_key).exists()
    if before:
        return
    event_emit(type, customer_id=customer_id, data=data, once_key=once_key)
    result.count(type)


def _terms(result: ScanResult, now: dt.datetime) -> None:
    horizon = now + dt.timedelta(days=max(EXPIRING_DAYS))
    live = License.objects.exclude(kind=License.Kind.UNIT).filter(
        revoked_at__isnull=True, expires_at__isnull=False
    )
    for lic in live.filter(expires_at__gt=now, expires_at__lte=horizon):
        left = (lic.expires_at - now).total_seconds()
        for days in EXPIRING_DAYS:
            if left <= days * DAY:
                _emit(
                    result,
                    Event.Type.LICENSE_EXPIRING,
                    customer_id=lic.customer_id,
                    data=_data(lic) | {"days": days},
                    once_key=f"license.expiring:{lic.id}:{unix(lic.expires_at)}:{days}",
                )
    longest_grace = dt.timedelta(days=3650)
    for lic in live.filter(expires_at__lt=now, expires_at__gt=now - longest_grace):
        # In grace by the rule the camera applies (its end second is still in the term).
        if term_state_at(lic.expires_at, lic.grace_days, now) == GRACE:
            _emit(
                result,
                Event.Type.LICENSE_GRACE_STARTED,
                customer_id=lic.customer_id,
                data=_data(lic) | {"grace_days": lic.grace_days},
                once_key=f"license.grace_started:{lic.id}:{unix(lic.expires_at)}",
            )


def _crossed(percents: tuple[int, ...], used: int, total: int) -> list[int]:
    """The thresholds ``used`` of ``total`` has reached (whole-number maths)."""
    return [percent for percent in percents if used * 100 >= total * percent]


def _batches(result: ScanResult) -> None:
    # Only the batches past the lowest threshold are read (whole-number maths, as above).
    filling = Batch.objects.alias(
        used=F("units_activated") * 100, lowest=F("units_purchased") * min(BATCH_PERCENTS)
    ).filter(units_purchased__gt=0, used__gte=F("lowest"))
    for batch in filling.only(
        "id", "customer_id", "sku", "units_purchased", "units_activated", "license_id"
    ):
        for percent in _crossed(BATCH_PERCENTS, batch.units_activated, batch.units_purchased):
            _emit(
                result,
                Event.Type.BATCH_THRESHOLD,
                customer_id=batch.customer_id,
                data={
                    "batch_id": batch.id,
                    "license_id": batch.license_id,
                    "customer_id": batch.customer_id,
                    "sku": batch.sku,
                    "percent": percent,
                    "units_activated": batch.units_activated,
                    "units_purchased": batch.units_purchased,
                },
                once_key=f"batch.threshold:{batch.id}:{percent}",
            )


def _quotas(result: ScanResult) -> None:
    metered = {
        lic.id: lic
        for lic in License.objects.filter(
            revoked_at__isnull=True, claims__lim__api_calls__gt=0
        ).only("id", "customer_id", "sku", "device_id", "claims", "batch_id")
    }
    if not metered:
        return
    used = (
        UsageDaily.objects.filter(license_id__in=list(metered))
        .values("license_id")
        .annotate(inferences=Sum("inferences"))
    )
    for row in used:
        lic = metered[row["license_id"]]
        quota = int(lic.claims["lim"]["api_calls"])
        for percent in _crossed(QUOTA_PERCENTS, row["inferences"], quota):
            _emit(
                result,
                Event.Type.USAGE_QUOTA_THRESHOLD,
                customer_id=lic.customer_id,
                data={
                    "license_id": lic.id,
                    "customer_id": lic.customer_id,
                    "sku": lic.sku,
                    "device_id": lic.device_id,
                    "percent": percent,
                    "inferences": row["inferences"],
                    "api_calls": quota,
                }
                | ({"batch_id": lic.batch_id} if lic.batch_id else {}),
                once_key=f"usage.quota_threshold:{lic.id}:{quota}:{percent}",
            )


def events_scan(now: dt.datetime | None = None) -> ScanResult:
    """Write the expiry, grace, batch and quota events that are due and not yet written."""
    now = now or clock.now()
    result = ScanResult()
    with transaction.atomic():
        _terms(result, now)
    with transaction.atomic():
        _batches(result)
    with transaction.atomic():
        _quotas(result)
    return result
