"""The licences' part of the scheduled event pass (:mod:`events.scan`): terms about to
end and grace periods begun, batches filling up, check-in leases about to end and ended,
and trials about to end (issue 42).

Terms are those of batch keys and direct licences (a batch's units end with it: one
event for the batch, not one per camera). A renewal moves the end, and the keys carry
the end, so the new term is announced again."""

from __future__ import annotations

import datetime as dt

from django.db.models import F

from devices.term import GRACE
from events.models import Event
from events.scan import ScanResult, event_once, scan_pass, thresholds_crossed
from licensing import leases
from licensing.models import Batch, License
from svccore.timeunits import DAY, term_state_at, unix

EXPIRING_DAYS = (30, 7, 1)
LEASE_EXPIRING_SECONDS = DAY  # license.lease_expiring: the lease ends within a day
BATCH_PERCENTS = (80, 95, 100)
TRIAL_EXPIRING_DAYS = (7, 1)  # license.trial_expiring: a camera's trial ends within these


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


@scan_pass
def terms_scan(result: ScanResult, now: dt.datetime) -> None:
    """``license.expiring`` (30, 7 and 1 days before the end) and ``license.grace_started``."""
    horizon = now + dt.timedelta(days=max(EXPIRING_DAYS))
    # A trial batch's key ends the window for starting trials: its cameras' trials end
    # on their own (trials_scan), and it is converted, not renewed.
    live = (
        License.objects.exclude(kind=License.Kind.UNIT)
        .exclude(batch_key_of__trial_days__isnull=False)
        .filter(revoked_at__isnull=True, expires_at__isnull=False)
    )
    for lic in live.filter(expires_at__gt=now, expires_at__lte=horizon):
        left = (lic.expires_at - now).total_seconds()
        for days in EXPIRING_DAYS:
            if left <= days * DAY:
                event_once(
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
            event_once(
                result,
                Event.Type.LICENSE_GRACE_STARTED,
                customer_id=lic.customer_id,
                data=_data(lic) | {"grace_days": lic.grace_days},
                once_key=f"license.grace_started:{lic.id}:{unix(lic.expires_at)}",
            )


@scan_pass
def batches_scan(result: ScanResult, now: dt.datetime) -> None:
    """``batch.threshold`` at 80, 95 and 100 % of a batch's units activated."""
    # Only the batches past the lowest threshold are read (whole-number maths, as above).
    filling = Batch.objects.alias(
        used=F("units_activated") * 100, lowest=F("units_purchased") * min(BATCH_PERCENTS)
    ).filter(units_purchased__gt=0, used__gte=F("lowest"))
    for batch in filling.only(
        "id", "customer_id", "sku", "units_purchased", "units_activated", "license_id"
    ):
        for percent in thresholds_crossed(
            BATCH_PERCENTS, batch.units_activated, batch.units_purchased
        ):
            event_once(
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


@scan_pass
def leases_scan(result: ScanResult, now: dt.datetime) -> None:
    """``license.lease_expiring`` (its camera must sync within a day) and
    ``license.lease_expired`` (its camera refuses analytics until it syncs), once per
    check-in: a sync moves the check-in, and the next lapse is announced again. Only
    licences a lease applies to have a check-in (``licensing.leases``)."""
    horizon = now + dt.timedelta(seconds=LEASE_EXPIRING_SECONDS)
    leased = (
        License.objects.filter(checked_in_at__isnull=False, revoked_at__isnull=True)
        .annotate(**leases.license_annotations())
        .filter(leases.lease_ends_before(horizon + dt.timedelta(microseconds=1)))
        .only("id", "customer_id", "sku", "device_id", "expires_at", "batch_id", "checked_in_at")
    )
    for lic in leased.iterator(chunk_size=2000):
        end = leases.lease_end_at(lic.checked_in_at, lic.lease_days)
        if end is None or end > horizon:
            continue
        data = _data(lic) | {
            "lease_end": unix(end),
            "max_offline_days": lic.lease_days,
            "checked_in_at": unix(lic.checked_in_at),
        }
        if lic.batch_id:
            data["batch_id"] = lic.batch_id
        kind = Event.Type.LICENSE_LEASE_EXPIRED if end <= now else Event.Type.LICENSE_LEASE_EXPIRING
        event_once(
            result,
            kind,
            customer_id=lic.customer_id,
            data=data,
            once_key=f"{kind}:{lic.id}:{unix(lic.checked_in_at)}",
        )


@scan_pass
def trials_scan(result: ScanResult, now: dt.datetime) -> None:
    """``license.trial_expiring``, 7 and 1 days before a camera's trial ends (each unit's
    trial runs from its own activation, so one event per camera, not per batch): the
    customer buys, or its analytics stop then. A conversion makes it paid (no longer on
    trial), so a converted camera is never announced. Read through the partial index
    license_trial_expires (the units on trial, not the fleet)."""
    horizon = now + dt.timedelta(days=max(TRIAL_EXPIRING_DAYS))
    ending = License.objects.filter(
        trial=True, revoked_at__isnull=True, expires_at__gt=now, expires_at__lte=horizon
    ).only("id", "customer_id", "sku", "device_id", "expires_at", "batch_id")
    for lic in ending:
        left = (lic.expires_at - now).total_seconds()
        for days in TRIAL_EXPIRING_DAYS:
            if left <= days * DAY:
                event_once(
                    result,
                    Event.Type.LICENSE_TRIAL_EXPIRING,
                    customer_id=lic.customer_id,
                    data=_data(lic) | {"batch_id": lic.batch_id, "days": days},
                    once_key=f"license.trial_expiring:{lic.id}:{unix(lic.expires_at)}:{days}",
                )
